"""The pages still work under the Content-Security-Policy: Chromium's console shows no
violation on the admin (its charts too), the browsable API and Swagger UI.

Debian's chromium and chromium-driver, headless, as tests/traces/test_admin_browser.py.
"""

import pytest
from django.contrib.auth import get_user_model

from tests.traces.browser import OPERATOR, chromium, log_in
from tests.traces.support import ADD, CUBLAS, GEMM, add_run, add_steps
from traces.models import Trace, TraceState

pytestmark = pytest.mark.slow


@pytest.fixture
def browser():
    # The console, where Chromium reports what the policy refused.
    with chromium(implicit_wait=10, console=True) as driver:
        yield driver


def violations(browser) -> list[str]:
    """What the console said about the policy since the last call (reading the log empties it)."""
    return [
        entry["message"]
        for entry in browser.get_log("browser")
        if "Content Security Policy" in entry["message"] or "Content-Security-Policy" in entry["message"]
    ]


@pytest.fixture
def traces(transactional_db):
    timed = Trace.objects.create(
        id="opt-h100", state=TraceState.READY, has_real_timing=True, has_step_timeline=True, source_gpu="H100"
    )
    add_steps(timed, [("step 0 (prefill)", "prefill"), ("step 1 (decode)", "decode")])
    add_run(
        timed, [(GEMM, 6000, 3000, 0), (ADD, 1000, 1000, 0), (CUBLAS, 500, 500, 0), (GEMM, 2000, 1000, 1)]
    )
    other = Trace.objects.create(
        id="opt-a100", state=TraceState.READY, has_real_timing=True, source_gpu="A100"
    )
    add_run(other, [(GEMM, 6000, 5000, None), (ADD, 1000, 2000, None)])
    username, password = OPERATOR
    get_user_model().objects.create_superuser(username, password=password)
    return timed, other


def test_pages_work_under_the_policy(live_server, browser, traces):
    from selenium.webdriver.common.by import By

    url = live_server.url
    log_in(browser, url)
    assert browser.find_element(By.LINK_TEXT, "Browsable Traces API")
    assert violations(browser) == []

    # The trace page and its charts: kernels, steps, calibration.
    browser.get(f"{url}/admin/traces/trace/opt-h100/change/")
    assert browser.find_element(By.ID, "trace-chart").find_elements(By.CSS_SELECTOR, "svg")
    charts = browser.find_elements(By.CSS_SELECTOR, "svg")
    assert len(charts) >= 3, [chart.get_attribute("outerHTML")[:100] for chart in charts]
    assert violations(browser) == []

    # The change list (its filters run admin scripts) and the compare page's chart.
    browser.get(f"{url}/admin/traces/trace/")
    browser.find_element(By.LINK_TEXT, "ready")
    browser.get(f"{url}/admin/traces/trace/compare/?a=opt-a100&b=opt-h100")
    assert browser.find_elements(By.CSS_SELECTOR, "svg")
    assert violations(browser) == []

    # The browsable API, as the operator's session.
    browser.get(f"{url}/api/traces")
    assert "opt-h100" in browser.find_element(By.CSS_SELECTOR, ".response-info").text
    browser.get(f"{url}/api/traces/opt-h100")
    assert '"kernel_count": 4' in browser.find_element(By.CSS_SELECTOR, ".response-info").text
    assert violations(browser) == []
    # Its logout, a form of its own (DRF's link submits from an inline onclick).
    browser.find_element(By.CSS_SELECTOR, ".dropdown-toggle").click()
    browser.find_element(By.ID, "logout").click()
    assert browser.find_element(By.LINK_TEXT, "Log in")
    assert violations(browser) == []

    # Swagger UI: its scripts ran, fetched the schema and drew each operation.
    browser.get(f"{url}/api/docs")
    operations = browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
    assert {op.text.replace("\u200b", "") for op in operations} >= {"/api/traces", "/api/traces/{trace_id}"}
    assert violations(browser) == []

    # The console check sees what the policy refuses: an inline script added to the page.
    browser.execute_script(
        "const s = document.createElement('script'); s.textContent = 'window.ranInline = 1';"
        " document.body.append(s);"
    )
    assert browser.execute_script("return window.ranInline") is None
    assert violations(browser), "an inline script ran, or its refusal was not in the console"
