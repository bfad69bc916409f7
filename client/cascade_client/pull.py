"""`pull`: a run from the bucket into a folder Accel-Sim simulates as it is.

The files come straight from the bucket through the presigned links of `/files` (no token,
no byte through Cascade), several at once. Each lands as `<file>.part` and is renamed only once
its size, and its MD5 where the ETag is one, match the listing: a file already in place and
matching is skipped, a `.part` is fetched again from its start, so a pull that was killed
resumes by running it again; Ctrl-C stops every download at once and leaves the `.part`
files. A file that no longer matches the listing changed in the bucket since: FileChanged, and
the partial download is removed. Each link is signed for the listed ETag and sent with it
(`If-Match`: a replaced object answers 412 before any byte), and no more bytes than listed are
ever written (a longer body is cut off at once).

What cannot be pulled is said, never mixed in: only a `ready` trace is pulled; the trace's id is
written into the folder (`cascade.json`) before its first file, and a folder that holds another
trace is refused unless `force`; a kernel list that names trace files the run lacks stops the
pull unless `allow_missing`. A path from the listing is written only if it stays in the folder
on POSIX and Windows alike (paths.py), a listed size only if a file of a run can have it
(answers.FILE_MAX), and nothing is fetched unless the listed bytes fit on the disk.

With a selection (`/selection`), only the representatives' trace files are fetched, and the
kernel list names only them (memcpy lines kept in order); `cascade.json` records each group's
weight, the launches its representative stands for.

The kernel list written is the one the simulator accepts (`kernelslist.for_simulator`): each
launch once (a run-wide `kernelslist` and a context's list name the same ones), 3-field memcpy
lines, none after the last kernel. A run's own kernelslist.g that breaks this is kept beside as
kernelslist.g.run.
"""

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from shlex import quote

from cascade_client import answers, kernelslist
from cascade_client.accel_sim import ACCELSIM_CONFIGS, GPGPUSIM_CONFIGS, POSTPROCESSOR, SIMULATOR
from cascade_client.downloads import download_all
from cascade_client.errors import (
    BadAnswer,
    DestinationInUse,
    MissingTraceFiles,
    NotReady,
)
from cascade_client.paths import path_problem
from cascade_client.progress import Progress, Silent, size

CLAIM = "cascade.json"  # the trace a folder holds, written before its first file
RUN_FOLDERS = ("traces", "configs")
# When a selection rewrites kernelslist.g, the run's own list is kept beside it under this name.
RUN_LIST_KEPT = "traces/kernelslist.g.run"
POSTPROCESS = f"./{POSTPROCESSOR}"
CONFIG_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")  # a tested config's folder name, as SM86_RTX3070


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
    missing: list[str] = field(default_factory=list)  # trace files the kernel list names, not in the run
    warnings: list[str] = field(default_factory=list)
    select: str | None = None  # the selection pulled ("unique", "step:NAME"), for `cascade simulate`
    cover: float = 1.0

    def next_steps(self, suggested_config: str | None = None, accel_sim: str | None = None) -> list[str]:
        """What to run next, from an accel-sim-framework checkout (`accel_sim`, its path where
        known, else `<ROOT>`). A run that carries its own configs/ is simulated with them; one
        that does not (the samples name a tested config instead) with the tested config's files
        in a folder of their own, as `cascade simulate` does, which is also the first step."""
        steps = []
        named = suggested_config if CONFIG_NAME.match(suggested_config or "") else None
        config = named or "<CONFIG>"
        root = quote(str(Path(accel_sim).absolute())) if accel_sim else "<ROOT>"
        trace = quote(str(self.kernelslist))
        if not self.configs:
            simulate = (
                f"cascade simulate {quote(self.trace_id)} --config {config} --accel-sim {root} "
                f"--workdir {quote(str(self.dest))}"
            )
            if self.select:
                simulate += f" --select {quote(self.select)}"
                if self.cover != 1.0:
                    simulate += f" --cover {self.cover:g}"
            steps.append(simulate)
        if self.postprocess:
            steps.append(f"{POSTPROCESS} {quote(str(self.postprocess))}")
        if self.configs:
            configs = " ".join(f"-config {quote(str(path))}" for path in self.configs)
            steps.append(f"./{SIMULATOR} -trace {trace} {configs}")
        else:
            # GPGPU-Sim opens the .icnt file gpgpusim.config names from the working folder.
            # A subshell, so that the next line still runs from the checkout.
            folder = quote(str(self.dest / "simulations" / (named or "CONFIG")))
            steps.append(
                f"mkdir -p {folder} && cp {root}/{GPGPUSIM_CONFIGS}/{config}/* "
                f"{root}/{ACCELSIM_CONFIGS}/{config}/trace.config {folder}/"
            )
            steps.append(
                f"(cd {folder} && {root}/{SIMULATOR} -trace {trace} -config ./gpgpusim.config -config ./trace.config)"
            )
        if self.dest.name == "NO_ARGS":  # laid out as run_simulations.py looks for traces
            steps.append(
                f"./util/job_launching/run_simulations.py -B <suite with app {self.dest.parent.name}> "
                f"-C {launcher_config(config)} -T {quote(str(self.dest.parent.parent))} -N {quote(self.trace_id)}"
            )
        return steps


def launcher_config(config: str) -> str:
    """The name Accel-Sim's launcher (`run_simulations.py -C`) gives a tested config: without its
    `SMxx_` prefix, with `-SASS` (SM86_RTX3070 is RTX3070-SASS, in its define-standard-cfgs.yml)."""
    return re.sub(r"^SM\d+_", "", config) + "-SASS"


def pull(
    client,
    trace_id: str,
    dest=None,
    *,
    select: str | None = None,
    cover: float = 1.0,
    jobs: int = 8,
    progress=None,
    force: bool = False,
    allow_missing: bool = False,
) -> PullResult:
    """The run of a ready trace into `dest` (default `./<trace_id>`, made absolute), or with
    `select` ("unique" or "step:<name>") only its representatives; see the module's docstring.

    Raises NotReady for a trace that is not `ready`, DestinationInUse for a `dest` that is a
    file or holds another trace (unless `force`) or whose disk lacks the room, MissingTraceFiles
    when the kernel list names trace files the run lacks (unless `allow_missing`: then they are
    in `warnings`), BadAnswer for a listing it refuses (answers.py), FileChanged, Unreachable;
    KeyboardInterrupt stops at once, leaving `.part` files."""
    dest = Path(dest if dest is not None else trace_id).absolute()
    _check_folder(dest)
    listing = client.files(trace_id)
    _check_ready(trace_id, listing)
    entries = [_checked(entry) for entry in listing["files"]]
    selection = client.selection(trace_id, select, cover=cover) if select else None
    _claim(dest, trace_id, client.url, force)
    paths = [entry["path"] for entry in entries]
    layout, lists = kernelslist.source_lists(paths)

    result = PullResult(trace_id=trace_id, dest=dest, select=select, cover=cover)
    _warn_refused(listing.get("refused") or [], result)
    on_disk = {kernelslist.trace_stem(p) for p in paths if kernelslist.is_kernel_trace(p)}
    stems = None if selection is None else _representatives(selection, on_disk, result)
    wanted = _wanted(entries, stems)

    # The run's kernelslist.g goes beside the one the pull writes: with a selection, and where an
    # earlier pull of the run already put it there (its kernelslist.g needed fixing).
    aside = selection is not None or (dest / RUN_LIST_KEPT).is_file()

    def local(path: str) -> str:
        rewritten = aside and path == kernelslist.POSTPROCESSED_LIST
        return RUN_LIST_KEPT if rewritten else path

    # The lists first: what they name says whether the run is whole, before the large files.
    first = [e for e in wanted if e["path"] in lists]
    _check_room(dest, wanted, local)
    if progress is None or progress is True:
        progress = Progress(len(wanted), sum(e["bytes"] for e in wanted)) if progress else Silent()
    try:
        download_all(client, first, dest, local, jobs, progress, result)
        sources = [(dest / local(path)).read_text(errors="replace") for path in lists]
        lines = _kernel_lines(sources, stems, selection, on_disk)
        missing = kernelslist.missing(lines, paths)
        if missing:
            what = _missing(missing, lists, on_disk)
            if not allow_missing:
                raise MissingTraceFiles(f"{what}; nothing else pulled (--allow-missing pulls the rest)")
            result.warnings.append(what)
        result.missing = missing
        rest = [e for e in wanted if e["path"] not in lists]
        download_all(client, rest, dest, local, jobs, progress, result)
    finally:
        progress.close()

    raw_named = layout == "raw" and (lists or selection is not None)
    # A raw-named list of files the post-processor does not take (.tracez) is written as it is.
    raw = raw_named and any(kernelslist.needs_postprocessing(line) for line in lines)
    rewritten = selection is not None or (aside and lists) or (raw_named and not raw)
    own = sources[0] if lists and not raw and not rewritten else None
    result.kernelslist = _write_kernel_list(dest, lines, raw=raw, rewritten=rewritten, own=own, result=result)
    result.configs = [dest / p for p in paths if p in ("configs/gpgpusim.config", "configs/trace.config")]

    kept = {kernelslist.trace_stem(line) for line in lines if not line.startswith("Memcpy")}
    if selection is not None:
        result.groups = [_group(g, kept) for g in selection["groups"]]
    _write_json(dest / CLAIM, _claim_record(trace_id, client.url, selection, wanted, result))
    return result


def _wanted(entries: list[dict], stems: set | None) -> list[dict]:
    """The listed files a pull fetches: every one but the kernel traces a selection leaves out."""
    return [
        e
        for e in entries
        if not kernelslist.is_kernel_trace(e["path"])
        or stems is None
        or kernelslist.trace_stem(e["path"]) in stems
    ]


def _warn_refused(refused: list[dict], result: PullResult) -> None:
    """A warning naming the files the server would not list (their paths could leave the folder)."""
    if refused:
        names = ", ".join(repr(item.get("key") if isinstance(item, dict) else item) for item in refused[:3])
        result.warnings.append(
            f"the server left out {len(refused)} file{'s' * (len(refused) != 1)} whose paths could leave "
            f"the folder: {names}{', ...' if len(refused) > 3 else ''}"
        )


def _representatives(selection: dict, on_disk: set, result: PullResult) -> set:
    """The trace stems of a selection's representatives; a warning for those the run lacks."""
    stems = set()
    for group in selection["groups"]:
        stem = kernelslist.trace_stem(group["representative"].get("trace_file") or "")
        if stem:
            stems.add(stem)
    untraced = sorted(stems - on_disk)
    if untraced:
        result.warnings.append(
            f"{len(untraced)} of {len(selection['groups'])} representatives have no trace file in the run "
            f"(not traced: {', '.join(untraced[:3])}{', ...' if len(untraced) > 3 else ''}): "
            "their groups are weighed in cascade.json but cannot be simulated from this run"
        )
    return stems


def _write_kernel_list(
    dest: Path, lines: list[str], *, raw: bool, rewritten: bool, own: str | None, result: PullResult
) -> Path:
    """The kernelslist.g the simulator reads, written where the run's own would not do: a raw
    list (and what post-processing will make of it), a selection's or a rewritten one, or the
    run's own when the simulator would abort on it (`own`, its text)."""
    simulated = dest / kernelslist.POSTPROCESSED_LIST
    if raw:
        raw_list = dest / kernelslist.RAW_LIST
        _write(raw_list, lines)
        # What the post-processing step will write from it, so the folder reads whole already.
        _write(simulated, [kernelslist.postprocessed(line) for line in lines])
        result.postprocess = raw_list
    elif rewritten:
        _write(simulated, lines)
    elif own is not None and lines != kernelslist.lines_of(own):
        # The run's own kernelslist.g repeats a launch, has 4-field memcpy lines or ends on a
        # memcpy line: the simulator aborts on it, so the fixed list takes its name.
        os.replace(simulated, dest / RUN_LIST_KEPT)
        _write(simulated, lines)
    return simulated


def _claim_record(trace_id: str, server: str, selection: dict | None, wanted: list[dict], result) -> dict:
    """cascade.json: which trace and server the folder holds, complete, and what was pulled."""
    return {
        "trace_id": trace_id,
        "server": server,
        "complete": True,
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
        "missing": result.missing,
        "warnings": result.warnings,
    }


def _kernel_lines(sources: list[str], stems: set | None, selection: dict | None, on_disk: set) -> list[str]:
    """The kernel list the simulator reads: the run's lists as `kernelslist.for_simulator` makes
    them one (the selected launches only, with a selection), or for a run without lists the
    traced representatives, in run order."""
    lines = kernelslist.for_simulator([kernelslist.lines_of(text) for text in sources], stems)
    if not sources and selection is not None:
        lines = sorted(
            (
                g["representative"]["trace_file"]
                for g in selection["groups"]
                if kernelslist.trace_stem(g["representative"].get("trace_file") or "") in on_disk
            ),
            key=lambda name: _launch_order(selection, name),
        )
    return lines


def _missing(missing: list[str], lists: list[str], on_disk: set) -> str:
    named = f"{lists[0]} names" if len(lists) == 1 else "the kernel lists name"
    what = (
        f"{named} {len(missing)} instruction trace file{'s' * (len(missing) != 1)} that the run "
        f"lacks: {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}"
    )
    raw = [name for name in missing if kernelslist.trace_stem(name) in on_disk]
    if raw:
        what += f" ({len(raw)} of them only as raw .trace files: post-process them first)"
    return what


def _check_ready(trace_id: str, listing: dict) -> None:
    """Only a ready trace is pulled: an uploading one lacks files, a failed one may be wrong."""
    state = listing.get("state", "ready")  # a server older than the `state` key: as before
    if state == "ready":
        return
    error = listing.get("error")
    hint = {
        "uploading": "its upload is not complete yet: pull it once it is ready",
        "parsing": "it is being read: pull it in a moment",
        "failed": "ask an operator to fix the run and re-ingest it",
    }.get(state, "pull it once it is ready")
    raise NotReady(
        f"trace {trace_id} is {state}" + (f": {error}" if error else "") + f"; nothing pulled ({hint})"
    )


def _check_folder(dest: Path) -> None:
    """A folder, or one that can be made: neither it nor its nearest existing parent a file."""
    for folder in (dest, *dest.parents):
        if folder.exists():
            if not folder.is_dir():
                where = "" if folder == dest else f": cannot pull into {dest}"
                raise DestinationInUse(f"{folder} is a file, not a folder{where or ': pull into a folder'}")
            return


def _claim(dest: Path, trace_id: str, server: str, force: bool) -> None:
    """Write the trace's id into `dest` before any file, so that two traces never mix in one
    folder: a folder another trace's cascade.json claims, or holding run files that none
    claims, is refused unless `force`."""
    claimed = None
    try:
        claimed = json.loads((dest / CLAIM).read_text()).get("trace_id")
    except FileNotFoundError:
        pass
    except (ValueError, AttributeError, OSError):
        claimed = "?"  # unreadable: not ours to overwrite silently
    if not force:
        if claimed is not None and claimed != trace_id:
            raise DestinationInUse(
                f"{dest} holds trace {claimed!s} (its {CLAIM}): pull {trace_id} into another folder, "
                "or --force to pull over it"
            )
        if claimed is None and any(
            (dest / folder).is_dir() and any((dest / folder).iterdir()) for folder in RUN_FOLDERS
        ):
            raise DestinationInUse(
                f"{dest} holds a run's files but no {CLAIM}: pull {trace_id} into another folder, "
                "or --force to pull over them"
            )
    if claimed == trace_id:
        return
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DestinationInUse(f"cannot make the folder {dest}: {error.strerror or error}") from None
    _write_json(dest / CLAIM, {"trace_id": trace_id, "server": server, "complete": False})


def _checked(entry: dict) -> dict:
    """A listed file, as the server's word that could be anyone's: a path that stays in the
    folder on POSIX and Windows alike, a size a pull takes (answers.FILE_MAX), an http(s) link."""
    problem = path_problem(entry.get("path"))
    if problem is not None:
        raise BadAnswer(
            f"the server listed a file outside the run's folder ({problem}): {entry.get('path')!r}; nothing more pulled"
        )
    answers.listed_size(entry, entry["path"])
    etag = entry.get("etag")
    if etag is not None and not (isinstance(etag, str) and all(" " <= char <= "~" for char in etag)):
        raise BadAnswer(
            f"the server listed {entry['path']} with an ETag no bucket sends; nothing more pulled"
        )
    answers.http_url(entry.get("url"), f"the server listed {entry['path']}")
    return entry


def free_bytes(folder: Path) -> int:
    """Free bytes on the disk that holds `folder` for an unprivileged writer."""
    return shutil.disk_usage(folder).free


def _check_room(dest: Path, entries: list[dict], local) -> None:
    """The listed bytes still to fetch fit on `dest`'s disk (a file already whole, or a `.part`
    fetched again, frees its own room): a listing cannot fill the disk before a file fails."""
    needed = free = 0
    for entry in entries:
        path = dest / local(entry["path"])
        have = path.stat().st_size if path.is_file() else 0
        if have != entry["bytes"]:
            needed += entry["bytes"]
            free += have
        part = path.with_name(path.name + ".part")
        free += part.stat().st_size if part.is_file() else 0
    free += free_bytes(dest)
    if needed > free:
        raise DestinationInUse(
            f"the pull needs {size(needed)} and {dest}'s disk has {size(free)} free; nothing pulled "
            "(free some space, or pull elsewhere)"
        )


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


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".part")
    temporary.write_text("".join(line + "\n" for line in lines))
    os.replace(temporary, path)


def _write_json(path: Path, value) -> None:
    temporary = path.with_name(path.name + ".part")
    temporary.write_text(json.dumps(value, indent=2) + "\n")
    os.replace(temporary, path)
