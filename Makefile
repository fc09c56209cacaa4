# Two entry points that do all set-up on a fresh machine (see README.md):
#   make run    - the daemon on its built-in default (tcp:16381 on 127.0.0.1);
#                 ARGS="--config quicx.conf" passes flags to `quicx start`
#   make test   - lint, the test suite and the interop suite, through tox (side by side)
#   make test-cluster - the slow tier, alone: the tests on a real Spark standalone
#                 cluster and the load-sensitive ones (the what-if against real runs), and
#                 the Django backend on Python 3.12 (make test-django312); CI runs it
#   make test-failover - the failover matrix's rows (etcd and daemons in a private
#                 network namespace, one fault per row, issue 34's targets); CI runs it
# A second run with nothing changed does no set-up at all.

PYTHON ?= python3
VENV   := .venv
PIP    := $(VENV)/bin/pip --quiet --disable-pip-version-check
# The package is reinstalled (not in editable mode: that hides the twistd
# plugin) only when one of these changed since the last install.
SOURCES := setup.cfg pyproject.toml $(shell find quicx twisted -name '*.py' -not -path '*/__pycache__/*')

.PHONY: run test test-cluster test-django312 java browser haproxy etcd clean

$(VENV)/.installed: setup.cfg pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel
	$(PIP) install '.[test,dev,spark]'
	touch $@

$(VENV)/.built: $(VENV)/.installed $(SOURCES)
	$(PIP) install --no-deps --force-reinstall --no-build-isolation .
	touch $@

run: $(VENV)/.built
	$(VENV)/bin/quicx start $(ARGS)

# The three environments run side by side, as many at once as there are CPUs (lint
# and the suite first, then the interop suite): the suites wait on daemons more than
# they compute.  Their output is printed as it comes (--parallel-live), so each
# suite's summary (passed, skipped, failed) is in the log.
test: $(VENV)/.installed java browser haproxy etcd
	$(VENV)/bin/tox run-parallel --parallel-live -e lint,py311,interop

# A Spark master and worker started from the installed pyspark, on loopback
# (tests/report/test_cluster.py), and the tests marked slow: in the py311 environment,
# one at a time, only those.  Then the Django backend on Python 3.12 (Django 6).
test-cluster: $(VENV)/.installed java
	$(VENV)/bin/tox run -e py311 -- --cluster -m "cluster or slow" tests --ignore=tests/interop
	$(MAKE) test-django312

# The failover matrix (tools/failover, tests/failover/test_matrix.py): each row in its
# own process under `unshare --net --mount` (root); etcd from `make etcd`.
.PHONY: test-failover
test-failover: $(VENV)/.installed etcd
	$(VENV)/bin/tox run -e py311 -- --failover -m failover tests/failover

# Django 6 (django.tasks) needs Python 3.12: the Django backend's tests on it,
# in a venv of their own (make test runs them on 3.11, with the backport).
VENV312 := .venv-django312
# python3.12 on the PATH, else a pyenv's (whose shim may not select it here).
PYTHON312 ?= $(or $(shell command -v python3.12 >/dev/null && python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null),$(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12)))
$(VENV312)/.installed: setup.cfg pyproject.toml Makefile
	@[ -n "$(PYTHON312)" ] || { echo "make: Python 3.12 is missing (Django 6 needs it): install python3.12"; exit 1; }
	$(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/pip --quiet install '.[test,django]'
	touch $@

test-django312: $(VENV312)/.installed
	PYTHONPATH=$(CURDIR) $(VENV312)/bin/python -m pytest -q -p no:cacheprovider tests/contrib/test_django_tasks.py

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

# The load balancer test puts Debian's HAProxy in front of two daemons.
haproxy:
	@test -x /usr/sbin/haproxy || { \
	  [ "$$(id -u)" = 0 ] || { echo "make: HAProxy is missing: apt-get install haproxy (its test is skipped)"; exit 0; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; }

# Replication's lease store: Debian's etcd-server (etcd 3.4), started on loopback by tools/etcd.py.
etcd:
	@test -x /usr/bin/etcd || { \
	  [ "$$(id -u)" = 0 ] || { echo "make: etcd is missing: apt-get install etcd-server (its tests are skipped)"; exit 0; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server; }

clean:
	rm -rf $(VENV) .tox build *.egg-info
