"""Writes through presigned URLs, the other way from `traces.files`' downloads: what a
simulation's upload (simulations.views) and a run's push share, a request body read and checked
(`validated`), and a pushed run's answers (`trace_push`, `trace_push_complete`), asked of
ingestion through `traces.signals` (`push_requested`, `push_completed`): the bucket, the keys and
who owns a run are its concern.
"""

from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ParseError, PermissionDenied

from traces.files import answer, format_expiry
from traces.models import Trace
from traces.parsers import BodyTooLarge
from traces.signals import (
    UploadConflict,
    UploadForbidden,
    UploadMissing,
    UploadRefused,
    push_completed,
    push_requested,
)

# A request body past this is a 413 before it is read: a dozen files, a log's few hundred parts,
# or a run's few thousand files.
UPLOAD_BODY_MAX = 1024**2


class UploadClash(APIException):
    """409: the upload would replace what must stay (a ready trace, a finished simulation)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


@contextmanager
def refused_as(
    missing=UploadMissing, forbidden=UploadForbidden, conflict=UploadConflict, refused=UploadRefused
):
    """A refusal as the API's errors: `missing` 404, `forbidden` 403 naming the owner, `conflict`
    409, else `refused` 400; each in the refuser's one sentence. By default, what ingestion
    refuses in an upload; the sweeps pass their own four."""
    try:
        yield
    except missing as error:
        raise NotFound(str(error)) from None
    except forbidden as error:
        raise PermissionDenied(str(error)) from None
    except conflict as error:
        raise UploadClash(str(error)) from None
    except refused as error:
        raise ParseError(str(error)) from None


def refusals():
    """What ingestion refuses in an upload, as the API's errors (`refused_as`)."""
    return refused_as()


def validated(serializer_class, request) -> dict:
    """The body checked by its serializer; the first problem a 400 in the API's one-sentence
    shape (`files[1].size: ...`), not DRF's field map."""
    length = request.META.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > UPLOAD_BODY_MAX:
        raise BodyTooLarge(f"the request body is {length} bytes, more than {UPLOAD_BODY_MAX}")
    serializer = serializer_class(data=request.data)
    if not serializer.is_valid():
        raise ParseError(first_error(serializer.errors))
    return serializer.validated_data


def first_error(errors, where: str = "") -> str:
    if isinstance(errors, dict):
        key, value = next(iter(errors.items()))
        if key == "non_field_errors":
            place = where
        elif isinstance(key, int) or str(key).isdigit():  # a list's item, as DRF keys them
            place = f"{where}[{key}]"
        else:
            place = f"{where}.{key}" if where else key
        return first_error(value, place)
    if isinstance(errors, list) and errors and isinstance(errors[0], (dict, list)):
        index, value = next((i, e) for i, e in enumerate(errors) if e)
        return first_error(value, f"{where}[{index}]")
    message = str(errors[0]) if isinstance(errors, list) else str(errors)
    return f"{where}: {message}" if where else message


def multipart_items(body: dict) -> list[dict]:
    """A completion's `multipart` as plain dicts (none, or null: [])."""
    return [
        {
            "name": item["name"],
            "upload_id": item["upload_id"],
            "parts": [dict(part) for part in item["parts"]],
        }
        for item in body.get("multipart") or []
    ]


def expiry(seconds: int) -> str:
    """Taken before the URLs are signed and rounded down: every URL is valid at least until then."""
    return format_expiry(datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=seconds))


# --- a run pushed through the API ------------------------------------------------------------------


def trace_push(trace_id: str, files: list[dict], user) -> dict:
    """`POST /api/traces/{trace_id}/upload`'s answer: the owner, and where to PUT each file but
    metadata.json. Ingestion refuses (UploadRefused, UploadForbidden, UploadConflict) what the
    run's folder does not accept, someone else's run, and a ready one."""
    seconds = settings.CASCADE_PRESIGN_SECONDS
    expires_at = expiry(seconds)
    answers = push_requested.send(
        sender=Trace,
        trace_id=trace_id,
        files=files,
        username=user.get_username(),
        staff=user.is_staff,
        seconds=seconds,
    )
    pushed = answer(answers, "traces.signals.push_requested")
    return {
        "trace_id": trace_id,
        "owner": pushed["owner"],
        "expires_at": expires_at,
        "files": pushed["files"],
    }


def trace_push_complete(trace_id: str, files: list[dict], multipart: list[dict], user) -> dict:
    """`POST /api/traces/{trace_id}/complete`'s answer: metadata.json's PUT, once ingestion found
    every other file in the bucket at its size."""
    seconds = settings.CASCADE_PRESIGN_SECONDS
    expires_at = expiry(seconds)
    answers = push_completed.send(
        sender=Trace,
        trace_id=trace_id,
        files=files,
        multipart=multipart,
        username=user.get_username(),
        staff=user.is_staff,
        seconds=seconds,
    )
    completed = answer(answers, "traces.signals.push_completed")
    url = f"/api/traces/{quote(trace_id, safe='+@=')}"
    return {"trace_id": trace_id, "expires_at": expires_at, "metadata": completed["metadata"], "url": url}
