"""Fixtures of the fault suite: the proxies, started before each test and stopped after it."""

import pytest

from tests.faults.proxies import S3FaultProxy


def point_traces_storage_at(settings, url: str, **options) -> None:
    """Cascade's `traces` storage (and CASCADE_S3_ENDPOINT_URL) at `url`, as tests/conftest.py's
    `s3` fixture points it at moto; `options` go to django-storages (e.g. `client_config`)."""
    traces = settings.STORAGES["traces"]
    settings.CASCADE_S3_ENDPOINT_URL = url
    settings.STORAGES = {
        **settings.STORAGES,
        "traces": {**traces, "OPTIONS": {**traces["OPTIONS"], "endpoint_url": url, **options}},
    }


@pytest.fixture
def s3_proxy(s3, s3_server, settings):
    """moto behind an S3FaultProxy, with Cascade reading the bucket through the proxy.

    Uploads go around it: the `s3` client (and `runs.upload`) put objects straight into moto,
    as the profiler's harness would into a healthy S3.
    """
    with S3FaultProxy(s3_server) as proxy:
        point_traces_storage_at(settings, proxy.url)
        yield proxy
