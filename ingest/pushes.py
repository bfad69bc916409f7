"""A run pushed through the API (`cascade push`): its files PUT by the client to presigned URLs
into the run's folder, from a machine without the bucket's credentials.

`traces` asks through its signals (`push_requested`, `push_completed`), as for a simulation's
upload; the files' keys, what a run's folder accepts and who owns it are this app's knowledge.
The answers share their shape, and their signing, with a simulation's (`presigning.upload_target`,
`presigning.multipart_finish`).

- The run's id and every path go through the one path rule (`path_problem`), and each size
  through the limit ingestion reads it with: a stats file or kernel list CASCADE_MAX_STATS_BYTES,
  metadata.json CASCADE_METADATA_MAX_BYTES, any other file what a multipart upload can hold.
- Owner: the first push to an id that nothing in the bucket holds claims it, writing the owner
  record (`ingest.owners`) with a conditional PUT, so that of two users at once exactly one
  owns it. A later push is its owner's or staff's; a folder with objects and no record was put
  into the bucket directly, which only staff may push to. Ingestion sets `Trace.owner` from the
  record (ingest.decision), so a database rebuilt from the bucket keeps it.
- `metadata.json` last: ingestion starts when it lands, so `/upload` signs no URL for it;
  `/complete` signs it only once every other file named has landed with its size.
- A ready trace (or one being parsed) is never pushed over: a 409.

Why metadata.json is signed last rather than staged, and why the owner is a record in the
bucket: docs/decisions/0012-a-push-signs-metadata-json-last.md.
"""

import logging

from django.conf import settings

from ingest import bucket, owners, presigning, storage
from ingest.listing import storable_run_id
from ingest.metadata import METADATA_NAME
from ingest.paths import path_problem, shown_path
from ingest.stats import STATS_CTX_NAME
from traces.models import Trace, TraceState
from traces.signals import UploadConflict, UploadForbidden, UploadRefused

logger = logging.getLogger(__name__)

# What a push never writes: Cascade's own record, and the run's simulations (their own upload).
RESERVED = (owners.OWNER_NAME,)
NOT_PUSHED_OVER = (TraceState.READY, TraceState.PARSING)


def max_bytes(path: str) -> int:
    """The largest file at `path` that ingestion reads (else: what a multipart upload holds)."""
    if path == METADATA_NAME:
        return settings.CASCADE_METADATA_MAX_BYTES
    folder, _, name = path.rpartition("/")
    if folder == "traces" and (
        STATS_CTX_NAME.match(name) or name == "stats.csv" or name.startswith("kernelslist")
    ):
        return settings.CASCADE_MAX_STATS_BYTES
    return presigning.MAX_PARTS * settings.CASCADE_SIM_PART_BYTES


def check_run_id(trace_id: str) -> None:
    problem = path_problem(trace_id)
    if problem is None and "/" in trace_id:
        problem = "a '/' (a run is one folder directly under the prefix)"
    if problem is None and not storable_run_id(trace_id):
        problem = "characters or a length the database cannot store"
    if problem is not None:
        raise UploadRefused(f"{shown_path(trace_id[:200])!r} cannot be a run's id: it has {problem}")


def check_files(files: list[dict]) -> None:
    """Every path a plain relative one (the one path rule), each once, metadata.json among them,
    none of Cascade's own or under simulations/, each size within its bound."""
    names = [item["name"] for item in files]
    if len(set(names)) != len(names):
        raise UploadRefused("each file is named once")
    for item in files:
        name, size = item["name"], item["size"]
        problem = path_problem(name)
        if problem is not None:
            raise UploadRefused(
                f"{shown_path(name[:200])!r} is not a path in a run's folder: it has {problem}"
            )
        if name in RESERVED or name.startswith(bucket.SIMULATIONS_FOLDER):
            raise UploadRefused(
                f"{name[:200]}: a push does not write Cascade's own {owners.OWNER_NAME} nor simulations/ "
                "(a simulation has its own upload)"
            )
        least, largest = (1 if name == METADATA_NAME else 0), max_bytes(name)
        if not least <= size <= largest:
            raise UploadRefused(f"{name[:200]}: {size} bytes, not between {least} and {largest}")
    if METADATA_NAME not in names:
        raise UploadRefused(
            f"{METADATA_NAME} is missing: ingestion starts when it lands, so it is the push's last file"
        )


def owner_allowed(trace_id: str, username: str, staff: bool, *, claim: bool) -> str | None:
    """The run's owner, once `username` may push to it (a claim first, with `claim`, where
    nothing holds the id); UploadForbidden naming the owner if not."""
    folder = bucket.run_prefix(trace_id)
    owner = owners.read_owner(folder)
    if owner is None:
        if bucket.holds_objects(folder):
            if staff:
                return None
            raise UploadForbidden(
                f"trace {trace_id} was put into the bucket directly and has no owner: only staff may push to it"
            )
        if not claim:
            raise UploadForbidden(f"trace {trace_id} has no owner: POST its /upload first")
        if owners.claim_owner(folder, username):
            logger.info("%s: claimed by %s through a push", trace_id, username)
            return username
        owner = owners.read_owner(folder)  # another push claimed it a moment before
    if owner != username and not staff:
        raise UploadForbidden(f"trace {trace_id} belongs to {owner}: only its owner or staff may push to it")
    return owner


def check_not_parsed(trace_id: str) -> None:
    state = Trace.objects.filter(pk=trace_id).values_list("state", flat=True).first()
    if state in NOT_PUSHED_OVER:
        raise UploadConflict(
            f"trace {trace_id} is {state}: a push never replaces it; push under another id "
            "(cascade push --id) or ask an operator to delete it"
        )


# --- POST /api/traces/{trace_id}/upload ---------------------------------------------------------


def push_urls(
    sender=None, *, trace_id: str, files: list[dict], username: str, staff: bool, seconds: int, **kwargs
) -> dict:
    """Receiver of traces.signals.push_requested: the owner (claimed by this push if nobody
    held the id) and each file but metadata.json with its URLs; a file given with its
    `upload_id` continues that multipart upload."""
    check_run_id(trace_id)
    check_files(files)
    storage.require_bucket()
    owner = owner_allowed(trace_id, username, staff, claim=True)
    check_not_parsed(trace_id)
    base = bucket.run_prefix(trace_id)
    targets = [
        presigning.upload_target(
            base + item["name"], item["name"], item["size"], seconds, upload_id=item.get("upload_id")
        )
        for item in files
        if item["name"] != METADATA_NAME
    ]
    return {"owner": owner, "files": targets}


# --- POST /api/traces/{trace_id}/complete -------------------------------------------------------


def push_complete(
    sender=None,
    *,
    trace_id: str,
    files: list[dict],
    multipart: list[dict],
    username: str,
    staff: bool,
    seconds: int,
    **kwargs,
) -> dict:
    """Receiver of traces.signals.push_completed: the multipart uploads completed, every file
    named checked in the bucket at its size, then metadata.json's PUT (`{"metadata": target}`)."""
    check_run_id(trace_id)
    check_files(files)
    storage.require_bucket()
    check_not_parsed(trace_id)  # whoever asks: nothing is left to complete
    owner_allowed(trace_id, username, staff, claim=False)
    base = bucket.run_prefix(trace_id)
    sizes = {item["name"]: item["size"] for item in files}
    if len({item["name"] for item in multipart}) != len(multipart):
        raise UploadRefused("each multipart upload is named once")
    for item in multipart:
        if item["name"] not in sizes or item["name"] == METADATA_NAME:
            raise UploadRefused(f"{item['name'][:200]}: a multipart upload of a file the push does not name")
        presigning.multipart_finish(base + item["name"], item["name"], item["upload_id"], item["parts"])
    landed = {obj.name: obj.size for obj in bucket.list_run_objects(trace_id)}
    wrong = [
        f"{name} ({'not there' if landed.get(name) is None else f'{landed[name]} bytes'}, not {size})"
        for name, size in sizes.items()
        if name != METADATA_NAME and landed.get(name) != size
    ]
    if wrong:
        shown = ", ".join(wrong[:10]) + (f" and {len(wrong) - 10} more" if len(wrong) > 10 else "")
        raise UploadRefused(
            f"{len(wrong)} file(s) have not landed whole: {shown}; PUT them, then complete again"
        )
    metadata = presigning.upload_target(
        base + METADATA_NAME, METADATA_NAME, sizes[METADATA_NAME], seconds, whole=True
    )
    return {"metadata": metadata}
