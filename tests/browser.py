"""
Headless Debian Chromium driven through chromedriver by selenium, for the
tests of pages (the report's, the dashboard's); a test without them is
skipped, saying what to install.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

CHROMIUM = os.environ.get("QUICX_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("QUICX_CHROMEDRIVER", "/usr/bin/chromedriver")


def headless_chromium(width: int, height: int) -> Any:
    """A browser with a window of C{width} by C{height}, its console's messages kept."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"no {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
