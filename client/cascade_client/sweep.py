"""`cascade sweep`: every chosen trace on every chosen config, run by `cascade worker` processes.

The routes (docs/api.md, "Sweeps"): `POST /api/sweeps` makes the jobs, one per (trace,
config), and lists the pairs the server skipped with its reason; `GET /api/sweeps/{id}` says
how far they are; `GET /api/sweeps/{id}/accuracy[?against=OTHER]` is the answer, per config
and per (trace, config), and with `against` kernel by kernel. Every answer is checked for the
shape the API publishes before anything prints it (a `BadAnswer`, exit status 11, otherwise);
the lines made here hold what the server wrote, so the command prints them through `visible`.
"""

import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from cascade_client import answers
from cascade_client.errors import BadAnswer, CascadeError, SweepFailed
from cascade_client.progress import bar
from cascade_client.terminal import table_lines

STATES = ("queued", "running", "ready", "failed", "skipped", "cancelled")
ENDED = ("ready", "failed", "skipped", "cancelled")
NAME_MAX = 100  # a sweep's name, as a simulation's
POLL_FIRST, POLL_MAX = 0.5, 10.0  # --wait's pauses between polls, growing by half each time


# --- the routes -------------------------------------------------------------------------------


def create(
    client,
    *,
    configs: list[str],
    name: str | None = None,
    trace_ids: list[str] | None = None,
    filters: dict | None = None,
    select: str | None = None,
    cover: float | None = None,
    rerun: bool = False,
) -> dict:
    """POST /api/sweeps: the sweep's detail, its jobs queued or skipped (with the reason)."""
    check_select(select)
    body = {"name": name or default_name(configs), "configs": list(configs)}
    if trace_ids:
        body["trace_ids"] = list(trace_ids)
    body |= {key: value for key, value in (filters or {}).items() if value is not None}
    if select:
        body["select"] = select
    if cover is not None:
        body["cover"] = cover
    if rerun:
        body["rerun"] = True
    answer = client._post_json("/api/sweeps", body, refused="the server refused the sweep")
    return checked_sweep(answer, "POST /api/sweeps")


def sweeps(client) -> list[dict]:
    """GET /api/sweeps: every sweep, newest first, without its jobs."""
    rows = client._get_json("/api/sweeps", expect=list)
    return [checked_sweep(row, "GET /api/sweeps", jobs=False) for row in rows]


def sweep(client, sweep_id: int) -> dict:
    """GET /api/sweeps/{id}: the sweep, its counts and its jobs."""
    path = f"/api/sweeps/{int(sweep_id)}"
    return checked_sweep(client._get_json(path), f"GET {path}")


def accuracy(client, sweep_id: int, against: int | None = None) -> dict:
    """GET /api/sweeps/{id}/accuracy: `by_config` rows and `cells`; with `against`, the two
    sweeps kernel by kernel."""
    path = f"/api/sweeps/{int(sweep_id)}/accuracy"
    params = None if against is None else {"against": str(int(against))}
    return checked_accuracy(client._get_json(path, params=params), f"GET {path}")


def wait(client, sweep_id: int, progress=None) -> dict:
    """The sweep once no job of it is queued or running (a cancelled sweep's running jobs
    finish too), polled with pauses from half a second growing to ten; `progress(detail)` after
    each poll."""
    pause = POLL_FIRST
    while True:
        detail = sweep(client, sweep_id)
        if progress is not None:
            progress(detail)
        if not unfinished(detail):
            return detail
        sleep(pause)
        pause = min(pause * 1.5, POLL_MAX)


def sleep(seconds: float) -> None:
    """--wait's pause between two polls (tests put a step of their workers here)."""
    time.sleep(seconds)


def unfinished(detail: dict) -> int:
    return detail["counts"]["queued"] + detail["counts"]["running"]


def outcome(detail: dict) -> None:
    """Raise `SweepFailed` (exit status 12) unless no job ended failed or cancelled and at least
    one ended ready; skipped pairs are neither."""
    counts = detail["counts"]
    if counts["failed"] or counts["cancelled"]:
        raise SweepFailed(
            f"sweep {detail['id']}: {counts['failed']} job(s) failed, {counts['cancelled']} cancelled "
            f"(`cascade sweep show {detail['id']}` lists them)"
        )
    if not counts["ready"]:
        raise SweepFailed(f"sweep {detail['id']}: no job ended ready ({summary(counts)})")


# --- the command ----------------------------------------------------------------------------


def command(client, args) -> Iterator[str]:
    """`cascade sweep [show ID | list]`: the lines to print (what the server wrote in them
    still to be made `visible`); raises `SweepFailed` after the table when a job waited for
    failed."""
    if args.action == "show":
        detail = sweep(client, args.sweep_id)
        answer = accuracy(client, args.sweep_id, args.against)
        yield from head_lines(detail)
        yield from accuracy_lines(answer)
        yield from against_lines(answer)
        yield ""
        yield from job_lines(detail)
        return
    if args.action == "list":
        yield from list_lines(sweeps(client))
        return
    if not args.configs:
        args.usage("a sweep needs at least one --config NAME")
    if not (args.trace_ids or args.model or args.arch or args.sample):
        args.usage("say which traces: --trace ID, --model M, --arch sm_NN or --sample")
    check_select(args.select)
    filters = {"model": args.model, "trace_gpu_arch": args.arch, "sample": True if args.sample else None}
    detail = create(
        client,
        configs=args.configs,
        name=args.name,
        trace_ids=args.trace_ids,
        filters=filters,
        select=args.select,
        cover=args.cover,
        rerun=args.rerun,
    )
    yield from head_lines(detail)
    yield from job_lines(detail)
    if not args.wait:
        return
    yield ""  # the jobs above are on the screen while the bar runs
    progress = Bar(sys.stderr)
    try:
        detail = wait(client, detail["id"], progress)
    finally:
        progress.close()
    yield from head_lines(detail)
    yield from accuracy_lines(accuracy(client, detail["id"]))
    if detail["counts"]["failed"] or detail["counts"]["cancelled"]:
        yield ""
        yield "jobs that failed or were cancelled"
        yield from job_lines({"jobs": [j for j in detail["jobs"] if j["state"] in ("failed", "cancelled")]})
    outcome(detail)


# --- the names and options ----------------------------------------------------------------------


def default_name(configs: list[str]) -> str:
    """`sweep_<configs joined by +>_<UTC time>`, in the characters a simulation's name takes."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    joined = re.sub(r"[^A-Za-z0-9._+-]", "-", "+".join(configs))[: NAME_MAX - len(stamp) - 7]
    return f"sweep_{joined}_{stamp}"


def check_select(select: str | None) -> None:
    if select and select != "unique" and not (select.startswith("step:") and select[5:]):
        raise CascadeError(f"--select takes unique or step:NAME, not {select!r}")


# --- the answers' shapes --------------------------------------------------------------------


def checked_sweep(value, what: str, *, jobs: bool = True) -> dict:
    """A sweep as the API sends it: `id`, `name`, `state`, `counts` of every state, and with
    `jobs`, a list of jobs, each with the fields the command prints."""
    _fields(value, what, "a sweep", {"id": int, "name": str, "state": str, "counts": dict})
    counts = value["counts"]
    for state in STATES:
        if not _number(counts.get(state), whole=True):
            raise BadAnswer(f"{what}: `counts.{state}` is {answers.kind(counts.get(state))}, not a count")
    if jobs:
        if not isinstance(value.get("jobs"), list):
            raise BadAnswer(
                f"{what}: `jobs` is {answers.kind(value.get('jobs'))}, where the API sends a list"
            )
        for job in value["jobs"]:
            _job(job, what)
    return value


def _job(job, what: str) -> None:
    _fields(
        job,
        what,
        "a job",
        {
            "id": int,
            "trace_id": str,
            "config": str,
            "state": str,
            "attempts": int,
            "worker": (dict, type(None)),
            "simulation": (str, type(None)),
            "error": (str, type(None)),
            "reason": (str, type(None)),
            "progress": (dict, type(None)),
        },
    )
    if job["progress"] is not None:
        for key in ("kernels_finished", "kernels_listed"):
            if not _number(job["progress"].get(key), whole=True, none=True):
                raise BadAnswer(
                    f"{what}: a job's `progress.{key}` is {answers.kind(job['progress'].get(key))}"
                )


ROW = {
    "config": (str, type(None)),
    "simulator_build": (str, type(None)),
    "simulations": int,
    "traces": int,
    "kernels_compared": int,
}
CELL = {
    "trace_id": str,
    "config": str,
    "simulation": (str, type(None)),
    "state": (str, type(None)),
    "kernels_compared": (int, type(None)),
}


def checked_accuracy(value, what: str) -> dict:
    """`by_config` rows and `cells`, their numbers numbers (or null), `against` an object."""
    for key, fields, metrics in (
        ("by_config", ROW, ("mape", "pearson_r", "aggregate_error")),
        ("cells", CELL, ("mape",)),
    ):
        rows = value.get(key) if isinstance(value, dict) else None
        if not isinstance(rows, list):
            raise BadAnswer(f"{what}: `{key}` is {answers.kind(rows)}, where the API sends a list")
        for row in rows:
            _fields(row, what, f"a `{key}` row", fields)
            for metric in metrics:
                if not _number(row.get(metric), none=True):
                    raise BadAnswer(f"{what}: a `{key}` row's `{metric}` is {answers.kind(row.get(metric))}")
        if key == "by_config":
            for row in rows:
                if not isinstance(row.get("worst", []), list | type(None)):
                    raise BadAnswer(f"{what}: a row's `worst` is {answers.kind(row['worst'])}")
    if not isinstance(value.get("against"), dict | type(None)):
        raise BadAnswer(
            f"{what}: `against` is {answers.kind(value['against'])}, where the API sends an object"
        )
    return value


def _fields(value, what: str, thing: str, fields: dict) -> None:
    if not isinstance(value, dict):
        raise BadAnswer(f"{what}: {thing} is {answers.kind(value)}, where the API sends an object")
    for key, types in fields.items():
        field = value.get(key)
        if not isinstance(field, types) or (types is int and isinstance(field, bool)):
            raise BadAnswer(f"{what}: {thing}'s `{key}` is {answers.kind(field)}")


def _number(value, *, whole: bool = False, none: bool = False) -> bool:
    if value is None:
        return none
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
        return False
    return whole or value == value  # not NaN


# --- what a person reads ----------------------------------------------------------------------


def summary(counts: dict) -> str:
    """`4 queued, 2 skipped`: the states that have jobs, in their order."""
    return ", ".join(f"{counts[state]} {state}" for state in STATES if counts[state]) or "no jobs"


def head_lines(detail: dict) -> list[str]:
    total = sum(detail["counts"][state] for state in STATES)
    return [
        f"sweep {detail['id']} {detail['name']}: {detail['state']}, {total} job{'s' * (total != 1)}: "
        f"{summary(detail['counts'])}"
    ]


def list_lines(rows: list[dict]) -> list[str]:
    table = [
        [
            str(row["id"]),
            row["name"],
            row["state"],
            summary(row["counts"]),
            ", ".join(str(c) for c in row.get("configs") or []) or "-",
            str(row.get("owner") or "-"),
            str(row.get("created_at") or "")[:16].replace("T", " "),
        ]
        for row in rows
    ]
    if not table:
        return ["no sweeps"]
    return table_lines(["ID", "NAME", "STATE", "JOBS", "CONFIGS", "OWNER", "CREATED (UTC)"], table, right={0})


def job_lines(detail: dict) -> list[str]:
    """The jobs: trace, config, state, attempts, worker, simulation, and why (a skip's reason,
    a failure's error, a running job's kernels)."""
    rows = []
    for job in detail["jobs"]:
        worker = job["worker"] or {}
        why = job["error"] or job["reason"] or ""
        if job["state"] == "running" and job["progress"]:
            why = f"{_kernels(job['progress'])} kernels"
        rows.append(
            [
                str(job["id"]),
                job["trace_id"],
                job["config"],
                job["state"],
                str(job["attempts"]),
                str(worker.get("host") or "-"),
                job["simulation"] or "-",
                shorten(why.splitlines()[0] if why else "", 100),
            ]
        )
    if not rows:
        return ["no jobs"]
    header = ["JOB", "TRACE", "CONFIG", "STATE", "ATTEMPTS", "WORKER", "SIMULATION", "WHY"]
    return table_lines(header, rows, right={0, 4})


def accuracy_lines(answer: dict) -> list[str]:
    """Per config and simulator build (`by_config`), then per (trace, config) (`cells`)."""
    rows = [
        [
            row["config"] or "-",
            shorten(row["simulator_build"] or "-", 60),
            str(row["simulations"]),
            str(row["traces"]),
            f"{row['kernels_compared']:,}",
            _pct(row.get("mape")),
            _num(row.get("pearson_r")),
            _pct(row.get("aggregate_error")),
        ]
        for row in answer["by_config"]
    ]
    lines = ["accuracy by config (pooled over every kernel compared; errors are simulated vs measured)"]
    if rows:
        header = [
            "CONFIG",
            "SIMULATOR BUILD",
            "SIMS",
            "TRACES",
            "KERNELS",
            "MAPE %",
            "PEARSON R",
            "AGGREGATE %",
        ]
        lines += table_lines(header, rows, right={2, 3, 4, 5, 6, 7})
    else:
        lines.append("  none yet: no simulation of the sweep is ready")
    for row in answer["by_config"]:
        worst = [k for k in row.get("worst") or [] if isinstance(k, dict)][:5]
        if worst:
            lines.append(f"worst kernels of {row['config']} ({shorten(row['simulator_build'] or '-', 40)}):")
            lines += [f"  {kernel_line(kernel)}" for kernel in worst]
    cells = [
        [
            cell["trace_id"],
            cell["config"],
            cell["state"] or "-",
            "-" if cell["kernels_compared"] is None else f"{cell['kernels_compared']:,}",
            _pct(cell.get("mape")),
            cell["simulation"] or "-",
        ]
        for cell in answer["cells"]
    ]
    if cells:
        lines += ["", "by trace and config"]
        lines += table_lines(
            ["TRACE", "CONFIG", "STATE", "KERNELS", "MAPE %", "SIMULATION"], cells, right={3, 4}
        )
    return lines


def kernel_line(kernel: dict) -> str:
    """One kernel of a `worst` list: its error, where it ran, its name."""
    error = kernel.get("error")
    error = f"{error:+9.1f} %" if _number(error) else "        - %"
    where = " ".join(
        str(kernel[key]) for key in ("trace_id", "context", "kernel_id") if kernel.get(key) not in (None, "")
    )
    name = kernel.get("demangled") or kernel.get("name") or kernel.get("kernel_name") or ""
    return f"{error}  {where}  {shorten(str(name), 70)}".rstrip()


def against_lines(answer: dict) -> list[str]:
    """Two sweeps kernel by kernel (`?against=`): how many kernels got better and worse, and
    the ones that changed most."""
    against = answer.get("against")
    if not against:
        return []
    lines = ["", f"against sweep {against.get('sweep', '?')}: kernel by kernel"]
    for key, value in against.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            lines.append(f"  {key.replace('_', ' ')}: {value:,}")
    for key in ("better", "worse"):
        kernels = against.get(key)
        if isinstance(kernels, list) and kernels:
            lines.append(f"  {key}:")
            lines += [f"    {kernel_line(k)}" for k in kernels if isinstance(k, dict)]
    return lines


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _kernels(progress: dict) -> str:
    finished, listed = progress.get("kernels_finished"), progress.get("kernels_listed")
    return f"{finished or 0:,}/{'?' if listed is None else f'{listed:,}'}"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _num(value) -> str:
    return "-" if value is None else f"{value:.4f}"


# --- --wait's bar ----------------------------------------------------------------------------


class Bar:
    """A sweep's progress on stderr: jobs ended of all, kernels finished of listed (the running
    jobs' reports); one bar redrawn on a terminal, otherwise a line each time a job ends."""

    def __init__(self, stream, *, redraw: bool | None = None):
        self.stream = stream
        self.redraw = stream.isatty() if redraw is None else redraw
        self.said = None

    def __call__(self, detail: dict) -> None:
        counts = detail["counts"]
        total = sum(counts[state] for state in STATES)
        ended = sum(counts[state] for state in ENDED)
        finished = listed = 0
        share = float(ended)
        for job in detail["jobs"]:
            progress = job["progress"] or {}
            done, of = progress.get("kernels_finished") or 0, progress.get("kernels_listed") or 0
            if job["state"] == "ready":
                done = of  # its last report may predate its last kernel
            finished, listed = finished + done, listed + of
            if job["state"] == "running" and of:
                share += min(done / of, 1.0)  # a running job's part of its own share
        share = share / total if total else 1.0
        kernels = f"  {finished:,}/{listed:,} kernels" if listed else ""
        text = f"{ended}/{total} jobs ended{kernels}  ({summary(counts)})"
        if self.redraw:
            self.stream.write(f"\r{bar(share)} {share:4.0%}  {text}\x1b[K")
            self.stream.flush()
        elif ended != self.said:
            self.said = ended
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.redraw:
            print(file=self.stream, flush=True)
