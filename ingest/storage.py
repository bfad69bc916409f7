"""The bucket as django-storages holds it: `TraceStorage`, the `traces` storage of STORAGES, and
what its S3 requests cost.

The bucket is configured once, in `settings.STORAGES["traces"]` (django-storages' options:
bucket, endpoint, region, client config with its timeouts and retries; credentials from the
standard AWS variables), and built on first use: `traces()` raises ImproperlyConfigured
without a bucket. The modules that talk to S3 take their boto3 client from it
(`client()`, the storage's one client a process) for what django-storages has no call for.

Every client the storage makes reports each request to `meter` through botocore's events, so
that a pass can say what it cost (ingest.metering) and /metrics can count S3's errors.
"""

import logging
import os
import threading
import time

import boto3
from botocore.config import Config
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import storages
from storages.backends.s3 import S3Storage

from cascade import metrics

logger = logging.getLogger(__name__)

ALIAS = "traces"


class TraceStorage(S3Storage):
    """django-storages' S3Storage with one boto3 session for all its threads.

    S3Storage's connection is a resource per thread, each from a session of its own, and a
    session reads botocore's service models for itself: nine threads (a pass's S3 threads and
    its own) held some 150 MB of models where one session's resources hold 20 MB. So the
    connection stays per thread (a boto3 resource is not thread-safe) but comes from the
    storage's one session, made per process (a client's connections do not survive a fork).
    """

    def __init__(self, **options):
        super().__init__(**options)
        if not self.bucket_name:
            raise ImproperlyConfigured(
                "CASCADE_S3_BUCKET is not set: Cascade needs the bucket the profiler uploads to."
            )
        self._options = options
        self._lock = threading.Lock()  # boto3 sessions are not thread-safe; their clients are
        self._session: tuple[int, boto3.session.Session] | None = None  # (pid, session)
        self._local = threading.local()  # this thread's (pid, resource)
        self._client: tuple[int, object] | None = None  # (pid, the process's S3 client)
        self._siblings: dict[str, TraceStorage] = {}

    def _process_session(self) -> boto3.session.Session:
        if self._session is None or self._session[0] != os.getpid():
            session = boto3.session.Session(
                aws_access_key_id=self.access_key,
                aws_secret_access_key=self.secret_key,
                aws_session_token=self.security_token,
                profile_name=self.session_profile or None,
            )
            self._session = (os.getpid(), session)
        return self._session[1]

    @property
    def connection(self):
        """This thread's boto3 S3 resource, its client metered."""
        made = getattr(self._local, "connection", None)
        if made is None or made[0] != os.getpid():
            with self._lock:
                resource = self._process_session().resource(
                    "s3",
                    region_name=self.region_name,
                    use_ssl=self.use_ssl,
                    endpoint_url=self.endpoint_url,
                    config=self.client_config,
                    verify=self.verify,
                )
            watch(resource.meta.client)
            made = self._local.connection = (os.getpid(), resource)
        return made[1]

    @property
    def shared_client(self):
        """The process's S3 client, shared by its threads: boto3's clients are thread-safe (its
        resources are not, hence `connection`'s one per thread), and each client holds its own
        endpoint rules and request machinery (docs/performance.md: what a client a thread cost)."""
        made = self._client
        if made is None or made[0] != os.getpid():
            with self._lock:
                made = self._client
                if made is None or made[0] != os.getpid():
                    s3 = self._process_session().client(
                        "s3",
                        region_name=self.region_name,
                        use_ssl=self.use_ssl,
                        endpoint_url=self.endpoint_url,
                        config=self.client_config,
                        verify=self.verify,
                    )
                    watch(s3)
                    made = self._client = (os.getpid(), s3)
        return made[1]

    def client(self, service: str, *, endpoint_url: str | None):
        """A client of another AWS service (SQS) with this storage's session, region,
        credentials and client config, at `endpoint_url`."""
        # The bucket's signature version is S3's (s3v4); another service signs as its model says.
        config = self.client_config.merge(Config(signature_version=None))
        with self._lock:
            return self._process_session().client(
                service,
                region_name=self.region_name,
                use_ssl=self.use_ssl,
                endpoint_url=endpoint_url,
                config=config,
                verify=self.verify,
            )

    def reached_at(self, endpoint_url: str | None) -> "TraceStorage":
        """This bucket as reached at `endpoint_url` (when given): the host is part of a presigned
        URL's signature, so a URL for clients is signed for the address they reach it at."""
        if not endpoint_url or endpoint_url == self.endpoint_url:
            return self
        with self._lock:
            sibling = self._siblings.get(endpoint_url)
            if sibling is None:
                sibling = TraceStorage(**{**self._options, "endpoint_url": endpoint_url})
                sibling._session = (os.getpid(), self._process_session())  # its models read once
                self._siblings[endpoint_url] = sibling
        return sibling


_building = threading.Lock()


def traces() -> TraceStorage:
    """The `traces` storage, built on first use (again once the tests change STORAGES);
    ImproperlyConfigured without a bucket."""
    with _building:  # the S3 threads may ask at once: one storage, one session
        return storages[ALIAS]


def client():
    """The process's S3 client, the storage's (`shared_client`): for what django-storages has no call for."""
    return traces().shared_client


def bucket_name() -> str:
    return traces().bucket_name


def require_bucket() -> None:
    """ImproperlyConfigured without a bucket, before any work that needs one starts."""
    traces()


# --- What a pass costs: S3 requests counted by botocore's own events ---------------------------


class S3Meter:
    """Requests sent and seconds spent waiting for their responses, across every thread's client."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests = 0
        self.seconds = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self.requests += 1
            self.seconds += seconds

    def snapshot(self) -> tuple[int, float]:
        with self._lock:
            return self.requests, self.seconds


meter = S3Meter()
_sent_at = threading.local()


def watch(s3) -> None:
    """Count `s3`'s requests in `meter` and /metrics, and log why any is retried."""
    events = s3.meta.events
    events.register("before-send.s3", _before_send)
    events.register("response-received.s3", _after_response)
    events.register("needs-retry.s3", _log_retry)


def _before_send(request=None, **kwargs):
    _sent_at.value = time.monotonic()


def _after_response(event_name="", response_dict=None, parsed_response=None, exception=None, **kwargs):
    started = getattr(_sent_at, "value", None)
    if started is not None:
        meter.add(time.monotonic() - started)
        _sent_at.value = None
    metrics.count_s3_request(
        event_name.rpartition(".")[2] or "request", _s3_error(response_dict, parsed_response, exception)
    )


def _s3_error(response_dict, parsed_response, exception) -> str | None:
    """What went wrong with one request, for /metrics: the exception when no answer came (a
    timeout, a reset), else S3's error code (or the HTTP status) of a 4xx or 5xx."""
    if exception is not None:
        return type(exception).__name__
    status = (response_dict or {}).get("status_code") or 0
    if status < 400:
        return None
    return ((parsed_response or {}).get("Error") or {}).get("Code") or str(status)


def _log_retry(attempts=None, caught_exception=None, response=None, operation=None, **kwargs):
    """Says why S3 is retried: a stalled read (CASCADE_S3_READ_TIMEOUT), a reset, a 5xx, SlowDown."""
    if caught_exception is not None:
        reason = f"{type(caught_exception).__name__}: {caught_exception}"
    elif response is not None and response[1].get("Error"):
        status = response[1].get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        code = response[1]["Error"].get("Code")
        if status < 500 and code not in ("SlowDown", "Throttling", "RequestTimeout"):
            return None  # an answer (404, 403), not trouble: nothing is retried
        reason = f"{code} ({status})"
    else:
        return None
    logger.warning("S3 %s, attempt %s: %s", getattr(operation, "name", "request"), attempts, reason)
    return None  # botocore's own retry handler decides
