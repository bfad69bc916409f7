"""botocore's data files read lean (ingest.service_models): the same models and
endpoints less their documentation, in plain dicts, held in about half the memory; clients
made from them send the very requests a stock session's send."""

import tracemalloc

import botocore.loaders
import botocore.session
import pytest

from ingest import service_models
from ingest.service_models import LeanJSONFileLoader, use_lean_models

# What an S3 client reads (besides a few small files), and SQS for S3's events.
DATA_FILES = [
    ("endpoints", None),
    ("s3", "service-2"),
    ("s3", "endpoint-rule-set-1"),
    ("sqs", "service-2"),
]


def load(loader: botocore.loaders.Loader, service: str, kind: str | None):
    if kind is None:
        return loader.load_data(service)
    return loader.load_service_model(service, kind)


def stock_loader() -> botocore.loaders.Loader:
    return botocore.loaders.Loader()


def lean_loader() -> botocore.loaders.Loader:
    return botocore.loaders.Loader(file_loader=LeanJSONFileLoader())


def plain(value, *, documentation: bool = True):
    """`value` with plain dicts for botocore's OrderedDicts, documentation emptied if not wanted."""
    if isinstance(value, dict):
        return {
            key: ""
            if key == "documentation" and not documentation
            else plain(item, documentation=documentation)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [plain(item, documentation=documentation) for item in value]
    return value


@pytest.mark.parametrize(("service", "kind"), DATA_FILES[1:])
def test_a_model_is_botocores_less_its_documentation(service, kind):
    stock = load(stock_loader(), service, kind)
    lean = load(lean_loader(), service, kind)
    assert lean == plain(stock, documentation=False)
    assert type(lean) is dict
    assert any("documentation" in shape for shape in lean.get("shapes", {}).values()) or kind != "service-2"


def test_endpoints_are_botocores():
    stock = load(stock_loader(), "endpoints", None)
    assert load(lean_loader(), "endpoints", None) == plain(stock, documentation=False)


def held(build) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = build()
        return tracemalloc.get_traced_memory()[0] - before, built
    finally:
        tracemalloc.stop()


def test_the_lean_files_are_held_in_about_half_the_memory():
    stock, _ = held(lambda: [load(stock_loader(), *names) for names in DATA_FILES])
    lean, _ = held(lambda: [load(lean_loader(), *names) for names in DATA_FILES])
    # Measured: 11.7 MB and 6.1 MB (botocore 1.44).
    assert lean < 0.6 * stock, (lean, stock)


class Sent(Exception):
    """Raised instead of sending: the request as botocore would have sent it."""

    def __init__(self, request):
        self.request = request


def sent_request(session, service: str, call: str, params: dict, **client_args) -> tuple[str, str]:
    """(URL, Authorization less its signature) of `call` by a client of `session`."""

    def capture(request, **kwargs):
        raise Sent(request)

    client = session.create_client(service, aws_access_key_id="k", aws_secret_access_key="s", **client_args)
    client.meta.events.register("before-send", capture)
    with pytest.raises(Sent) as sent:
        getattr(client, call)(**params)
    authorization = sent.value.request.headers.get("Authorization", b"").decode()
    return sent.value.request.url, authorization.split(", Signature=")[0].rsplit("/", 4)[1:]


def lean_session():
    session = botocore.session.get_session()
    use_lean_models(session)
    return session


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-3", "cn-north-1", "us-gov-west-1"])
@pytest.mark.parametrize(
    ("service", "call", "params"),
    [
        ("s3", "head_object", {"Bucket": "cascade-traces", "Key": "runs/a/metadata.json"}),
        ("s3", "list_objects_v2", {"Bucket": "cascade.traces", "Prefix": "runs/"}),
        ("sqs", "receive_message", {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/cascade"}),
        ("sts", "get_caller_identity", {}),
        (
            "sts",
            "assume_role_with_web_identity",
            {"RoleArn": "arn:aws:iam::1:role/r", "RoleSessionName": "cascade", "WebIdentityToken": "token"},
        ),
        ("sso", "get_role_credentials", {"roleName": "r", "accountId": "1", "accessToken": "t"}),
        ("sso-oidc", "create_token", {"clientId": "c", "clientSecret": "s", "grantType": "refresh_token"}),
    ],
)
def test_a_lean_client_sends_what_a_stock_one_sends(region, service, call, params):
    stock = sent_request(botocore.session.get_session(), service, call, params, region_name=region)
    assert sent_request(lean_session(), service, call, params, region_name=region) == stock


def test_and_at_an_endpoint_of_its_own():
    args = {"region_name": "us-east-1", "endpoint_url": "http://127.0.0.1:9000"}
    params = {"Bucket": "cascade-traces", "Key": "runs/a/metadata.json"}
    stock = sent_request(botocore.session.get_session(), "s3", "get_object", params, **args)
    assert sent_request(lean_session(), "s3", "get_object", params, **args) == stock


def test_a_session_reads_its_files_through_the_lean_loader(monkeypatch):
    # botocore's public parts (Loader's file_loader, the data_loader component): this fails if
    # an upgrade stops using them. A loader of its own, not the process's, which has read them.
    service_models.lean_loader.cache_clear()
    read = []
    original = LeanJSONFileLoader.load_file
    monkeypatch.setattr(
        LeanJSONFileLoader, "load_file", lambda self, path: read.append(path) or original(self, path)
    )
    lean_session().create_client(
        "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    assert any(path.endswith("s3/2006-03-01/service-2") for path in read)
    assert any(path.endswith("/endpoints") for path in read)
    service_models.lean_loader.cache_clear()  # the next session reads into a loader of its own


def test_the_data_path_is_searched_first(tmp_path, monkeypatch):
    # AWS_DATA_PATH, as botocore's own loader reads it: a model there wins over botocore's.
    model = tmp_path / "s3" / "2006-03-01"
    model.mkdir(parents=True)
    (model / "service-2.json").write_text('{"metadata": {"documentation": "x"}, "shapes": {}}')
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    session = botocore.session.get_session()
    use_lean_models(session)
    loader = session.get_component("data_loader")
    assert loader.load_service_model("s3", "service-2")["metadata"] == {"documentation": ""}
