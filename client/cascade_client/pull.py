"""`pull`: a run from the bucket into a folder Accel-Sim simulates as it is.

The files come straight from the bucket through the presigned links of `/files` (no token,
no byte through Cascade), several at once. Each lands as `<file>.part` and is renamed only once
its size, and its MD5 where the ETag is one, match the listing: a file already in place and
matching is skipped, a `.part` is fetched again from its start, so a pull that was killed
resumes by running it again. A file that no longer matches the listing (or whose link the
bucket refuses) changed in the bucket since: FileChanged, and the partial download is removed.

With a selection (`/selection`), only the representatives' trace files are fetched, and the
kernel list names only them (memcpy lines kept in order); `cascade.json` records each group's
weight, the launches its representative stands for.
"""

import hashlib
import json
import os
import re
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

import httpx

from cascade_client import kernelslist
from cascade_client.errors import CascadeError, FileChanged, Unreachable
from cascade_client.progress import Silent

MD5_ETAG = re.compile(r'^"([0-9a-fA-F]{32})"$')  # multipart ETags carry "-<parts>": no MD5
CHUNK = 1 << 20
# When a selection rewrites kernelslist.g, the run's own list is kept beside it under this name.
RUN_LIST_KEPT = "traces/kernelslist.g.run"
POSTPROCESS = "./util/tracer_nvbit/tracer_tool/traces-processing/post-traces-processing"


@dataclass
class PullResult:
    trace_id: str
    dest: Path
    downloaded: int = 0
    skipped: int = 0
    bytes: int = 0
    kernelslist: Path | None = None
    postprocess: Path | None = None  # the list to post-process first, for a run of raw traces
    configs: list[Path] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def next_steps(self, suggested_config: str | None = None) -> list[str]:
        """What to run next, from an accel-sim-framework checkout."""
        steps = []
        if self.postprocess:
            steps.append(f"{POSTPROCESS} {self.postprocess}")
        configs = " ".join(f"-config {path}" for path in self.configs)
        steps.append(
            f"./gpu-simulator/bin/release/accel-sim.out -trace {self.kernelslist} {configs}".rstrip()
        )
        if self.dest.name == "NO_ARGS":  # laid out as run_simulations.py looks for traces
            config = f"{suggested_config}-SASS" if suggested_config else "<CONFIG>-SASS"
            steps.append(
                f"./util/job_launching/run_simulations.py -B <suite with app {self.dest.parent.name}> "
                f"-C {config} -T {self.dest.parent.parent} -N {self.trace_id}"
            )
        return steps


def pull(client, trace_id: str, dest=None, *, select=None, cover=1.0, jobs=8, progress=None) -> PullResult:
    dest = Path(dest if dest is not None else trace_id)
    listing = client.files(trace_id)
    selection = client.selection(trace_id, select, cover=cover) if select else None
    entries = [entry for entry in listing["files"] if _safe(entry["path"])]
    paths = [entry["path"] for entry in entries]
    layout, lists = kernelslist.source_lists(paths)

    stems = None
    result = PullResult(trace_id=trace_id, dest=dest)
    if selection is not None:
        stems = set()
        for group in selection["groups"]:
            stem = kernelslist.trace_stem(group["representative"].get("trace_file") or "")
            if stem:
                stems.add(stem)
        on_disk = {kernelslist.trace_stem(p) for p in paths if kernelslist.is_kernel_trace(p)}
        missing = sorted(stems - on_disk)
        if missing:
            result.warnings.append(
                f"{len(missing)} of {len(selection['groups'])} representatives have no trace file in the run "
                f"(not traced: {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): "
                "their groups are weighed in cascade.json but cannot be simulated from this run"
            )
    wanted = [
        e
        for e in entries
        if not kernelslist.is_kernel_trace(e["path"])
        or stems is None
        or kernelslist.trace_stem(e["path"]) in stems
    ]

    def local(path: str) -> str:
        rewritten = selection is not None and path == kernelslist.POSTPROCESSED_LIST
        return RUN_LIST_KEPT if rewritten else path

    _download_all(client, wanted, dest, local, jobs, progress, result)

    # The kernel list the simulator reads.
    sources = [(dest / local(path)).read_text() for path in lists]
    lines = [line for text in sources for line in kernelslist.selected(kernelslist.lines_of(text), stems)]
    if not lists and selection is not None:  # a run without lists: the representatives, in run order
        lines = sorted(
            (
                g["representative"]["trace_file"]
                for g in selection["groups"]
                if g["representative"].get("trace_file")
            ),
            key=lambda name: _launch_order(selection, name),
        )
    simulated = dest / kernelslist.POSTPROCESSED_LIST
    if layout == "raw" and (lists or selection is not None):
        raw = dest / kernelslist.RAW_LIST
        _write(raw, lines)
        # What the post-processing step will write from it, so the folder reads whole already.
        _write(simulated, [kernelslist.postprocessed(line) for line in lines])
        result.postprocess = raw
    elif selection is not None:
        _write(simulated, lines)
    result.kernelslist = simulated
    result.configs = [dest / p for p in paths if p in ("configs/gpgpusim.config", "configs/trace.config")]

    kept = {kernelslist.trace_stem(line) for line in lines if not line.startswith("Memcpy")}
    if selection is not None:
        result.groups = [_group(g, kept) for g in selection["groups"]]
    _write_json(
        dest / "cascade.json",
        {
            "trace_id": trace_id,
            "server": client.url,
            "pulled_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "selection": None
            if selection is None
            else {
                key: selection.get(key)
                for key in ("by", "step", "cover", "tolerance", "launches", "basis", "covered")
            },
            "groups": result.groups,
            "kernelslist": str(kernelslist.POSTPROCESSED_LIST),
            "postprocess": str(kernelslist.RAW_LIST) if result.postprocess else None,
            "files": len(wanted),
            "bytes": sum(e["bytes"] for e in wanted),
            "warnings": result.warnings,
        },
    )
    return result


def _group(group: dict, kept: set) -> dict:
    representative = group["representative"]
    stem = kernelslist.trace_stem(representative.get("trace_file") or "")
    return {
        "name": group["name"],
        "grid": group.get("grid"),
        "block": group.get("block"),
        "weight": group["count"],  # the launches the representative's simulated time stands for
        "total_insts": group.get("total_insts"),
        "duration_ns": group.get("duration_ns"),
        "share": group.get("share"),
        "representative": representative,
        "in_kernelslist": stem in kept,
    }


def _launch_order(selection: dict, trace_file: str):
    for group in selection["groups"]:
        if group["representative"].get("trace_file") == trace_file:
            return (group["representative"]["ctx"] or "", group["representative"]["kernel_id"])
    return ("", 0)


def _safe(path: str) -> bool:
    """A path relative to the run's folder, never out of it (the listing is a server's word)."""
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or ".." in parts:
        raise CascadeError(f"the server listed a file outside the run's folder: {path!r}")
    return True


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".part")
    temporary.write_text("".join(line + "\n" for line in lines))
    os.replace(temporary, path)


def _write_json(path: Path, value) -> None:
    temporary = path.with_name(path.name + ".part")
    temporary.write_text(json.dumps(value, indent=2) + "\n")
    os.replace(temporary, path)


# --- downloads --------------------------------------------------------------------------


def expected_md5(etag: str | None) -> str | None:
    match = MD5_ETAG.match(etag or "")
    return match.group(1).lower() if match else None


def file_md5(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def complete(path: Path, entry: dict) -> bool:
    """Already pulled: the size the listing says, and its MD5 where the ETag is one."""
    if not path.is_file() or path.stat().st_size != entry["bytes"]:
        return False
    md5 = expected_md5(entry.get("etag"))
    return md5 is None or file_md5(path) == md5


def _download_all(client, entries, dest, local, jobs, progress, result) -> None:
    from cascade_client.progress import Progress

    todo = []
    for entry in entries:
        path = dest / local(entry["path"])
        if complete(path, entry):
            result.skipped += 1
        else:
            todo.append((entry, path))
    if progress is None:
        progress = Silent()
    elif progress is True:
        progress = Progress(len(todo), sum(e["bytes"] for e, _ in todo))
    stop = threading.Event()
    # No token and no base URL: the links are the bucket's, signed for anyone who holds them.
    with httpx.Client(timeout=httpx.Timeout(60.0), transport=client.transport, follow_redirects=True) as http:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(_download, http, entry, path, progress, stop) for entry, path in todo]
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in done if f.exception()]
            if failed:
                stop.set()
                for future in pending:
                    future.cancel()
                wait(pending)
                progress.close()
                raise failed[0].exception()
    progress.close()
    result.downloaded = len(todo)
    result.bytes = sum(entry["bytes"] for entry, _ in todo)


def _download(http: httpx.Client, entry: dict, path: Path, progress, stop: threading.Event) -> None:
    if stop.is_set():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    digest, written = hashlib.md5(), 0
    try:
        with http.stream("GET", entry["url"]) as response:
            if response.status_code in (403, 404):
                raise FileChanged(
                    f"{entry['path']}: the bucket answered {response.status_code} for its link: the file "
                    "changed or went since the listing, or the link expired; run the pull again"
                )
            if response.status_code >= 400:
                raise CascadeError(f"{entry['path']}: the bucket answered {response.status_code}")
            with part.open("wb") as out:
                for chunk in response.iter_raw(CHUNK):  # the bytes as stored, never decoded
                    if stop.is_set():
                        return
                    out.write(chunk)
                    digest.update(chunk)
                    written += len(chunk)
                    progress.advance(len(chunk))
    except httpx.TransportError as error:
        raise Unreachable(
            f"{entry['path']}: cannot reach the bucket: {error or type(error).__name__}"
        ) from None
    md5 = expected_md5(entry.get("etag"))
    if written != entry["bytes"] or (md5 is not None and digest.hexdigest() != md5):
        part.unlink(missing_ok=True)
        what = (
            f"{written} bytes, listed {entry['bytes']}"
            if written != entry["bytes"]
            else "its MD5 differs from its ETag"
        )
        raise FileChanged(
            f"{entry['path']} changed in the bucket since the listing ({what}); run the pull again"
        )
    os.replace(part, path)
    progress.file_done(entry["path"], written)
