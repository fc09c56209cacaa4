# Two entry points that do all set-up on a fresh machine (see README.md):
#   make run    - the daemon on its built-in default (tcp:16381 on 127.0.0.1);
#                 ARGS="--config quicx.conf" passes flags to `quicx start`
#   make test   - lint, the test suite and the interop suite, through tox

PYTHON ?= python3
VENV   := .venv

.PHONY: run test java browser clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet '.[test,dev,spark]'
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/pip install --quiet --no-deps --force-reinstall .
	$(VENV)/bin/quicx start $(ARGS)

test: $(VENV)/.installed java browser
	$(VENV)/bin/tox run -e lint,py311,interop

# PySpark (the data pipeline) needs a Java runtime; Debian's is OpenJDK 17.
java:
	@command -v java >/dev/null || { \
	  [ "$$(id -u)" = 0 ] || { echo "make: Java is missing: install a JRE 17 (apt-get install default-jre-headless)"; exit 1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless; }

# The report page's layout test drives Debian's Chromium through chromedriver.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  [ "$$(id -u)" = 0 ] || { echo "make: Chromium is missing: apt-get install chromium chromium-driver (its test is skipped)"; exit 0; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

clean:
	rm -rf $(VENV) .tox build *.egg-info
