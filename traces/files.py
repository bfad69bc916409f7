"""`GET /api/traces/{trace_id}/files`: a run's files as presigned S3 GETs, so that a client
downloads them from the bucket directly and never a byte of a trace file passes through the
web server (MLflow moved to presigned URLs when large artifact downloads through its server
timed out).

The files come from the trace's last listing (`Trace.files`) and its metadata.json: one query,
no request to S3 (presigning is an HMAC per key). Ingestion answers which keys they are and
signs them (`traces.signals.files_requested`), since the bucket is its concern, and leaves out
(under `refused`) any key whose path would leave the client's folder.

A simulation's upload goes the other way, the same way: presigned PUTs for its files
(`simulation_upload`), then its completion (`simulation_upload_complete`), both answered by
ingestion (`simulation_upload_requested`, `simulation_upload_completed`).
"""

from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from traces.models import Trace
from traces.signals import files_requested, simulation_upload_completed, simulation_upload_requested


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
    downloads = answer(answers, "files_requested")
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
        raise ImproperlyConfigured(
            f"no installed app answers traces.signals.{signal} (is `ingest` installed?)"
        )
    return answers[0][1]


def simulation_upload(trace_id: str, name: str, files: list[dict]) -> dict:
    """The upload's answer: a presigned PUT (or a multipart upload) per file, simulation.json
    last. The trace is known to be ready; ingestion refuses (UploadRefused) what its folder
    does not accept."""
    seconds = settings.CASCADE_PRESIGN_SECONDS
    expires_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=seconds)
    answers = simulation_upload_requested.send(
        sender=Trace, trace_id=trace_id, name=name, files=files, seconds=seconds
    )
    files = answer(answers, "simulation_upload_requested")
    return {"trace_id": trace_id, "name": name, "expires_at": format_expiry(expires_at), "files": files}


def simulation_upload_complete(trace_id: str, name: str, multipart: list[dict]) -> dict:
    """The completion's answer: the simulation's state once registered, its read begun."""
    answers = simulation_upload_completed.send(
        sender=Trace, trace_id=trace_id, name=name, multipart=multipart
    )
    state = answer(answers, "simulation_upload_completed")
    url = f"/api/traces/{quote(trace_id, safe='+@=')}/simulations/{quote(name, safe='')}"
    return {"trace_id": trace_id, "name": name, "state": state, "url": url}
