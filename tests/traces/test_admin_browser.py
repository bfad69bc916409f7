"""The admin in a real browser: log in, find the failed trace, read why it failed.

Debian's chromium and chromium-driver, headless; `.ci/install-browser` installs them.
"""

import pytest

from tests.traces.browser import log_in
from traces.models import Trace, TraceState

pytestmark = pytest.mark.slow


def result_rows(browser) -> list[dict[str, str]]:
    """The change list's rows as shown: each cell's text under its column's header (a sorted
    column's header also shows its sorting priority, a number)."""
    return browser.execute_script(
        """
        const table = document.getElementById("result_list");
        const headers = [...table.tHead.rows[0].cells].map(c => c.textContent.trim().replace(/^\\d+\\s*/, ""));
        return [...table.tBodies[0].rows].map(
            row => Object.fromEntries([...row.cells].map((cell, i) => [headers[i], cell.innerText.trim()])));
        """
    )


def fieldset(browser, heading: str):
    from selenium.webdriver.common.by import By

    return browser.find_element(By.XPATH, f"//fieldset[.//h2[normalize-space()='{heading}']]")


def scrolls_in_its_own_box(browser, element) -> bool:
    """Whether the mouse wheel over `element`'s content scrolls a box inside it, the page
    staying where it is."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    from selenium.webdriver.support.ui import WebDriverWait

    box = browser.execute_script(
        "return [...arguments[0].querySelectorAll('*')].find(e => e.scrollHeight > e.clientHeight + 50)",
        element,
    )
    if box is None:
        return False
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'})", box)
    page_y = browser.execute_script("return window.scrollY")
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(box), 0, 200).perform()
    # The browser scrolls smoothly, over a few frames: wait for the box to move (at most 5 s).
    try:
        WebDriverWait(browser, 5, poll_frequency=0.05).until(
            lambda _: browser.execute_script("return arguments[0].scrollTop", box) > 0
        )
    except TimeoutException:
        return False
    return browser.execute_script("return window.scrollY") == page_y


def test_operator_finds_a_failed_trace_and_sees_why(live_server, browser, operator, make_kernels, tmp_path):
    from selenium.webdriver.common.by import By

    Trace.objects.create(id="vecadd-ok", state=TraceState.READY, model="vecadd", kernel_count=3)
    failed = Trace.objects.create(
        id="llama.7b+run@2026=11",
        state=TraceState.FAILED,
        model="llama-7b",
        source_gpu="NVIDIA H100 80GB HBM3",
        trace_gpu_arch="sm_90",
        suggested_sim_config="SM90_H100",
        error="traces/stats_ctx_0x7f3a: line 4812: expected 12 columns, got 9",
        files=[
            {"key": "accelsim-traces/llama.7b+run@2026=11/metadata.json", "bytes": 412, "etag": '"e1"'},
            {
                "key": "accelsim-traces/llama.7b+run@2026=11/traces/stats_ctx_0x7f3a",
                "bytes": 981234,
                "etag": '"e2"',
            },
            # A long run: its file list and metadata.json must not push the page down.
            *(
                {
                    "key": f"accelsim-traces/llama.7b+run@2026=11/traces/kernel-{n}.trace.xz",
                    "bytes": n,
                    "etag": '"k"',
                }
                for n in range(1, 61)
            ),
        ],
        bytes=981646,
    )
    failed.metadata = {
        "status": "ok",
        "model": "llama-7b",
        "layers": ["attn", "mlp"],
        "files": [{"key": f"traces/kernel-{n}.trace.xz", "bytes": n} for n in range(1, 61)],
    }
    failed.save()
    make_kernels(failed, [1000 * (n % 17 + 1) for n in range(1, 41)], ctx="0x7f3a")

    log_in(browser, live_server.url)
    assert "Cascade" in browser.title
    api_link = browser.find_element(By.LINK_TEXT, "Browsable Traces API")
    assert api_link.get_attribute("href").endswith("/api/traces")
    assert browser.execute_script("return arguments[0].getClientRects().length", api_link) == 1, "it wraps"

    browser.find_element(By.LINK_TEXT, "Traces").click()
    # The state filter's "failed".
    browser.find_element(By.LINK_TEXT, "failed").click()
    browser.save_screenshot(str(tmp_path / "failed-traces.png"))
    # Every column fits a 1400 px window: the list does not scroll sideways.
    assert browser.execute_script(
        "return document.getElementById('result_list').getBoundingClientRect().right"
        " <= document.documentElement.clientWidth"
    )
    rows = result_rows(browser)
    assert [(row["Id"], row["State"]) for row in rows] == [("llama.7b+run@2026=11", "failed")]

    browser.find_element(By.LINK_TEXT, "llama.7b+run@2026=11").click()
    error = browser.find_element(By.ID, "trace-error")
    assert error.is_displayed()
    assert "expected 12 columns, got 9" in error.text
    # metadata.json as written out, line by line, indented.
    metadata = fieldset(browser, "metadata.json")
    assert '"layers": [\n    "attn",\n    "mlp"\n  ],' in metadata.text
    # The kernels come first; metadata.json and the files scroll in boxes of their own.
    kernels = browser.find_element(By.ID, "trace-kernels")
    assert kernels.location["y"] < metadata.location["y"]
    files = fieldset(browser, "Files")
    assert scrolls_in_its_own_box(browser, metadata)
    assert scrolls_in_its_own_box(browser, files)
    assert "traces/stats_ctx_0x7f3a" in files.text
    contexts = browser.find_element(By.ID, "trace-contexts").text
    assert "0x7f3a" in contexts and "40" in contexts
    # A bar per kernel, each with its tooltip.
    bars = browser.find_elements(
        By.XPATH, "//*[@id='trace-chart']//*[local-name()='g'][*[local-name()='title']]"
    )
    assert len(bars) == 40
    assert (
        browser.find_element(By.LINK_TEXT, "Browse them in the kernel list")
        .get_attribute("href")
        .endswith("/admin/traces/kernel/?trace=llama.7b%2Brun%402026%3D11")
    )
    browser.execute_script("window.scrollTo(0, 0)")

    page, chart = tmp_path / "failed-trace.png", tmp_path / "failed-trace-chart.png"
    browser.save_screenshot(str(page))
    browser.find_element(By.ID, "trace-chart").screenshot(str(chart))
    assert page.stat().st_size > 0 and chart.stat().st_size > 0
    print(f"screenshots in {tmp_path}")
