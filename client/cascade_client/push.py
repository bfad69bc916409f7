"""`cascade push RUN_DIR [--id RUN_ID]`: a tracer's run folder into Cascade with a write token,
through presigned URLs (`POST /api/traces/{id}/upload`, then `/complete`), so that whoever traced
it never holds the bucket's credentials.

- Refused before any request: a run id or a path the path rule refuses (paths.py, the server's
  rule too), a file past the size ingestion reads (the server's defaults: CASCADE_MAX_STATS_BYTES
  for stats files and kernel lists, CASCADE_METADATA_MAX_BYTES for metadata.json), no
  metadata.json, a `simulations/` folder (a simulation has its own upload).
- metadata.json last: Cascade signs its PUT only once every other file landed (ingestion starts
  when it lands).
- Resumable: `.cascade-push.json` in RUN_DIR records each file PUT and each part of a multipart
  upload as it lands; run the command again and only what is missing is sent (a file changed
  since, by size or time, is sent again). It is removed once metadata.json is up.
"""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from cascade_client import answers
from cascade_client.errors import CascadeError, NotFound, NotReady
from cascade_client.paths import path_problem
from cascade_client.progress import Progress, Silent
from cascade_client.uploads import bucket_client, post_json, send

METADATA = "metadata.json"
STATE = ".cascade-push.json"
OWNER_RECORD = "cascade-owner.json"  # Cascade's own, beside the run's files
# The server's default limits (docs/configuration.md): what its ingestion reads, at most.
MAX_STATS_BYTES = 2 * 1024**3
MAX_METADATA_BYTES = 8 * 1024**2
MAX_OBJECT_BYTES = 5 * 1024**4  # S3's largest object
POLL_SECONDS = 900.0


@dataclass
class PushResult:
    trace_id: str
    files: int
    bytes: int
    sent: int  # files (or parts) PUT now
    skipped: int  # files already up from an interrupted push
    owner: str | None
    trace: dict | None  # the trace once read, with `wait`


def max_bytes(path: str) -> int:
    if path == METADATA:
        return MAX_METADATA_BYTES
    folder, _, name = path.rpartition("/")
    if folder == "traces" and (name.startswith(("stats_ctx_", "kernelslist")) or name == "stats.csv"):
        return MAX_STATS_BYTES
    return MAX_OBJECT_BYTES


def run_files(run: Path, trace_id: str) -> dict[str, Path]:
    """The run's files by their paths in it, checked as the server checks them."""
    problem = path_problem(trace_id) or ("a '/'" if "/" in trace_id else None)
    if problem:
        raise CascadeError(f"{trace_id!r} cannot be a run's id: it has {problem}; choose another with --id")
    if not run.is_dir():
        raise CascadeError(f"{run} is not a folder: push a tracer's run folder")
    files = {}
    for path in sorted(run.rglob("*")):
        if path.is_dir():
            continue
        name = path.relative_to(run).as_posix()
        if name == STATE:
            continue
        problem = path_problem(name)
        if problem:
            raise CascadeError(f"{name!r} cannot be uploaded: its path has {problem}")
        if not path.is_file():
            raise CascadeError(f"{name}: not a regular file")
        if name == OWNER_RECORD or name.startswith("simulations/"):
            raise CascadeError(
                f"{name}: a push does not write {OWNER_RECORD} nor simulations/ (cascade simulate uploads those)"
            )
        size = path.stat().st_size
        least = 1 if name == METADATA else 0
        if not least <= size <= max_bytes(name):
            raise CascadeError(f"{name}: {size} bytes, not between {least} and {max_bytes(name)}")
        files[name] = path
    if METADATA not in files:
        raise CascadeError(f"{run} has no {METADATA}: Cascade ingests a run once its metadata.json lands")
    return files


class State:
    """What an interrupted push already sent, in RUN_DIR/.cascade-push.json."""

    def __init__(self, run: Path, url: str, trace_id: str, files: dict[str, Path]):
        self.path = run / STATE
        self.stamps = {name: [p.stat().st_size, p.stat().st_mtime_ns] for name, p in files.items()}
        self.data = {"url": url, "trace_id": trace_id, "files": self.stamps, "done": [], "multipart": {}}
        try:
            kept = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(kept, dict) or (kept.get("url"), kept.get("trace_id")) != (url, trace_id):
            return  # another server's or another id's: started over
        unchanged = {n for n, stamp in (kept.get("files") or {}).items() if self.stamps.get(n) == stamp}
        self.data["done"] = [n for n in kept.get("done") or [] if n in unchanged]
        self.data["multipart"] = {
            n: item
            for n, item in (kept.get("multipart") or {}).items()
            if n in unchanged and isinstance(item, dict)
        }

    def upload_id(self, name: str) -> str | None:
        return (self.data["multipart"].get(name) or {}).get("upload_id")

    def done_parts(self, name: str, upload_id: str) -> dict[int, str]:
        item = self.data["multipart"].get(name) or {}
        if item.get("upload_id") != upload_id:
            return {}
        return {int(number): etag for number, etag in (item.get("parts") or {}).items()}

    def part_landed(self, name: str, upload_id: str, number: int, etag: str) -> None:
        if number == 0:
            self.data["done"].append(name)
        else:
            item = self.data["multipart"].get(name)
            if not item or item.get("upload_id") != upload_id:
                item = self.data["multipart"][name] = {"upload_id": upload_id, "parts": {}}
            item["parts"][str(number)] = etag
        self.save()

    def forget_uploads(self) -> None:
        self.data["multipart"] = {}

    def save(self) -> None:
        """Written whole or not at all; a folder that cannot take it (read-only) is pushed all
        the same, only not resumably."""
        scratch = self.path.with_name(STATE + ".tmp")
        try:
            scratch.write_text(json.dumps(self.data))
            os.replace(scratch, self.path)
        except OSError:
            pass

    def remove(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass


def push(
    client, run_dir: str | Path, trace_id: str | None = None, *, progress=None, wait: bool = False
) -> PushResult:
    """The run folder into Cascade as `trace_id` (default: the folder's name)."""
    run = Path(run_dir)
    trace_id = trace_id or run.resolve().name
    files = run_files(run, trace_id)
    total = sum(path.stat().st_size for path in files.values())
    client._headers()  # no token: said before anything is read or sent
    state = State(run, client.url, trace_id, files)
    base = client._path(trace_id)
    listed = [{"name": name, "size": path.stat().st_size} for name, path in files.items()]
    try:
        answer = post_json(client, f"{base}/upload", {"files": resumed(listed, state)})
    except CascadeError as error:
        if "no multipart upload" not in str(error):
            raise
        state.forget_uploads()  # aborted or expired in the bucket since: those files start over
        answer = post_json(client, f"{base}/upload", {"files": listed})
    # Exactly the files asked for but metadata.json, each whole: what is read from disk and sent.
    asked = {item["name"]: item["size"] for item in listed if item["name"] != METADATA}
    entries = answers.upload_files(answer, asked, f"POST {base}/upload")
    if progress is True:
        bar = Progress(len(files), total, verbs=("uploaded", "already up"))
    else:
        bar = progress or Silent()
    sent = skipped = 0
    completed = []
    try:
        with bucket_client(client) as http:
            for entry in entries:
                name = entry["name"]
                upload_id = (entry.get("multipart") or {}).get("upload_id")
                if upload_id is None and name in state.data["done"]:
                    skipped += 1
                    bar.file_done(name, files[name].stat().st_size, skipped=True)
                    continue
                done = state.done_parts(name, upload_id) if upload_id else {}
                bar.advance(sum(part_bytes(entry, files[name].stat().st_size, number) for number in done))

                def landed(number, etag, n, name=name, upload_id=upload_id):
                    state.part_landed(name, upload_id, number, etag)
                    bar.advance(n)

                item = send(http, entry, files[name], done_parts=done, on_part=landed)
                sent += 1
                bar.file_done(name, files[name].stat().st_size)
                if item is not None:
                    completed.append(item)
            finish = post_json(client, f"{base}/complete", {"files": listed, "multipart": completed})
            sized = {METADATA: files[METADATA].stat().st_size}
            (metadata,) = answers.upload_files(
                {"files": [finish.get("metadata")]}, sized, f"POST {base}/complete"
            )
            send(http, metadata, files[METADATA])
            bar.advance(files[METADATA].stat().st_size)
            bar.file_done(METADATA, files[METADATA].stat().st_size)
    finally:
        bar.close()
    state.remove()
    trace = wait_for(client, trace_id) if wait else None
    return PushResult(trace_id, len(files), total, sent + 1, skipped, answer.get("owner"), trace)


def resumed(listed: list[dict], state: State) -> list[dict]:
    """The files for /upload, each multipart upload an interrupted push started named again."""
    return [
        {**item, "upload_id": upload_id} if (upload_id := state.upload_id(item["name"])) else item
        for item in listed
    ]


def part_bytes(entry: dict, size: int, number: int) -> int:
    """The bytes of part `number` of a file of `size` (the last holds what remains)."""
    part = entry["multipart"]["part_size"]
    return max(0, min(part, size - (number - 1) * part))


# A trace failed before this push says so until the next pass reads the new files.
STALE_FAILURE_SECONDS = 60.0


def wait_for(client, trace_id: str, *, timeout: float = POLL_SECONDS) -> dict:
    """The trace's state once ingested (`/files`' `state`, a light read): ready, or a failure
    raised with its error."""
    started = time.monotonic()
    pause, changed = 0.5, False
    while True:
        try:
            trace = client.files(trace_id)
        except NotFound:
            trace = {"state": "not registered yet"}
        if trace["state"] == "ready":
            return trace
        if trace["state"] == "failed" and (changed or time.monotonic() - started > STALE_FAILURE_SECONDS):
            raise NotReady(f"trace {trace_id} failed: {trace.get('error')}")
        changed = changed or trace["state"] != "failed"
        if time.monotonic() - started > timeout:
            raise CascadeError(
                f"Cascade has not ingested {trace_id} after {timeout:.0f} s ({trace['state']})"
            )
        time.sleep(pause)
        pause = min(pause * 1.5, 5.0)


def main_line(result: PushResult) -> str:
    owner = f", owned by {result.owner}" if result.owner else ""
    state = f"; {result.trace['state']}" if result.trace else "; Cascade ingests it at its next poll"
    return (
        f"pushed {result.trace_id}: {result.files} files ({result.bytes:,} bytes), {result.skipped} already up"
        f"{owner}{state}"
    )
