"""`cascade sweep`: every chosen trace on every chosen config, run by `cascade worker` processes.

The routes (docs/api.md, "Sweeps"): `POST /api/sweeps` makes the jobs, one per (trace,
config), and lists the pairs the server skipped with its reason; `GET /api/sweeps/{id}` says
how far they are; `GET /api/sweeps/{id}/accuracy[?against=OTHER]` is the answer, per config
and per (trace, config), and with `against` kernel by kernel. Every answer is checked for the
shape the API publishes before anything prints it (a `BadAnswer`, exit status 11, otherwise);
sweep_tables.py makes the lines a person reads; `add_sweep` is the command line's part (cli.py
calls it).
"""

import argparse
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from cascade_client import answers
from cascade_client.errors import BadAnswer, CascadeError, SweepFailed
from cascade_client.sweep_tables import (
    STATES,
    Bar,
    accuracy_lines,
    against_lines,
    head_lines,
    job_lines,
    list_lines,
    summary,
)

NAME_MAX = 100  # a sweep's name, as a simulation's
POLL_FIRST, POLL_MAX = 0.5, 10.0  # --wait's pauses between polls, growing by half each time


# --- the command line -----------------------------------------------------------------------

SWEEP_HELP = """Make a sweep: one job per chosen trace and config, run by `cascade worker` processes
(docs/client.md). The traces: --trace IDs, or the list's filters (--model, --arch, --sample). A
pair whose config does not model the trace's GPU is skipped, with the reason; so is one the
worker's Accel-Sim cannot run. Prints the sweep's id and its jobs; with --wait, a progress bar,
then the accuracy per config and per trace.

exit status with --wait: 0 when no job ended failed or cancelled and at least one ended ready
(skipped pairs are listed, not failures); 12 when a job failed or was cancelled, or none ended
ready. Also: `cascade sweep show ID [--against ID]`, `cascade sweep list`."""


def add_sweep(commands) -> None:
    sweep = commands.add_parser(
        "sweep",
        help="run traces on configs across cascade workers; show a sweep's accuracy",
        description=SWEEP_HELP,
        usage="cascade sweep [--trace ID ...] [--model M] [--arch sm_NN] [--sample] --config NAME "
        "[--config NAME ...]\n                     [--select unique|step:NAME] [--cover C] [--rerun] "
        "[--name N] [--wait]\n       cascade sweep show ID [--against ID]\n       cascade sweep list",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sweep.set_defaults(usage=sweep.error)
    sweep.add_argument("--trace", dest="trace_ids", action="append", metavar="ID", help="a trace (repeat)")
    sweep.add_argument("--model", metavar="M", help="every trace of this model, e.g. facebook/opt-125m")
    sweep.add_argument(
        "--arch", metavar="sm_NN", help="every trace traced for this SASS architecture, e.g. sm_75"
    )
    sweep.add_argument("--sample", action="store_true", help="every sample trace (the demo's)")
    sweep.add_argument(
        "--config",
        dest="configs",
        action="append",
        metavar="NAME",
        help="a tested config (repeat; one needed)",
    )
    sweep.add_argument("--select", metavar="unique|step:NAME", help="simulate representatives only")
    sweep.add_argument("--cover", type=float, metavar="C", help="share the groups cover (default 1.0)")
    sweep.add_argument("--rerun", action="store_true", help="run again where this build already simulated")
    sweep.add_argument("--name", metavar="N", help="the sweep's name (default sweep_CONFIGS_TIME)")
    sweep.add_argument(
        "--wait", action="store_true", help="show progress until every job ended, then the table"
    )
    actions = sweep.add_subparsers(dest="action", title="or", metavar="show ID | list")
    show = actions.add_parser(
        "show",
        prog="cascade sweep show",
        help="a sweep's accuracy table and jobs",
        description="A sweep's accuracy per config and per (trace, config), then its jobs. With "
        "--against OTHER: the two sweeps kernel by kernel, which kernels got better or worse and by "
        "how much. Exit status 0 whatever the jobs' states.",
    )
    show.add_argument("sweep_id", metavar="ID", type=int)
    show.add_argument("--against", metavar="ID", type=int, help="another sweep of the same traces")
    actions.add_parser(
        "list",
        prog="cascade sweep list",
        help="every sweep, newest first",
        description="Every sweep, newest first.",
    )


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
# What the command reads of each answer (docs/api.md publishes the rest): a type, a tuple of
# them, `NUMBER` (an int or a finite float), a dict of fields (a field absent reads as null), a
# list of one spec (each item), or `Maybe(spec)` (null, or the spec).

NUMBER, NULL = "number", type(None)


class Maybe:
    def __init__(self, spec):
        self.spec = spec


PROGRESS = {"kernels_finished": (int, NULL), "kernels_listed": (int, NULL)}
JOB = {
    **{"id": int, "trace_id": str, "config": str, "state": str, "attempts": int},
    **{"worker": Maybe({"host": (str, NULL)}), "simulation": (str, NULL), "error": (str, NULL)},
    **{"reason": (str, NULL), "progress": Maybe(PROGRESS)},
}
SWEEP = {"id": int, "name": str, "state": str, "counts": dict.fromkeys(STATES, int)}
KERNEL = {"trace_id": (str, NULL), "ctx": (str, NULL), "kernel_id": int, "name": (str, NULL)}
WORST = {**KERNEL, "error": NUMBER}
CHANGE = {**KERNEL, "error": NUMBER, "against_error": NUMBER, "change": NUMBER}
ROW = {
    **{"config": (str, NULL), "simulator_build": (str, NULL), "simulations": int, "traces": int},
    **{"kernels_compared": int, "mape": Maybe(NUMBER), "pearson_r": Maybe(NUMBER)},
    **{"aggregate_error": Maybe(NUMBER), "worst": Maybe([WORST])},
}
CELL = {
    **{"trace_id": str, "config": str, "simulation": (str, NULL), "state": (str, NULL)},
    **{"kernels_compared": (int, NULL), "mape": Maybe(NUMBER)},
}
COUNTED = {"compared": int, "better": int, "worse": int, "unchanged": int}
PAIR = {
    **{"trace_id": str, "config": str, "against_config": str, "simulation": str},
    **{"against_simulation": str, "mape": Maybe(NUMBER), "against_mape": Maybe(NUMBER), **COUNTED},
    **{"mean_change": Maybe(NUMBER), "better_kernels": [CHANGE], "worse_kernels": [CHANGE]},
}
AGAINST = {"id": int, "name": str, "paired_by": str, **COUNTED, "pairs": [PAIR]}
ACCURACY = {"by_config": [ROW], "cells": [CELL], "against": Maybe(AGAINST)}


def checked_sweep(value, what: str, *, jobs: bool = True) -> dict:
    """A sweep as the API sends it; with `jobs`, its jobs too."""
    return checked(value, {**SWEEP, "jobs": [JOB]} if jobs else SWEEP, what)


def checked_accuracy(value, what: str) -> dict:
    return checked(value, ACCURACY, what)


def checked(value, spec, what: str, where: str = "the answer"):
    """`value` if it matches `spec`, else a `BadAnswer` naming the first field that does not."""
    if isinstance(spec, Maybe):
        return value if value is None else checked(value, spec.spec, what, where)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise BadAnswer(f"{what}: {where} is {answers.kind(value)}, where the API sends an object")
        for key, inner in spec.items():
            checked(
                value.get(key), inner, what, f"`{key}`" if where == "the answer" else f"{where[:-1]}.{key}`"
            )
        return value
    if isinstance(spec, list):
        if not isinstance(value, list):
            raise BadAnswer(f"{what}: {where} is {answers.kind(value)}, where the API sends a list")
        for n, item in enumerate(value):
            checked(item, spec[0], what, f"{where[:-1]}[{n}]`")
        return value
    if spec == NUMBER:
        good = isinstance(value, int | float) and not isinstance(value, bool) and value == value
    else:
        good = isinstance(value, spec) and not isinstance(value, bool)  # the API sends no boolean here
    if not good:
        raise BadAnswer(f"{what}: {where} is {answers.kind(value)}")
    return value
