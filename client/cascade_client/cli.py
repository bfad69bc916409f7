"""`cascade`: the client's command line. Thin: parse, call `Cascade`, print for a person.

Errors are one line on stderr, `cascade: <what went wrong>`, and the exit status says which
(errors.py lists the codes). What the server or an uploader wrote (metadata, kernel names,
errors) reaches the terminal through `visible`: its control characters escaped.
"""

import argparse
import codecs
import json
import os
import sys

from cascade_client.api import Cascade
from cascade_client.errors import BadAnswer, CascadeError
from cascade_client.progress import size
from cascade_client.pull import POSTPROCESS
from cascade_client.sweep import add_sweep
from cascade_client.terminal import table_lines, visible
from cascade_client.worker import add_worker

EPILOG = """environment: CASCADE_URL (default http://127.0.0.1:8000), CASCADE_TOKEN (required).
exit status: 0 done, 1 other error, 2 wrong arguments, 3 no token, 4 token refused,
5 no such trace or sweep, 6 server unreachable, 7 file changed in the bucket, 8 trace not ready,
9 trace files missing from the run, 10 destination is a file, another trace's folder or too
small a disk, 11 the server's answer is malformed, too large or hostile, 12 a sweep waited for
ended with a job failed or cancelled, or none ready."""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="cascade",
        description="Find GPU traces in Cascade, read their kernels, pull a run for Accel-Sim, push a run.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    traces = commands.add_parser("traces", help="list traces, newest first")
    traces.add_argument("--state", choices=["uploading", "parsing", "ready", "failed"])
    traces.add_argument("--model", help="exact model name, e.g. facebook/opt-125m")
    traces.add_argument("--arch", help="the traced GPU's SASS architecture, e.g. sm_90")
    traces.add_argument("--gpu", help="the source GPU's name, exactly")
    traces.add_argument("--json", action="store_true", help="the API's JSON instead of a table")

    show = commands.add_parser("show", help="a trace: its summary, kernel mix and steps")
    show.add_argument("trace_id", metavar="ID")
    show.add_argument("--top", type=int, default=15, help="kernels shown in the mix (default 15)")

    kernels = commands.add_parser("kernels", help="every kernel launch of a trace")
    kernels.add_argument("trace_id", metavar="ID")
    kernels.add_argument("--format", choices=["csv", "json"], default="csv")
    kernels.add_argument("--output", "-o", metavar="FILE", help="write there instead of stdout")

    simulate = commands.add_parser(
        "simulate",
        help="pull a trace, run your Accel-Sim on it, upload the log, print the accuracy",
        description="Pull the trace, post-process it, run accel-sim.out with a tested config of your "
        "accel-sim-framework checkout, upload the log to Cascade and print how the simulation compares "
        "(docs/simulations.md). Exit status 0 only when Cascade compared at least one kernel.",
    )
    simulate.add_argument("trace_id", metavar="ID")
    simulate.add_argument(
        "--config", required=True, metavar="NAME", help="a tested config, e.g. SM75_RTX2060"
    )
    simulate.add_argument("--accel-sim", metavar="ROOT", help="your built checkout (default $ACCEL_SIM_ROOT)")
    simulate.add_argument(
        "--name", metavar="SIM", help="the simulation's name (default accelsim_CONFIG_TIME)"
    )
    simulate.add_argument("--select", metavar="unique|step:NAME", help="simulate representatives only")
    simulate.add_argument("--cover", type=float, default=1.0, help="share the groups cover (default 1.0)")
    simulate.add_argument("--jobs", type=int, default=8, help="downloads and checks at once (default 8)")
    simulate.add_argument("--workdir", metavar="DIR", help="where to pull and simulate (default ./ID)")
    simulate.add_argument("--timeout", type=float, metavar="S", help="kill the simulator after S seconds")
    simulate.add_argument("--force", action="store_true", help="simulate despite a SASS or file mismatch")

    add_push(commands)
    add_sweep(commands)
    add_worker(commands)

    pull = commands.add_parser(
        "pull",
        help="download a run into a folder Accel-Sim simulates",
        description="Download a run's traces/ and configs/ through presigned links, checked and "
        "resumable; with --select, only representative launches and their weights.",
    )
    pull.add_argument("trace_id", metavar="ID")
    pull.add_argument("dest", metavar="DEST", nargs="?", help="folder (default ./ID)")
    pull.add_argument(
        "--select", metavar="unique|step:NAME", help="only one launch per group of identical work"
    )
    pull.add_argument(
        "--cover", type=float, default=1.0, help="share of the run the groups cover (default 1.0)"
    )
    pull.add_argument("--jobs", type=int, default=8, help="downloads at once (default 8)")
    pull.add_argument(
        "--force", action="store_true", help="pull into a folder that holds another trace's files"
    )
    pull.add_argument(
        "--allow-missing",
        action="store_true",
        help="pull although the kernel list names trace files the run lacks",
    )
    return top


def add_push(commands) -> None:
    push = commands.add_parser(
        "push",
        help="upload a tracer's run folder to Cascade (a write token; no bucket credentials)",
        description="Upload RUN_DIR (metadata.json last) through presigned URLs, resumable: run it "
        "again after an interruption and only what is missing is sent. The first push to an id "
        "makes it yours; only you or staff may push to it again, and a ready trace is never replaced.",
    )
    push.add_argument("run_dir", metavar="RUN_DIR")
    push.add_argument(
        "--id", dest="trace_id", metavar="RUN_ID", help="the trace's id (default: the folder's name)"
    )
    push.add_argument("--wait", action="store_true", help="wait until Cascade has ingested it")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        with Cascade() as cascade:
            return COMMANDS[args.command](cascade, args) or 0
    except CascadeError as error:
        print(f"cascade: {visible(error)}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(
            "cascade: interrupted"
            + ("; run the same command again to resume" if args.command in ("pull", "push") else "")
            + ("; the sweep goes on: `cascade sweep show ID` shows it" if args.command == "sweep" else ""),
            file=sys.stderr,
        )
        return 130
    except (KeyError, TypeError, AttributeError, IndexError) as error:
        # An answer past the shapes answers.py checks, lacking a field a command prints: still
        # one line, naming what was missing (a fault of the client's own would read the same).
        print(
            f"cascade: the server's answer is not what Cascade's API sends ({type(error).__name__}: "
            f"{visible(str(error)[:200])}); is CASCADE_URL a Cascade server?",
            file=sys.stderr,
        )
        return BadAnswer.exit_code
    except OSError as error:  # a folder or file that cannot be written: one line, not a traceback
        where = f": {error.filename}" if error.filename else ""
        print(f"cascade: {visible(error.strerror or error)}{visible(where)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `cascade kernels ID | head`
        sys.stderr.close()
        return 0


def traces(cascade: Cascade, args) -> None:
    rows = cascade.traces(state=args.state, model=args.model, trace_gpu_arch=args.arch, source_gpu=args.gpu)
    if args.json:
        print(json.dumps(rows, indent=2))  # ensure_ascii: every control character escaped
        return
    table = [
        [
            t["id"],
            t["state"],
            t["model"] or "-",
            t["trace_gpu_arch"] or "-",
            t["source_gpu"] or "-",
            f"{t['kernel_count']:,}",
            size(t["bytes"] or 0),
            t["created_at"][:16].replace("T", " "),
        ]
        for t in rows
    ]
    print_table(
        ["ID", "STATE", "MODEL", "ARCH", "GPU", "KERNELS", "SIZE", "CREATED (UTC)"], table, right={5, 6}
    )
    print(f"{len(rows)} trace{'s' * (len(rows) != 1)}", file=sys.stderr)


def show(cascade: Cascade, args) -> None:
    trace = next((t for t in cascade.traces() if t["id"] == args.trace_id), None)
    if trace is None:
        cascade.trace(args.trace_id)  # the server's own 404
        return
    fields = [
        ("id", trace["id"]),
        ("state", trace["state"] + (f" ({trace['error']})" if trace.get("error") else "")),
        ("model", trace["model"] or "-"),
        ("gpu", f"{trace['source_gpu'] or '-'}, traced for {trace['trace_gpu_arch'] or '?'}"),
        ("simulate with", trace["suggested_sim_config"] or "-"),
        ("size", size(trace["bytes"] or 0)),
        ("created", trace["created_at"]),
    ]
    if trace.get("waiting_for"):  # an uploading trace: what it waits for (older servers send none)
        fields.append(("waiting for", trace["waiting_for"]))
    for warning in trace.get("warnings") or []:
        fields.append(("warning", f"{warning.get('file')}: {warning.get('what')}"))
    if trace["state"] != "ready":
        print_fields(fields + [("kernels", "none yet: the trace is not ready")])
        return
    summary = cascade.summary(args.trace_id)
    measured = (
        f", {summary['duration_ns'] / 1e6:,.3f} ms measured" if summary["duration_ns"] is not None else ""
    )
    fields.append(
        ("launches", f"{summary['kernel_count']:,}, {summary['total_insts'] or 0:,} instructions{measured}")
    )
    print_fields(fields)

    print(
        f"\nkernel mix ({min(args.top, len(summary['kernels']))} of {len(summary['kernels'])} kernels, most instructions first)"
    )
    print_table(
        ["INSTS %", "TIME %", "LAUNCHES", "INSTRUCTIONS", "KERNEL"],
        [
            [
                percent(k["insts_share"]),
                percent(k["time_share"]),
                f"{k['launches']:,}",
                f"{k['total_insts'] or 0:,}",
                shorten(k["demangled"] or k["name"], 70),
            ]
            for k in summary["kernels"][: args.top]
        ],
        right={0, 1, 2, 3},
    )
    print(f"\nsteps ({len(summary['steps'])})")
    if summary["steps"]:
        print_table(
            ["STEP", "PHASE", "LAUNCHES", "INSTRUCTIONS", "TIME (ms)"],
            [
                [
                    s["name"],
                    s["phase"] or "-",
                    f"{s['kernels']:,}",
                    f"{s['total_insts'] or 0:,}",
                    "-" if s["duration_ns"] is None else f"{s['duration_ns'] / 1e6:,.3f}",
                ]
                for s in summary["steps"]
            ],
            right={2, 3, 4},
        )
    else:
        print("  none: the run has no timeline.json")


def kernels(cascade: Cascade, args) -> None:
    out = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: SIM115
    on_terminal = not args.output and sys.stdout.isatty()
    try:
        if args.format == "csv":
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            for chunk in cascade.kernels_csv(args.trace_id):
                if on_terminal:  # a file gets the bytes as served; a terminal, no escape sequence
                    chunk = visible(decoder.decode(chunk), keep="\r\n").encode()
                out.write(chunk)
        else:
            out.write(json.dumps(cascade.kernels(args.trace_id)).encode() + b"\n")
        out.flush()
    finally:
        if args.output:
            out.close()


def pull(cascade: Cascade, args) -> None:
    if args.select and args.select != "unique" and not (args.select.startswith("step:") and args.select[5:]):
        raise CascadeError(f"--select takes unique or step:NAME, not {args.select!r}")
    result = cascade.pull(
        args.trace_id,
        args.dest,
        select=args.select,
        cover=args.cover,
        jobs=args.jobs,
        progress=True,
        force=args.force,
        allow_missing=args.allow_missing,
    )
    for warning in result.warnings:
        print(f"cascade: warning: {visible(warning)}", file=sys.stderr)
    print(
        f"pulled {visible(args.trace_id)} into {visible(result.dest)}: {result.downloaded} files downloaded "
        f"({size(result.bytes)}), {result.skipped} already there"
    )
    if result.groups:
        weight = sum(g["weight"] for g in result.groups)
        listed = sum(g["in_kernelslist"] for g in result.groups)
        print(
            f"{len(result.groups)} groups standing for {weight:,} launches (weights in cascade.json); "
            f"{listed} representatives in kernelslist.g"
        )
    suggested = None
    try:
        suggested = next(
            (t["suggested_sim_config"] for t in cascade.traces() if t["id"] == args.trace_id), None
        )
    except CascadeError:
        pass
    steps = result.next_steps(suggested, os.environ.get("ACCEL_SIM_ROOT") or None)
    print("next, from your accel-sim-framework checkout:")
    in_one = steps[0].startswith("cascade simulate ")  # a run without configs/: a tested config
    for n, step in enumerate(steps):
        if in_one and n == 0:
            print("  # post-process, simulate with the tested config and upload the log, in one command:")
        elif in_one and n == 1:
            print("  # or by hand (the simulator runs in a folder holding the tested config's files):")
        if step.startswith(POSTPROCESS):
            print(
                "  # the run holds raw traces: post-process the listed ones (writes the .traceg.xz files traces/kernelslist.g names)"
            )
        print(f"  {visible(step)}")


def simulate(cascade: Cascade, args) -> int:
    from cascade_client.simulate import simulate, summary_lines

    if args.select and args.select != "unique" and not (args.select.startswith("step:") and args.select[5:]):
        raise CascadeError(f"--select takes unique or step:NAME, not {args.select!r}")
    result = simulate(
        cascade,
        args.trace_id,
        config=args.config,
        root=args.accel_sim,
        name=args.name,
        select=args.select,
        cover=args.cover,
        jobs=args.jobs,
        workdir=args.workdir,
        timeout=args.timeout,
        force=args.force,
    )
    print("\n".join(visible(line) for line in summary_lines(result)))  # names and errors are an uploader's
    return 0 if result.succeeded else 1


def sweep(cascade: Cascade, args) -> int:
    from cascade_client.sweep import command

    for line in command(cascade, args):
        print(visible(line), flush=True)  # names, reasons and errors are the server's and the uploaders'
    return 0


def worker(cascade: Cascade, args) -> int:
    from cascade_client.worker import command

    return command(cascade, args)


def push(cascade: Cascade, args) -> None:
    from cascade_client.push import main_line, push

    result = push(cascade, args.run_dir, args.trace_id, progress=True, wait=args.wait)
    print(visible(main_line(result)))


COMMANDS = {
    "traces": traces,
    "show": show,
    "kernels": kernels,
    "pull": pull,
    "push": push,
    "simulate": simulate,
    "sweep": sweep,
    "worker": worker,
}


def print_fields(fields: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name:<{width}}  {visible(value)}")


def print_table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> None:
    for line in table_lines(header, rows, right):
        print(line)


def percent(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f}"


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
