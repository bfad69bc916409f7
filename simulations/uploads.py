"""A simulation's upload through the API, the other way from `traces.files`' downloads: presigned
PUTs for its files (`simulation_upload`), then its completion (`simulation_upload_complete`);
and its deletion (`simulation_delete`). Each is answered by ingestion (`simulations.signals`),
whose concern the bucket is, and names the requester: ownership is recorded in the bucket.
"""

from urllib.parse import quote

from django.conf import settings

from simulations.signals import (
    simulation_delete_requested,
    simulation_upload_completed,
    simulation_upload_requested,
)
from traces.files import answer
from traces.models import Trace
from traces.uploads import expiry


def requester(user) -> dict:
    """Who asks, as the signals carry it."""
    return {"username": user.get_username(), "staff": bool(user.is_staff)}


def simulation_upload(trace_id: str, name: str, files: list[dict], *, user) -> dict:
    """The upload's answer: a presigned PUT (or a multipart upload) per file, simulation.json
    last. The trace is known to be ready; ingestion refuses (UploadRefused) what its folder
    does not accept."""
    seconds = settings.CASCADE_PRESIGN_SECONDS
    expires_at = expiry(seconds)
    answers = simulation_upload_requested.send(
        sender=Trace, trace_id=trace_id, name=name, files=files, seconds=seconds, **requester(user)
    )
    files = answer(answers, "simulations.signals.simulation_upload_requested")
    return {"trace_id": trace_id, "name": name, "expires_at": expires_at, "files": files}


def simulation_upload_complete(trace_id: str, name: str, multipart: list[dict], *, user) -> dict:
    """The completion's answer: the simulation's state once registered, its read begun."""
    answers = simulation_upload_completed.send(
        sender=Trace, trace_id=trace_id, name=name, multipart=multipart, **requester(user)
    )
    state = answer(answers, "simulations.signals.simulation_upload_completed")
    url = f"/api/traces/{quote(trace_id, safe='+@=')}/simulations/{quote(name, safe='')}"
    return {"trace_id": trace_id, "name": name, "state": state, "url": url}


def simulation_delete(trace_id: str, name: str, *, user) -> None:
    """The simulation and every file of its folder deleted (by its owner or staff)."""
    answers = simulation_delete_requested.send(sender=Trace, trace_id=trace_id, name=name, **requester(user))
    answer(answers, "simulations.signals.simulation_delete_requested")
