"""Fixtures of the fault suite: the proxies, started before each test and stopped after it."""

import pytest

from tests.faults.proxies import S3FaultProxy
from tests.helpers import point_traces_storage_at


@pytest.fixture
def s3_proxy(s3, s3_server, settings):
    """moto behind an S3FaultProxy, with Cascade reading the bucket through the proxy.

    Uploads go around it: the `s3` client (and `runs.upload`) put objects straight into moto,
    as the profiler's harness would into a healthy S3.
    """
    with S3FaultProxy(s3_server) as proxy:
        point_traces_storage_at(settings, proxy.url)
        yield proxy
