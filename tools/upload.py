"""Put a run folder into the bucket the way the profiling harness does: metadata.json last,
then the simulations of the run (`simulations/<name>/`), each with its simulation.json last.

What `load_samples` and the generator's `upload_run` use. Uploading is the harness's side of
the bucket, so it lives with the tools; the writes themselves go through `ingest.bucket`,
the one module that talks to S3.
"""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ingest import bucket

# boto3's upload_file switches to multipart (and a non-MD5 ETag) above this size.
MULTIPART_THRESHOLD = MULTIPART_CHUNK = 8 * 1024 * 1024


@dataclass
class UploadResult:
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def local_etag(path: Path) -> str:
    """The ETag S3 gives `path` uploaded by boto3: MD5, or MD5 of part MD5s past the multipart threshold."""
    size = path.stat().st_size
    digests = []
    with open(path, "rb") as handle:
        while chunk := handle.read(MULTIPART_CHUNK):
            digests.append(hashlib.md5(chunk, usedforsecurity=False))
    if size <= MULTIPART_THRESHOLD:
        return f'"{(digests[0] if digests else hashlib.md5(usedforsecurity=False)).hexdigest()}"'
    combined = hashlib.md5(b"".join(d.digest() for d in digests), usedforsecurity=False)
    return f'"{combined.hexdigest()}-{len(digests)}"'


def metadata_for_prefix(data: bytes, run_id: str, run_prefix: str) -> bytes:
    """metadata.json with its `files` keys moved under the bucket's prefix, if they were elsewhere."""
    metadata = json.loads(data)
    files = metadata.get("files")
    if not isinstance(files, list):
        return data
    marker = f"{run_id}/"
    changed = False
    for entry in files:
        key = entry.get("key", "") if isinstance(entry, dict) else ""
        if marker in key and not key.startswith(run_prefix):
            entry["key"] = run_prefix + key.split(marker, 1)[1]
            changed = True
    return (json.dumps(metadata, indent=2) + "\n").encode() if changed else data


def upload_order(path: Path, directory: Path) -> tuple:
    """The trace first, metadata.json last of it; then each simulation, simulation.json last of it.

    Each marker says its folder is complete, so it follows what it vouches for; a simulation is
    uploaded after its trace, as one is run after the trace is made.
    """
    parts = path.relative_to(directory).parts
    if len(parts) >= 3 and parts[0] == "simulations":
        return (1, parts[1], parts[2:] == ("simulation.json",), parts[2:])
    return (0, "", parts == ("metadata.json",), parts)


def upload_run_folder(directory: Path, run_id: str, *, skip_unchanged: bool = True) -> UploadResult:
    """Upload a local run folder as run `run_id`, metadata.json last (it tells Cascade the run is
    complete), then its `simulations/<name>/` folders, each with simulation.json last.

    With `skip_unchanged`, an object already in the bucket with the same size and ETag is left
    alone, so uploading the same folder twice changes nothing.
    """
    directory = Path(directory)
    base = bucket.run_prefix(run_id)
    existing = {}
    if skip_unchanged:
        simulations = []
        trace_objects = bucket.list_run_objects(run_id, simulations=simulations)
        existing = {obj.key: obj for obj in (*trace_objects, *simulations)}
    paths = sorted((p for p in directory.rglob("*") if p.is_file()), key=lambda p: upload_order(p, directory))
    result = UploadResult()
    for path in paths:
        name = path.relative_to(directory).as_posix()
        key = base + name
        if name == "metadata.json":
            data = metadata_for_prefix(path.read_bytes(), run_id, base)
            etag = f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'
            if _unchanged(existing.get(key), len(data), etag):
                result.skipped.append(key)
            else:
                bucket.put_object(key, data)
                result.uploaded.append(key)
            continue
        if _unchanged(existing.get(key), path.stat().st_size, local_etag(path) if key in existing else ""):
            result.skipped.append(key)
        else:
            bucket.upload_file(path, key)
            result.uploaded.append(key)
    return result


def _unchanged(obj, size: int, etag: str) -> bool:
    return obj is not None and obj.size == size and obj.etag == etag
