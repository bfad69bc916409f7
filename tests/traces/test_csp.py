"""A Content-Security-Policy on the admin, the browsable API and /api/docs.

tests/traces/test_csp_browser.py loads the same pages in Chromium and reads its console: the
pages still work under the policy.
"""

import pytest


def directives(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    parts = [part.split() for part in header.split(";") if part.strip()]
    return {name: values for name, *values in parts}


@pytest.mark.parametrize(
    ("path", "client_name"),
    [
        ("/admin/", "admin_client"),
        ("/admin/login/", "client"),
        ("/admin/traces/trace/", "admin_client"),
        ("/api/traces", "admin_client"),  # the browsable API, as a session
        ("/api/docs", "client"),
        ("/api/traces", "client"),  # a 401 in JSON
    ],
)
def test_pages_run_only_cascade_s_own_scripts(request, db, path, client_name):
    client = request.getfixturevalue(client_name)
    response = client.get(path, HTTP_ACCEPT="text/html")
    assert response.status_code in (200, 401)
    policy = directives(response)
    assert policy["script-src"] == ["'self'"]
    assert policy["default-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'self'"]


def test_swagger_ui_starts_from_a_script_file_not_an_inline_script(client, db):
    page = client.get("/api/docs").content.decode()
    assert "<script>" not in page
    script = client.get("/api/docs?script=")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in script.content
