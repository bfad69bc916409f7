"""Every error answer under /api/ is JSON, and ids that cannot exist are 404s (issue 12, findings 5, 8)."""

import pytest
from rest_framework.test import APIClient

from traces import selectors


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        (
            "/api/",
            "not found: /api/ (the API's routes are /api/traces, /api/traces/{trace_id}, its /summary, /selection, /files, /kernels.csv and /simulations[/{name}], /api/traces/{a}/compare/{b}, /api/simulations[/accuracy]; /api/docs describes them)",
        ),
        (
            "/api/nope",
            "not found: /api/nope (the API's routes are /api/traces, /api/traces/{trace_id}, its /summary, /selection, /files, /kernels.csv and /simulations[/{name}], /api/traces/{a}/compare/{b}, /api/simulations[/accuracy]; /api/docs describes them)",
        ),
        ("/api/traces/team%2Frun-7", "trace team/run-7 not found"),
        ("/api/traces/a/b/", "trace a/b not found"),
        ("/api/traces/%00", "trace \x00 not found"),
        ("/api/traces/run%00x", "trace run\x00x not found"),
    ],
)
def test_paths_that_match_nothing_answer_json_404(api, path, detail):
    response = api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": detail}


def test_a_server_error_under_the_api_is_json(api_token, monkeypatch):
    def broken(*args):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(selectors, "trace_summary_rows", broken)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token}")
    response = client.get("/api/traces")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    # The request's id (its X-Request-ID) in the message: the body keeps the reference's shape.
    assert response.json() == {
        "detail": f"server error; the operators have been told (request id {response['X-Request-ID']})"
    }


def test_pages_outside_the_api_keep_django_s_html(admin_client):
    response = admin_client.get("/nowhere/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
