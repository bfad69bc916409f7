"""The admin's pages as a researcher reads them, in headless Chromium at 1280 px:
no page scrolls sideways, every chart has a legend and axes with units, kernel names are
shown whole (demangled, wrapping; the symbol on hover), GPU names whole, sizes in one unit
system, labels in English.

The two sample runs (`samples/`, an OPT-125m decode on an A100 and on an H100: steps, measured
times, two contexts) are uploaded to moto and ingested by a poll pass, as the demo does.
Screenshots of every page are kept for CI as artifacts under `var/screenshots/admin-pages/`
(gitignored), one PNG a page, named after it.
"""

import re
from pathlib import Path

import pytest

from ingest.passes import poll_bucket
from tests.traces.browser import log_in
from tests.traces.support import cxx_filt
from traces.models import Trace, TraceState

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "screenshots" / "admin-pages"
SAMPLES = {
    "a100": ROOT / "samples" / "sample__facebook_opt-125m__a100-e2e",
    "h100": ROOT / "samples" / "sample__facebook_opt-125m__h100-e2e",
}
WIDTH = 1280


A100 = "sample__facebook_opt-125m__a100-e2e"
H100 = "sample__facebook_opt-125m__h100-e2e"


@pytest.fixture
def samples(s3, transactional_db):
    """The demo's samples, uploaded and read as the demo does."""
    from django.core.management import call_command

    call_command("load_samples")
    poll_bucket()
    states = dict(Trace.objects.filter(pk__in=[A100, H100]).values_list("id", "state"))
    assert states == {A100: TraceState.READY, H100: TraceState.READY}, states
    return states


def log_in_at_1280_px(driver, live_server):
    driver.set_window_size(WIDTH, 1000)
    log_in(driver, live_server.url)
    # The window's inner width is the page's: 1280 CSS pixels of viewport.
    inner = driver.execute_script("return window.innerWidth")
    driver.set_window_size(WIDTH + (WIDTH - inner), 1000)
    assert driver.execute_script("return window.innerWidth") == WIDTH


def visit(driver, url: str, name: str) -> None:
    """Open `url`, then keep a full-height screenshot of it as `name`.png."""
    driver.get(url)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(driver.get_window_size()["width"], min(max(height, 800), 12000) + 140)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    # Each chart and table on its own too, at its size: what a reader looks at.
    for index, element in enumerate(
        driver.find_elements("css selector", "figure.chart, #result_list, table")
    ):
        if element.size["height"] and element.size["width"]:
            element.screenshot(str(SCREENSHOTS / f"{name}-{index:02d}.png"))
    driver.set_window_size(driver.get_window_size()["width"], 1000)


def horizontal_overflow(driver) -> int:
    return driver.execute_script("return document.documentElement.scrollWidth") - WIDTH


def charts(driver) -> list:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, "figure.chart")


def assert_charts_read(driver) -> None:
    """Every chart has a legend and two axes, each axis with its unit in its title."""
    found = charts(driver)
    for chart in found:
        label = chart.get_attribute("aria-label")
        assert chart.find_elements("css selector", ".chart-legend"), f"{label}: no legend"
        for axis in ("x", "y"):
            titles = chart.find_elements("css selector", f".axis-title.{axis}")
            assert titles, f"{label}: no {axis} axis title"
    return found


def test_the_trace_page_reads_well_at_1280_px(live_server, browser, operator, samples):
    from selenium.webdriver.common.by import By

    log_in_at_1280_px(browser, live_server)
    visit(browser, f"{live_server.url}/admin/traces/trace/", "trace-list")
    assert horizontal_overflow(browser) <= 0
    gpus = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "td.field-source_gpu_column")]
    assert sorted(gpus) == sorted(Trace.objects.values_list("source_gpu", flat=True)), "GPU names whole"
    sizes = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "td.field-size")]
    assert all(re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB|GiB)", size) for size in sizes), sizes

    visit(browser, f"{live_server.url}/admin/traces/trace/{H100}/change/", "trace-page")
    assert horizontal_overflow(browser) <= 0
    page = browser.find_element(By.TAG_NAME, "body").text
    assert "(decode) (decode)" not in page and "(prefill) (prefill)" not in page
    assert not re.search(r"\b1 worst kernels\b|\bThe 1 \w+ kernels\b", page)
    found = assert_charts_read(browser)
    assert len(found) >= 3, "the per-kernel chart, the mix and the steps"
    # The kernel mix's names: demangled, whole, the symbol on hover.
    names = browser.find_elements(By.CSS_SELECTOR, "#trace-mix td.kernel-name a")
    assert names
    for link in names:
        text = browser.execute_script("return arguments[0].textContent", link)
        assert "…" not in text, text
        assert link.get_attribute("title"), "the symbol on hover"


def test_the_kernel_list_shows_names_demangled_and_whole(live_server, browser, operator, samples):
    from selenium.webdriver.common.by import By

    log_in_at_1280_px(browser, live_server)
    visit(browser, f"{live_server.url}/admin/traces/kernel/?trace={H100}", "kernel-list")
    assert horizontal_overflow(browser) <= 0
    cells = browser.find_elements(By.CSS_SELECTOR, "td.field-short_name code.kernel-name-text")
    assert cells
    mangled = []
    for cell in cells:
        symbol = cell.get_attribute("title")
        text = browser.execute_script("return arguments[0].textContent", cell)
        assert "…" not in text
        if text == symbol and symbol.startswith("_Z"):
            mangled.append(symbol)
    # Shown mangled only where c++filt cannot read the symbol either (the samples' generated
    # vLLM and FlashAttention 3 names are not valid symbols).
    assert cxx_filt(mangled) == mangled


def test_the_compare_page_fits_and_charts_both_runs(live_server, browser, operator, samples):
    from selenium.webdriver.common.by import By

    log_in_at_1280_px(browser, live_server)
    for by in ("name", "demangled"):
        visit(
            browser,
            f"{live_server.url}/admin/traces/trace/compare/?a={A100}&b={H100}&by={by}",
            f"compare-by-{by}",
        )
        assert horizontal_overflow(browser) <= 0
        found = assert_charts_read(browser)
        per_kernel_time = [chart for chart in found if "time" in (chart.get_attribute("aria-label") or "")]
        assert per_kernel_time, "the two runs' per-kernel times as a chart"
        legend = per_kernel_time[0].find_element(By.CSS_SELECTOR, ".chart-legend").text
        assert "a100" in legend and "h100" in legend


def test_the_browsable_api_pages_a_700_kernel_trace(live_server, browser, operator, samples):
    from selenium.webdriver.common.by import By

    log_in_at_1280_px(browser, live_server)
    visit(browser, f"{live_server.url}/api/traces", "api-list")
    links = [
        link.get_attribute("href") for link in browser.find_elements(By.CSS_SELECTOR, ".response-info a")
    ]
    assert f"{live_server.url}/api/traces/{H100}" in links, "each trace links to its detail"
    visit(browser, f"{live_server.url}/api/traces/{H100}", "api-detail")
    # 700 kernels made the page 16,000 px tall: a page of them now, and links to the others.
    assert browser.execute_script("return document.documentElement.scrollHeight") < 8000
    assert f"{live_server.url}/api/traces/{H100}?kernels_page=2" in [
        link.get_attribute("href") for link in browser.find_elements(By.CSS_SELECTOR, ".response-info a")
    ]
