"""A simulation uploaded through the API (`cascade simulate`): presigned PUT URLs for its files
into `<run>/simulations/<name>/`, S3 multipart uploads for large logs, and, once the client says
the upload is complete, the multipart uploads completed and the simulation read at once.

`traces` asks through its signals (`simulation_upload_requested`, `simulation_upload_completed`),
as it asks for a run's download URLs: which keys a simulation's files are, what its folder
accepts and how URLs are signed are this app's knowledge. No byte of a file passes through
Cascade: the client PUTs to the bucket; S3 checks each PUT's length against the signed one.

A folder that already holds a simulation of that name is replaced: asking for the URLs deletes
its old `simulation.json` and every file the new upload does not name, and aborts the folder's
unfinished multipart uploads, so that the simulation waits (`uploading`) until the new marker
lands, and is then read as a re-upload is.

"At once": the completion registers the folder's listing in the request (one listing; the
answer's state is the simulation's own, never a stale `ready`), then reads the run's
simulations as `ingest_traces --trace RUN` does (`read_simulations`): a Celery task where
Celery is configured, else on the process's one background thread (`queue`; ingest.receivers
chooses). A read cut short leaves work that the next poll pass finishes.
"""

import logging

from botocore.exceptions import ClientError
from django.conf import settings
from django.db import connections

from ingest import bucket, presigning, simulation_marker, simulations, storage
from ingest.listing import inventory
from ingest.queues import ReingestQueue
from simulations import services
from simulations.models import SIMULATION_NAME_MAX, Simulation
from simulations.signals import UploadRefused
from traces.models import Trace
from traces.storable_text import unstorable_character

logger = logging.getLogger(__name__)

TRACE_CONFIG_NAME = "trace.config"
# What a simulation's folder accepts (ingest/simulations.py reads them; trace.config rides along
# beside gpgpusim.config, as Accel-Sim's job scripts keep it).
ACCEPTED = (
    *simulations.LOG_NAMES,
    simulations.CONFIG_NAME,
    TRACE_CONFIG_NAME,
    simulation_marker.MARKER_NAME,
)
CONFIG_MAX_BYTES = 1024**2
MAX_PARTS = 10_000  # S3's limit on a multipart upload's parts


def folder_key(trace_id: str, name: str) -> str:
    return f"{bucket.run_prefix(trace_id)}{simulations.FOLDER}{name}/"


def max_bytes(file_name: str) -> int:
    if file_name in simulations.LOG_NAMES:
        return settings.CASCADE_MAX_SIM_LOG_BYTES
    if file_name == simulation_marker.MARKER_NAME:
        return simulation_marker.MAX_MARKER_BYTES
    return CONFIG_MAX_BYTES


def check_name(name: str) -> None:
    if not simulations.NAME.fullmatch(name):
        raise UploadRefused(
            f"a simulation's name is letters, digits, '.', '_' and '-', at most {SIMULATION_NAME_MAX} "
            f"characters: {name[:200]!r}"
        )


def check_files(files: list[dict]) -> None:
    """The file names a folder accepts, each once, one log at most, simulation.json among them,
    each size within its bound."""
    names = [item["name"] for item in files]
    for file_name in names:
        if file_name not in ACCEPTED:
            raise UploadRefused(
                f"a simulation's folder accepts {', '.join(ACCEPTED)}, not {file_name[:200]!r}"
            )
    if len(set(names)) != len(names):
        raise UploadRefused("each file is named once")
    logs = [file_name for file_name in names if file_name in simulations.LOG_NAMES]
    if len(logs) > 1:
        raise UploadRefused(f"one log, as one of {', '.join(simulations.LOG_NAMES)}: not {', '.join(logs)}")
    if simulation_marker.MARKER_NAME not in names:
        raise UploadRefused(
            f"{simulation_marker.MARKER_NAME} is missing: it is the folder's completion marker, uploaded last"
        )
    for item in files:
        largest = max_bytes(item["name"])
        least = 1 if item["name"] == simulation_marker.MARKER_NAME else 0
        if not least <= item["size"] <= largest:
            raise UploadRefused(f"{item['name']}: {item['size']} bytes, not between {least} and {largest}")


def part_sizes(size: int) -> list[int]:
    part = settings.CASCADE_SIM_PART_BYTES
    sizes = [part] * (size // part) + ([size % part] if size % part else [])
    if len(sizes) > MAX_PARTS:
        raise UploadRefused(
            f"{size} bytes is more than {MAX_PARTS} parts of {part} bytes (CASCADE_SIM_PART_BYTES)"
        )
    return sizes


# --- POST /api/traces/{trace_id}/simulations/{name}/upload ------------------------------------


def upload_urls(
    sender=None, *, trace_id: str, name: str, files: list[dict], seconds: int, **kwargs
) -> list[dict]:
    """Receiver of traces.signals.simulation_upload_requested: the upload's files with their
    URLs, simulation.json last. Deletes what the folder held that the new upload replaces."""
    check_name(name)
    check_files(files)
    storage.require_bucket()
    base = folder_key(trace_id, name)
    aborted = presigning.multipart_abort_under(base)
    if aborted:
        logger.info("%s: a new upload: unfinished multipart uploads aborted: %s", base, ", ".join(aborted))
    named = {base + item["name"] for item in files}
    stale = [
        obj.key
        for obj in bucket.list_simulation_objects(trace_id)
        if obj.key.startswith(base)
        and (obj.key not in named or obj.key.endswith("/" + simulation_marker.MARKER_NAME))
    ]
    if stale:
        bucket.delete_keys(stale)
        logger.info("%s: replaced by a new upload: %s deleted", base, ", ".join(stale))
    answer = []
    for item in sorted(files, key=lambda item: item["name"] == simulation_marker.MARKER_NAME):
        key, size = base + item["name"], item["size"]
        if size >= settings.CASCADE_SIM_MULTIPART_BYTES and item["name"] != simulation_marker.MARKER_NAME:
            sizes = part_sizes(size)
            upload_id = presigning.multipart_start(key)
            urls = presigning.presigned_parts(key, upload_id, sizes, seconds)
            parts = [{"part_number": number, "url": url} for number, url in enumerate(urls, 1)]
            multipart = {"upload_id": upload_id, "part_size": settings.CASCADE_SIM_PART_BYTES, "parts": parts}
            answer.append({"name": item["name"], "size": size, "multipart": multipart})
        else:
            url = presigning.presigned_put(key, size, seconds)
            answer.append(
                {"name": item["name"], "size": size, "url": url, "headers": {"Content-Length": str(size)}}
            )
    return answer


# --- POST /api/traces/{trace_id}/simulations/{name}/complete ----------------------------------


def complete(trace_id: str, name: str, multipart: list[dict]) -> Simulation:
    """A completed upload (traces.signals.simulation_upload_completed, through
    ingest.receivers): its multipart uploads completed, the folder registered."""
    check_name(name)
    base = folder_key(trace_id, name)
    if len({item["name"] for item in multipart}) != len(multipart):
        raise UploadRefused("each multipart upload is named once")
    for item in multipart:
        if item["name"] not in ACCEPTED:
            raise UploadRefused(
                f"a simulation's folder accepts {', '.join(ACCEPTED)}, not {item['name'][:200]!r}"
            )
        parts = sorted((part["part_number"], part["etag"]) for part in item["parts"])
        if [number for number, _ in parts] != list(range(1, len(parts) + 1)):
            raise UploadRefused(f"{item['name']}: the parts are numbered 1 to {len(parts)}, each once")
        try:
            presigning.multipart_complete(base + item["name"], item["upload_id"], parts)
        except ClientError as error:
            problem = error.response.get("Error", {})
            code = problem.get("Code", "")
            if code in ("NoSuchUpload", "InvalidPart", "InvalidPartOrder", "EntityTooSmall", "MalformedXML"):
                raise UploadRefused(
                    f"{item['name']}: S3 refused to complete the upload: {code}: {problem.get('Message', '')}"
                ) from None
            raise
    return register(trace_id, name)


def state_now(simulation: Simulation) -> str:
    """`uploading` while the read waits, or what a read already made of it."""
    return (
        Simulation.objects.filter(pk=simulation.pk).values_list("state", flat=True).first()
        or simulation.state
    )


def register(trace_id: str, name: str) -> Simulation:
    """The run's `simulations/` listing recorded as a pass records it (changed files make the
    simulation `uploading`); the simulation `name`, which must have landed."""
    trace = Trace.objects.get(pk=trace_id)
    by_name, _ = simulations.folders(trace_id, bucket.list_simulation_objects(trace_id))
    if name not in by_name:
        raise UploadRefused(f"nothing in {folder_key(trace_id, name)}: PUT the files /upload answered first")
    storable = {
        folder: inventory(listed, every_path=True)
        for folder, listed in by_name.items()
        if len(folder) <= SIMULATION_NAME_MAX and unstorable_character(folder) is None
    }
    registered = services.simulations_register(trace, storable)
    return next(simulation for simulation, _ in registered if simulation.name == name)


def read_simulations(trace_id: str) -> int:
    """The run's simulations decided on and read now, as `ingest_traces --trace RUN` reads them
    after its trace; the changes, counted. The one call both the task and the thread make."""
    changes = simulations.read_simulations_now(trace_id)
    for change in changes:
        logger.info("%s", change)
    return len(changes)


def read_in_background(trace_id: str) -> None:
    try:
        read_simulations(trace_id)
    except Exception:  # S3 or the database away: the next pass reads it
        logger.exception(
            "%s: reading its simulations after an upload failed, the next pass tries again", trace_id
        )
    finally:
        connections.close_all()


queue = ReingestQueue(read_in_background, name="cascade-simulation-read")
