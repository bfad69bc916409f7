"""The API's messages as a newcomer meets them: a 401 says which header to send, a
token with spaces around it works, `/api/` lists the routes, and the schema is built once."""

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

USE_BEARER = "use `Authorization: Bearer <token>`"


def unauthorized(header: str) -> str:
    response = APIClient().get("/api/traces", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response["Content-Type"] == "application/json"
    assert list(response.json()) == ["detail"]
    return response.json()["detail"]


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ("Token cas_abc", f"the Authorization header's scheme is 'Token', which Cascade does not read; {USE_BEARER}"),
        ("Basic dXNlcjpwYXNz", f"the Authorization header's scheme is 'Basic', which Cascade does not read; {USE_BEARER}"),
        ("cas_abc", f"the Authorization header's scheme is 'cas_abc', which Cascade does not read; {USE_BEARER}"),
        ("Bearer", f"the Authorization header has no token; {USE_BEARER}"),
        ("Bearer ", f"the Authorization header has no token; {USE_BEARER}"),
        ("Bearer cas_a cas_b", f"the Authorization header has 2 words after Bearer (a token has no spaces); {USE_BEARER}"),
    ],
)  # fmt: skip
def test_a_header_cascade_cannot_read_is_a_401_that_says_what_to_send(db, header, detail):
    assert unauthorized(header) == detail


@pytest.mark.parametrize(
    "spaced", ["Bearer  {token}", "Bearer {token} ", "  Bearer {token}\t", "bearer {token}"]
)
def test_a_token_with_spaces_around_it_is_trimmed(api_token, spaced):
    response = APIClient().get("/api/traces", HTTP_AUTHORIZATION=spaced.format(token=api_token))
    assert response.status_code == 200


def test_no_header_is_the_401_it_was(db):
    response = APIClient().get("/api/traces")
    assert response.status_code == 401
    assert response.json() == {"detail": "Authentication credentials were not provided."}


def test_the_api_index_lists_every_route_with_a_link(client_anon, db):
    response = client_anon.get("/api/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    body = response.json()
    schema = client_anon.get("/api/schema?format=json").json()
    assert [route["path"] for route in body["routes"]] == sorted(schema["paths"])
    by_path = {route["path"]: route for route in body["routes"]}
    assert by_path["/api/traces"] == {
        "path": "/api/traces",
        "url": "http://testserver/api/traces",
        "methods": ["GET"],
        "summary": "List traces",
    }
    assert (
        by_path["/api/traces/{trace_id}/summary"]["url"] == "http://testserver/api/traces/{trace_id}/summary"
    )
    assert (body["schema"], body["docs"]) == ("http://testserver/api/schema", "http://testserver/api/docs")
    assert client_anon.get("/api").status_code == 200  # without the slash too


def test_the_api_index_renders_in_the_browsable_api_with_links(client_anon, db):
    response = client_anon.get("/api/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b'<a href="http://testserver/api/traces"' in response.content


def test_the_schema_is_generated_once_per_process(client_anon, db, monkeypatch):
    from traces import openapi

    openapi.forget_schemas()
    builds = []
    real = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):
        builds.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    first = client_anon.get("/api/schema?format=json")
    for _ in range(3):
        assert client_anon.get("/api/schema?format=json").content == first.content
    client_anon.get("/api/")
    client_anon.get("/api/nowhere")
    assert len(builds) == 1
