"""A simulation uploaded through the API (`cascade simulate`): presigned PUT URLs for its files
into `<run>/simulations/<name>/.staging/`, S3 multipart uploads for large logs, and, once the
client says the upload is complete, the staged files checked and moved into the folder, and the
simulation read at once.

`traces` asks through its signals (`simulation_upload_requested`, `simulation_upload_completed`,
`simulation_delete_requested`), as it asks for a run's download URLs: which keys a simulation's
files are, what its folder accepts, who owns it and how URLs are signed are this app's
knowledge. No byte of a file passes through Cascade: the client PUTs to the bucket; S3 checks
each PUT's length against the signed one, and copies the files into place itself.

Who may write under a name: the first upload to claim it records its user as the owner
(ingest.owners, `cascade-owner.json` in the folder), so the bucket keeps it for a rebuilt
database. Another user's upload or delete is refused (`SimulationForbidden`) unless that user is
staff; a folder that holds `simulation.json` (a finished upload: ready, failed, or being read)
is never replaced by an upload (`SimulationExists`): it is deleted first. An unfinished upload
(no `simulation.json`) is its owner's to continue or replace.

Nothing is deleted at `/upload`: the files land in `.staging/` (which ingestion never reads, see
ingest.simulations.folders), with the upload's manifest (`upload.json`: who, which files of which
sizes, which multipart upload ids). `/complete` checks the manifest's uploader, the upload ids
and every staged file's size, then copies the files into the folder (CopyObject, UploadPartCopy
past 5 GiB), deletes the folder's files the upload does not name (the owner record stays),
copies `simulation.json` last and empties `.staging/`. A /complete refused leaves the folder as
it was.

"At once": the completion registers the folder's listing in the request (one listing; the
answer's state is the simulation's own, never a stale `ready`), then reads the run's
simulations as `ingest_traces --trace RUN` does (`read_simulations`): a Celery task where
Celery is configured, else on the process's one background thread (`queue`; ingest.receivers
chooses). A read cut short leaves work that the next poll pass finishes.
"""

import json
import logging

from django.conf import settings
from django.db import connections

from ingest import bucket, owners, presigning, simulation_marker, simulations, storage
from ingest.bucket import S3Object
from ingest.listing import inventory
from ingest.queues import ReingestQueue
from simulations import services
from simulations.models import SIMULATION_NAME_MAX, Simulation
from simulations.signals import SimulationExists, SimulationForbidden, SimulationMissing, UploadRefused
from traces.locks import trace_lock
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
# The upload under way, in `.staging/`: who, which files of which sizes, which multipart ids.
MANIFEST_NAME = "upload.json"
MAX_MANIFEST_BYTES = 64 * 1024


def folder_key(trace_id: str, name: str) -> str:
    return f"{bucket.run_prefix(trace_id)}{simulations.FOLDER}{name}/"


def folder_now(base: str) -> tuple[dict[str, S3Object], list[S3Object]]:
    """The folder's own files by name, and its staged objects (`.staging/`): one listing."""
    files, staged = {}, []
    for obj in bucket.list_under(base):
        rest = obj.key[len(base) :]
        if rest.startswith(simulations.STAGING):
            staged.append(obj)
        elif "/" not in rest:
            files[rest] = obj
    return files, staged


def owner_now(base: str, files: dict[str, S3Object]) -> str | None:
    return owners.read_owner(base) if owners.OWNER_NAME in files else None


def check_owner(trace_id: str, name: str, owner: str | None, username: str, staff: bool, doing: str) -> None:
    """Its owner or staff only; another user is refused with the owner's name."""
    if staff or (owner is not None and owner == username):
        return
    whose = (
        f"belongs to {owner}" if owner else "belongs to no user (its files were put into the bucket directly)"
    )
    raise SimulationForbidden(
        f"simulation {name} of trace {trace_id} {whose}: only its owner or staff may {doing} it"
    )


def exists(trace_id: str, name: str) -> SimulationExists:
    return SimulationExists(f"simulation {name} of trace {trace_id} exists; delete it or choose another name")


def max_bytes(file_name: str) -> int:
    if file_name in simulations.LOG_NAMES:
        return settings.CASCADE_MAX_SIM_LOG_BYTES
    if file_name == simulation_marker.MARKER_NAME:
        return simulation_marker.MAX_MARKER_BYTES
    return CONFIG_MAX_BYTES


def check_name(name: str) -> None:
    problem = simulations.name_problem(name)
    if problem is not None:
        raise UploadRefused(problem)


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


# --- POST /api/traces/{trace_id}/simulations/{name}/upload ------------------------------------


def upload_urls(
    sender=None,
    *,
    trace_id: str,
    name: str,
    files: list[dict],
    seconds: int,
    username: str,
    staff: bool = False,
    **kwargs,
) -> list[dict]:
    """Receiver of traces.signals.simulation_upload_requested: the upload's files with their
    URLs into `.staging/`, simulation.json last. Claims a new name for `username`; deletes
    nothing."""
    check_name(name)
    check_files(files)
    for item in files:  # every refusal before the name is claimed
        if (
            item["size"] >= settings.CASCADE_SIM_MULTIPART_BYTES
            and item["name"] != simulation_marker.MARKER_NAME
        ):
            presigning.part_sizes(item["size"])
    storage.require_bucket()
    base = folder_key(trace_id, name)
    present, _ = folder_now(base)
    # The upload that first claims a new name owns it: of several at once, the conditional PUT
    # lets one through, and the others are checked against the owner it recorded.
    if present or not owners.claim_owner(base, username):
        if not present:
            present, _ = folder_now(base)
        check_owner(trace_id, name, owner_now(base, present), username, staff, "replace")
        if simulation_marker.MARKER_NAME in present:
            raise exists(trace_id, name)
    staging = base + simulations.STAGING
    # The unfinished upload this one replaces: its parts are stored, and billed, until aborted.
    aborted = presigning.multipart_abort_under(base)
    if aborted:
        logger.info("%s: a new upload: unfinished multipart uploads aborted: %s", base, ", ".join(aborted))
    manifest = {"uploader": username, "files": [], "multipart": {}}
    answer = []
    for item in sorted(files, key=lambda item: item["name"] == simulation_marker.MARKER_NAME):
        key, size = staging + item["name"], item["size"]
        manifest["files"].append({"name": item["name"], "size": size})
        # simulation.json is small, and lands in one PUT: the folder's marker.
        whole = item["name"] == simulation_marker.MARKER_NAME
        target = presigning.upload_target(key, item["name"], size, seconds, whole=whole)
        if "multipart" in target:
            manifest["multipart"][item["name"]] = target["multipart"]["upload_id"]
        answer.append(target)
    bucket.put_object(staging + MANIFEST_NAME, json.dumps(manifest).encode())
    return answer


# --- POST /api/traces/{trace_id}/simulations/{name}/complete ----------------------------------


def complete(
    trace_id: str, name: str, multipart: list[dict], *, username: str, staff: bool = False
) -> Simulation:
    """A completed upload (traces.signals.simulation_upload_completed, through
    ingest.receivers): its multipart uploads completed, its staged files checked against the
    manifest and moved into the folder, the folder registered."""
    check_name(name)
    base = folder_key(trace_id, name)
    staging = base + simulations.STAGING
    if len({item["name"] for item in multipart}) != len(multipart):
        raise UploadRefused("each multipart upload is named once")
    manifest = read_manifest(staging)
    if manifest is None:
        raise UploadRefused(
            f"no upload under way in {base}: ask /upload, then PUT the files /upload answered first"
        )
    if manifest["uploader"] != username and not staff:
        raise SimulationForbidden(
            f"the upload under way to simulation {name} of trace {trace_id} is {manifest['uploader']}'s: "
            "only they or staff may complete it"
        )
    for item in multipart:
        if item["name"] not in ACCEPTED:
            raise UploadRefused(
                f"a simulation's folder accepts {', '.join(ACCEPTED)}, not {item['name'][:200]!r}"
            )
        presigning.numbered_parts(item["name"], item["parts"])
        if manifest["multipart"].get(item["name"]) != item["upload_id"]:
            raise UploadRefused(
                f"{item['name']}: {item['upload_id'][:100]!r} is not the upload_id /upload answered for it"
            )
        presigning.multipart_finish(staging + item["name"], item["name"], item["upload_id"], item["parts"])
    present, staged = folder_now(base)
    if simulation_marker.MARKER_NAME in present:
        raise exists(trace_id, name)  # another completion finished first
    move_into_place(base, manifest, present, staged)
    return register(trace_id, name)


def read_manifest(staging: str) -> dict | None:
    """The upload under way (`upload_urls` wrote it), or None."""
    key = staging + MANIFEST_NAME
    if bucket.head_etag(key) is None:
        return None
    try:
        manifest = json.loads(bucket.read_object(key, MAX_MANIFEST_BYTES))
        files = [(item["name"], item["size"]) for item in manifest["files"]]
        if not isinstance(manifest["uploader"], str) or not isinstance(manifest["multipart"], dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        logger.warning("%s is not an upload manifest Cascade wrote: the upload is asked for again", key)
        return None
    return {**manifest, "files": files}


def move_into_place(base: str, manifest: dict, present: dict[str, S3Object], staged: list[S3Object]) -> None:
    """Every staged file the manifest names, of the size it names, copied into the folder; the
    folder's files it does not name deleted (the owner record kept); simulation.json last, so a
    pass never reads a mix; `.staging/` emptied."""
    staging = base + simulations.STAGING
    landed = {obj.key[len(staging) :]: obj for obj in staged}
    for file_name, size in manifest["files"]:
        obj = landed.get(file_name)
        if obj is None:
            raise UploadRefused(f"{file_name} has not landed: PUT the files /upload answered first")
        if obj.size != size:
            raise UploadRefused(f"{file_name}: {obj.size} bytes landed, not the {size} /upload was asked for")
    named = [file_name for file_name, _ in manifest["files"]]
    for file_name in named:
        if file_name != simulation_marker.MARKER_NAME:
            bucket.copy_key(staging + file_name, base + file_name)
    stale = [
        obj.key
        for file_name, obj in present.items()
        if file_name not in named and file_name != owners.OWNER_NAME
    ]
    if stale:
        bucket.delete_keys(stale)
        logger.info("%s: replaced by its upload: %s deleted", base, ", ".join(stale))
    bucket.copy_key(staging + simulation_marker.MARKER_NAME, base + simulation_marker.MARKER_NAME)
    bucket.delete_keys([obj.key for obj in staged] + [staging + MANIFEST_NAME])


# --- DELETE /api/traces/{trace_id}/simulations/{name} -----------------------------------------


def delete_simulation(sender=None, *, trace_id: str, name: str, username: str, staff: bool = False, **kwargs):
    """Receiver of simulations.signals.simulation_delete_requested: every object of the folder
    (its files, its owner record, its staged upload) and its unfinished multipart uploads gone,
    then its row: no later pass finds anything to register again."""
    base = folder_key(trace_id, name)
    objects = bucket.list_under(base)
    simulation = Simulation.objects.filter(trace_id=trace_id, name=name).select_related("owner").first()
    if not objects and simulation is None:
        raise SimulationMissing(f"simulation {name} of trace {trace_id} not found")
    present = {obj.key[len(base) :]: obj for obj in objects if "/" not in obj.key[len(base) :]}
    owner = owner_now(base, present)
    if owner is None and owners.OWNER_NAME not in present and simulation is not None and simulation.owner:
        owner = simulation.owner.get_username()
    check_owner(trace_id, name, owner, username, staff, "delete")
    with trace_lock(f"{trace_id}/{simulations.FOLDER}{name}") as acquired:
        if not acquired:  # a pass reads it: its pairs would be stored for a row gone
            raise SimulationExists(
                f"simulation {name} of trace {trace_id} is being read right now: delete it once it is done"
            )
        presigning.multipart_abort_under(base)
        bucket.delete_keys([obj.key for obj in objects])
        if simulation is not None:
            services.simulation_delete(simulation)
    logger.info("%s: deleted by %s: %d objects", base, username, len(objects))


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
