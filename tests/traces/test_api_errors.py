"""Every error answer under /api/ is JSON, and ids that cannot exist are 404s."""

import pytest
from rest_framework.test import APIClient

from traces import selectors

# The routes that were there when this test was written; routes added later join the lists.
ROUTES = ("/api/simulations", "/api/simulations/accuracy", "/api/traces", "/api/traces/{trace_id}")
UNDER_A_TRACE = ("/compare/{other_id}", "/files", "/kernels.csv", "/selection", "/simulations", "/summary")


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        ("/api/traces/%00", "trace \x00 not found"),
        ("/api/traces/run%00x", "trace run\x00x not found"),
    ],
)
def test_ids_that_cannot_exist_are_the_trace_s_404(api, path, detail):
    response = api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": detail}


def detail_404(api, path: str) -> str:
    response = api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert list(body) == ["detail"]
    return body["detail"]


def test_a_path_that_matches_nothing_is_a_404_listing_the_routes(api):
    detail = detail_404(api, "/api/nope")
    assert detail.startswith("no such route: /api/nope (the API's routes are /api/simulations, ")
    assert detail.endswith("; /api/ lists them with links, /api/docs describes them)")
    listed = detail.partition("routes are ")[2].partition(";")[0].split(", ")
    assert set(ROUTES) <= set(listed)


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/api/traces/demo/steps", "/api/traces/demo/steps"),
        # An id with a %2F in it, which no trace id holds, is no route either.
        ("/api/traces/team%2Frun-7", "/api/traces/team/run-7"),
        ("/api/traces/a/b/", "/api/traces/a/b/"),
    ],
)
def test_a_route_missing_under_a_trace_is_not_a_missing_trace(api, path, shown):
    """`/api/traces/ID/steps` says no such route and lists the routes under a trace."""
    detail = detail_404(api, path)
    assert detail.startswith(f"no such route: {shown} (the routes under /api/traces/{{trace_id}} are /")
    assert detail.endswith("; a trace id holds no /)")
    assert "not found" not in detail
    listed = detail.partition(" are ")[2].partition(";")[0].split(", ")
    assert set(UNDER_A_TRACE) <= set(listed)


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
