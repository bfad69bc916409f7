"""Request bodies under /api/: bounded in size and depth, every way a body is not JSON a 400 in
the API's error style (`{"detail": one sentence}`), and a POST to no route a JSON 404.

A 2 KB body of 1,000 nested `[` on an upload's `/upload` or `/complete` was a 500 (a
RecursionError out of DRF's JSON parser); a POST to an /api/ path with no route was Django's
HTML CSRF page.
"""

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import token_client
from tests.ingest.support import PROPERTY
from traces.models import TraceState
from traces.parsers import MAX_DEPTH, BodyTooLarge, BoundedJSONParser

ROUTES = [
    "/api/traces/run/simulations/sim-a/upload",
    "/api/traces/run/simulations/sim-a/complete",
]


@pytest.fixture
def writer(make_trace):
    make_trace("run", state=TraceState.READY)
    return token_client("write")


def post(client, path: str, body: bytes):
    return client.generic("POST", path, body, content_type="application/json")


def assert_400(answer, detail: str) -> None:
    assert answer.status_code == 400, answer.content
    assert answer["Content-Type"] == "application/json"
    body = answer.json()
    assert list(body) == ["detail"] and body["detail"].startswith(detail), body
    assert "\n" not in body["detail"]


@pytest.mark.parametrize("path", ROUTES)
def test_a_2_kb_body_of_1000_nested_brackets_is_a_400(writer, path):
    body = b"[" * 1000 + b"]" * 1000
    assert len(body) == 2000
    assert_400(post(writer, path, body), f"the request body is nested more than {MAX_DEPTH} levels deep")


@pytest.mark.parametrize("path", ROUTES)
def test_a_body_nested_past_the_depth_bound_is_a_400_whatever_its_shape(writer, path):
    body = b'{"files": ' + b'{"a": ' * MAX_DEPTH + b"1" + b"}" * MAX_DEPTH + b"}"
    assert_400(post(writer, path, body), f"the request body is nested more than {MAX_DEPTH} levels deep")


def test_a_body_over_the_size_bound_is_a_413_read_no_further(writer, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = b'{"files": [' + b", ".join([b'{"name": "sim.log", "size": 1}'] * 100) + b"]}"
    answer = post(writer, ROUTES[0], body)
    assert answer.status_code == 413, answer.content
    assert answer.json() == {
        "detail": "the request body is more than 1000 bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)"
    }


def test_the_parser_reads_one_byte_past_the_bound_at_most(settings):
    """A chunked body has no Content-Length to refuse it by: the stream is read to the bound."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    stream = io.BytesIO(b"[" + b"1," * 10**6 + b"1]")
    with pytest.raises(BodyTooLarge):
        BoundedJSONParser().parse(stream)
    assert stream.tell() == 1001


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"{", "the request body is not valid JSON: Expecting property name"),
        (b'{"files": NaN}', "the request body is not valid JSON: NaN is not a JSON value"),
        (b'{"files": ' + b"9" * 5000 + b"}", "the request body is not valid JSON: Exceeds the limit"),
        (b"\xff\xfe", "the request body is not utf-8 text"),
    ],
    ids=["cut", "nan", "5000-digits", "not-utf-8"],
)
def test_a_body_that_is_not_json_is_a_400_in_one_sentence(writer, body, detail):
    assert_400(post(writer, ROUTES[0], body), detail)


@pytest.mark.django_db
@PROPERTY
@given(body=st.binary(max_size=200) | st.text(alphabet='[]{}":,0123456789e.-', max_size=3000).map(str.encode))
def test_any_body_is_an_answer_never_a_server_error(body):
    """Through a write token's client (built in the test: hypothesis runs it many times)."""
    answer = post(token_client("write"), ROUTES[0], body)
    assert answer.status_code < 500, answer.content
    assert answer["Content-Type"] == "application/json"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_a_write_to_an_api_path_with_no_route_is_a_json_404(writer, client_anon, method):
    for client in (writer, client_anon):
        answer = client.generic(method, "/api/no/such/route", b"{}", content_type="application/json")
        assert answer.status_code == 404, answer.content
        assert answer["Content-Type"] == "application/json"
        assert answer.json()["detail"].startswith("no such route: /api/no/such/route")
