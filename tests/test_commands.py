"""Commands as a new user meets them: a wrong setup gets one clear line, not a traceback."""

from pathlib import Path

import pytest

from tests.support import manage

# Each test starts manage.py as a new user would.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    """A var dir whose embedded database is migrated, once for the tests below: they only read it."""
    var_dir = tmp_path_factory.mktemp("migrated") / "var"
    result = manage(var_dir, "migrate", "-v", "0")
    assert result.returncode == 0, result.stderr
    return var_dir


@pytest.mark.parametrize("args", [["create_token", "me"], ["ingest_traces"]])
def test_an_unmigrated_database_says_to_migrate(tmp_path, args):
    result = manage(tmp_path / "var", *args, CASCADE_S3_BUCKET="some-bucket")
    assert result.returncode == 1
    assert "has no tables yet: run `python manage.py migrate` first" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({}, "CASCADE_S3_BUCKET is not set", id="without-a-bucket-says-which-variable"),
        pytest.param(
            {
                "CASCADE_S3_BUCKET": "b",
                "CASCADE_S3_ENDPOINT_URL": "http://127.0.0.1:9",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "x",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_MAX_ATTEMPTS": "1",
            },
            "cannot list the bucket b: Could not connect to the endpoint URL",
            id="with-an-unreachable-endpoint-says-so",
        ),
    ],
)
def test_ingest_refuses_in_words(migrated, env, message):
    result = manage(migrated, "ingest_traces", **env)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
