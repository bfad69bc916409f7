"""`GET /api/traces/{trace_id}/files`: a run's files as presigned S3 GETs, so that a client
downloads them from the bucket directly and never a byte of a trace file passes through the
web server (MLflow moved to presigned URLs when large artifact downloads through its server
timed out).

The files come from the trace's last listing (`Trace.files`) and its metadata.json: one query,
no request to S3 (presigning is an HMAC per key). Ingestion answers which keys they are and
signs them (`traces.signals.files_requested`), since the bucket is its concern, and leaves out
(under `refused`) any key whose path would leave the client's folder.
"""

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from traces.models import Trace
from traces.signals import files_requested


def format_expiry(value: datetime) -> str:
    """`2026-11-08T09:59:02Z`: to the second, as the URLs' own X-Amz-Date is."""
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def trace_files(trace_id: str) -> dict | None:
    """The /files answer, or None when there is no such trace.

    `expires_at` is taken before the URLs are signed and rounded down, so that every URL is
    valid at least until then.
    """
    row = Trace.objects.filter(pk=trace_id).values_list("files", "metadata_json", "state", "error").first()
    if row is None:
        return None
    listing, metadata_json, state, error = row
    seconds = settings.CASCADE_PRESIGN_SECONDS
    expires_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=seconds)
    answers = files_requested.send(
        sender=Trace, trace_id=trace_id, files=listing, metadata_json=metadata_json, seconds=seconds
    )
    downloads = answer(answers, "traces.signals.files_requested")
    return {
        "trace_id": trace_id,
        "state": state,  # a client pulls a ready trace only, and says why not otherwise
        "error": error,
        "expires_at": format_expiry(expires_at),
        "files": downloads["files"],
        "refused": downloads["refused"],
    }


def answer(answers: list, signal: str):
    if not answers:
        raise ImproperlyConfigured(f"no installed app answers {signal} (is `ingest` installed?)")
    return answers[0][1]
