"""Headless Chromium for the admin's browser tests (tests/traces/test_*_browser.py): Debian's
chromium and chromium-driver, which `.ci/install-browser` installs; a test skips, saying why,
where they are absent."""

import contextlib
import shutil
import tempfile
from pathlib import Path

import pytest

OPERATOR = ("operator", "operator-pass-123")
# How long a page may take to load before a browser test fails: a liveness bound, never a figure.
PAGE_LOADS_WITHIN = 60

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Without the background-networking flags Chromium keeps calling Google's hosts, which
# this machine's closed network refuses.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,2800",
)


@contextlib.contextmanager
def chromium(*, implicit_wait: float, console: bool = False):
    """Headless Chromium through chromedriver, with a profile of its own; the test is skipped
    where they are not installed. `console`: keep what the page's console says (get_log)."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        pytest.skip(
            f"needs Debian's chromium and chromium-driver ({', '.join(missing)} missing): run .ci/install-browser"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="cascade-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    if console:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(implicit_wait)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def log_in(driver, base_url: str, username: str = OPERATOR[0], password: str = OPERATOR[1]) -> None:
    """Log in through the admin's form and wait for the page it leads to: a `get` sent before
    the login's POST and redirect finish races them, and lands on the admin's index or its form."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base_url}/admin/")
    form = driver.find_element(By.ID, "login-form")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait = WebDriverWait(driver, PAGE_LOADS_WITHIN)
    wait.until(expected_conditions.staleness_of(form))
    # The logged-in admin's header: the login form has none.
    wait.until(expected_conditions.presence_of_element_located((By.ID, "user-tools")))
