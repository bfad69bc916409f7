"""The lab bench's figures over whole runs (bench/lab.py holds the large run's and the `Lab`
each function here is given, which uploads and ingests the runs): ingest against `\\copy`, the
best of --repeat clean runs (`ingest_row`, for the large run and memory's larger one); the peak RSS
of `ingest_traces` on runs whose every launch is traced (`traced`), one pass over many new
small runs beside a recorded reference pass (`runs`), the idle pass over failed runs (`idle`),
and the large run's launches into a pandas DataFrame (`dataframe`, `dataframe_seconds`); its
detail's bodies written once, read and removed for `api` (`written_bodies`).
"""

import http.client
import json
import math
import time
from pathlib import Path

from bench import common, harness
from bench.common import log
from bench.harness import MB, Row, mb, secs

# The pass over new runs is judged against a recorded pass of 2,000 runs (its reference).
RECORDED_RUNS_SECONDS, RECORDED_RUNS = 148.8, 2_000

# --- every launch traced, one context ---------------------------------------------------


def ingest_row(lab, key: str, db: str, prefix: str, run_id: str, n: int, child: common.Child) -> None:
    """`ingest_traces` of the run beside `psql \\copy` of the rows it stored, each the best of
    --repeat clean runs (more ingests in scratch databases of their own), judged on the pass:
    listing, metadata.json, parse, COPY and commit. The command's wall time adds the
    interpreter's and Django's start and exit, a fixed cost shown beside."""
    # Each ingest and a \copy in turn: a machine whose speed drifts (a shared host) slows both.
    children, copies = [child], []
    for attempt in range(1, lab.repeat + 1):
        if attempt > 1:
            with common.scratch_database(lab.server, "repeat", template=lab.template) as again:
                log(f"{run_id}: ingest {attempt} of {lab.repeat}")
                children.append(lab.ingest(again, prefix, run_id))
                common.expect_ready(again, run_id, n)
        log(f"{run_id}: psql \\copy of the same rows into an equivalent table ({attempt} of {lab.repeat})")
        copies.append(harness.psql_copy_seconds(db, run_id))
    copy = min(copies)
    best = min(children, key=lambda c: c.pass_seconds() or c.seconds)
    own = best.pass_seconds() or best.seconds
    command = min(c.seconds for c in children)
    lab.add(
        Row(
            key,
            f"Ingest {n:,} launches: `manage.py ingest_traces`"
            + (f", best of {lab.repeat}" if lab.repeat > 1 else ""),
            f"{secs(own)} in the pass; the command {secs(command)}, "
            f"{min(c.cpu_seconds for c in children) * 1e9 / n:,.0f} ns of its CPU a launch",
            f"`psql \\copy` of the same rows {secs(copy)}",
            f"{own / copy:.2f}x the pass ({command / copy:.2f}x the command)",
            "≤ 1.2x",
            own / copy <= 1.2,
            {
                "seconds": [c.seconds for c in children],
                "pass_seconds": [c.pass_seconds() for c in children],
                "copy_seconds": copies,
                "ratio": own / copy,
                "command_ratio": command / copy,
                "cpu_seconds": [c.cpu_seconds for c in children],
                "launches": n,
            },
        )
    )


def traced_run(lab, prefix: str, run_id: str, launches: int) -> int:
    """A generated run of one context, timing.csv and timeline.json, whose kernelslist names
    every launch, as the tracer's default kernel window does (the generator traces a few).
    Returns the launches held: named, and with a trace file (the generator writes a
    few kernels' trace files; the list names every launch, and is read whole all the same)."""
    from tools import generator

    held = []

    def rewrite(folder: Path) -> None:
        every_launch_traced(folder)
        held.append(len(list((folder / "traces").glob("kernel-*"))))

    spec = generator.RunSpec(kernels=launches, contexts=1, seed=2, timing=True, timeline=True)
    lab.upload(prefix, run_id, spec, rewrite=rewrite)
    return held[0]


def traced(lab) -> None:
    sizes = [lab.scale.launches, 2 * lab.scale.launches, 4 * lab.scale.launches]
    rss = {}
    for n in sizes:
        run_id, prefix = f"lab-traced-{n}", f"lab-traced-{n}/"
        with common.scratch_database(lab.server, "traced", template=lab.template) as db:
            held = traced_run(lab, prefix, run_id, n)
            child = lab.ingest(db, prefix, run_id)
            state, count, traced, timed, stepped, timing_error = common.query(
                db,
                "SELECT t.state, t.kernel_count, count(*) FILTER (WHERE k.traced),"
                " count(k.duration_ns), count(k.step), t.timing_error"
                " FROM traces_trace t JOIN traces_kernel k ON k.trace_key = t.key"
                " WHERE t.id = %s GROUP BY t.key, t.state, t.kernel_count, t.timing_error",
                (run_id,),
            )[0]
        if state != "ready" or count != n or traced != held or timed != n or stepped != n:
            raise RuntimeError(
                f"{run_id} came out {state} with {count} kernels, {traced} traced, {timed} timed, "
                f"{stepped} in a step, not ready with {n} of each and {held} traced "
                f"({timing_error or 'no timing error'})"
            )
        rss[n] = child.max_rss
    growth = rss[sizes[-1]] - rss[sizes[0]]
    lab.add(
        Row(
            "traced",
            f"Peak RSS of `ingest_traces`, one context, every launch traced, timing and steps: "
            f"{', '.join(f'{n:,}' for n in sizes)} launches",
            " and ".join(mb(rss[n]) for n in sizes),
            f"4x the launches: {growth / MB:+,.1f} MB",
            f"{rss[sizes[-1]] / rss[sizes[0]]:.2f}x",
            "< 100 MB, flat (within 5 MB)",
            max(rss.values()) < 100 * MB and abs(growth) <= 5 * MB,
            {"rss": rss},
        )
    )


# --- many small runs -----------------------------------------------------------------------


def upload_runs(lab, prefix: str, count: int, spec) -> None:
    """`count` copies of one generated run, each under its own run id."""
    lab.upload(
        prefix, "lab-template-run", spec, copies=[f"{prefix.rstrip('/')}-{i:05d}" for i in range(count)]
    )


def count_states(db: str) -> dict:
    return dict(common.query(db, "SELECT state, count(*) FROM traces_trace GROUP BY state"))


def new_runs(lab) -> None:
    from tools import generator

    n = lab.scale.runs
    prefix = "lab-runs/"
    # A sample-like run (700 launches, prefill and decode steps, timeline.json and
    # timing.csv), with four instruction traces rather than 64: they are listed, never read.
    upload_runs(lab, prefix, n, generator.RunSpec(max_traced=4))
    with common.scratch_database(lab.server, "runs", template=lab.template) as db:
        child = lab.ingest(db, prefix, f"{n:,} new runs")
        states = count_states(db)
    if states.get("ready", 0) != n:
        raise RuntimeError(f"{n} new runs came out {states}")
    recorded = RECORDED_RUNS_SECONDS * n / RECORDED_RUNS
    faster = recorded / child.seconds  # wall time, process start included
    requests = child.s3_requests()
    text = f"recorded {RECORDED_RUNS_SECONDS} s for {RECORDED_RUNS:,} runs"
    if n != RECORDED_RUNS:
        text += f" ({secs(recorded)} for {n:,})"
    lab.add(
        Row(
            "runs",
            f"One pass over {n:,} new small runs",
            f"{child.timing()}, {requests / n:.1f} S3 requests per run" if requests else child.timing(),
            text,
            f"{faster:.1f}x faster",
            "≥ 4x faster",
            faster >= 4,
            {
                "seconds": child.seconds,
                "pass_seconds": child.pass_seconds(),
                "s3_requests": requests,
                "runs": n,
                "recorded_seconds": recorded,
            },
        )
    )


def idle_pass(lab) -> None:
    from tools import generator

    n = lab.scale.failed_runs
    prefix = "lab-failed/"
    spec = generator.RunSpec(kernels=50, status="failed", max_traced=2, timing=False, timeline=False)
    upload_runs(lab, prefix, n, spec)
    with common.scratch_database(lab.server, "idle", template=lab.template) as db:
        first = lab.ingest(db, prefix, f"{n:,} failed runs, first pass")
        second = lab.ingest(db, prefix, f"{n:,} failed runs, second pass")
        states = count_states(db)
    if states.get("failed", 0) != n:
        raise RuntimeError(f"{n} failed runs came out {states}")
    requests = second.s3_requests()
    # Nothing changed: the listing of the run folders (a page per 1,000) and little else.
    allowed = math.ceil(n / 1000) + 4
    lab.add(
        Row(
            "idle",
            f"Idle pass: {n:,} failed runs, nothing changed",
            f"{requests} S3 requests, {second.timing()}",
            f"first pass {first.s3_requests()} S3 requests",
            "",
            f"≤ {allowed} (listing pages only)",
            requests is not None and requests <= allowed,
            {
                "s3_requests": requests,
                "first_pass_s3_requests": first.s3_requests(),
                "seconds": second.seconds,
            },
        )
    )


def every_launch_traced(folder: Path) -> None:
    """Rewrite each kernelslist of the run in `folder` to name every launch of its context
    (the instruction traces are not written: a launch named but not held is not traced,
    docs/decisions/0007, but every name is read), and
    metadata.json's sizes to match."""
    metadata_path = folder / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    for kernelslist in sorted((folder / "traces").glob("kernelslist*")):
        ctx = kernelslist.name.removeprefix("kernelslist").removeprefix("_ctx_")
        stats = folder / "traces" / (f"stats_ctx_{ctx}" if ctx else "stats.csv")
        with stats.open("rb") as lines:
            launches = sum(line.count(b"kernel-") for line in lines)
        kept = [
            line for line in kernelslist.read_text().splitlines(keepends=True) if line.startswith("Memcpy")
        ]
        scheme = f"-ctx_{ctx}.trace.xz" if ctx else ".trace"
        with kernelslist.open("w") as out:
            out.writelines(kept)
            out.writelines(f"kernel-{n}{scheme}\n" for n in range(1, launches + 1))
        for entry in metadata["files"]:
            if entry["key"].endswith(f"/traces/{kernelslist.name}"):
                entry["bytes"] = kernelslist.stat().st_size
    metadata_path.write_text(json.dumps(metadata, indent=2) + "\n")


# --- a trace's launches into a pandas DataFrame (CSV at most a third of JSON's time) -----


def _frame_seconds(port: int, path: str, headers: dict, read) -> tuple[float, int, int, int]:
    """GET `path` (plain, over loopback) and `read` its response into a DataFrame, end to end as
    a researcher's script runs it: (seconds, rows, columns, bytes read whole, 0 if streamed)."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    try:
        conn.request("GET", path, headers={**headers, "Accept-Encoding": "identity"})
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"GET {path} answered {response.status}")
        frame, nbytes = read(response)
    finally:
        conn.close()
    return time.perf_counter() - started, len(frame), len(frame.columns), nbytes


def dataframe_seconds(port: int, trace_id: str, headers: dict, *, repeat: int = 2) -> dict:
    """The best of `repeat` of each way (the first CSV and JSON warm the server's worker too).

    CSV: `pandas.read_csv` reading the response as it arrives (no copy of the body held first),
    the C parser. JSON: the body read whole, `json.loads` (what httpx's and requests' `.json()`
    do), then `pandas.DataFrame(detail["kernels"])`, grid and block left as lists: the cheapest
    JSON way.
    """
    import pandas

    def csv(response):
        return pandas.read_csv(response, engine="c"), 0

    def detail(response):
        body = response.read()
        return pandas.DataFrame(json.loads(body)["kernels"]), len(body)

    csv_path, json_path = f"/api/traces/{trace_id}/kernels.csv", f"/api/traces/{trace_id}"
    csv_bytes = common.http_get(port, csv_path, {**headers, "Accept-Encoding": "identity"}).nbytes
    best_csv, best_json = (
        min((_frame_seconds(port, path, headers, read) for _ in range(repeat)), key=lambda run: run[0])
        for path, read in ((csv_path, csv), (json_path, detail))
    )
    return {
        "csv_seconds": best_csv[0],
        "csv_bytes": csv_bytes,
        "csv_rows": best_csv[1],
        "csv_columns": best_csv[2],
        "json_seconds": best_json[0],
        "json_bytes": best_json[3],
        "json_rows": best_json[1],
        "ratio": best_csv[0] / best_json[0],
    }


def written_bodies(db: str, run_id: str) -> dict:
    """When the trace's detail was written after it was ready, and its bytes by coding."""
    rows = common.query(
        db,
        "SELECT b.coding, b.size, EXTRACT(EPOCH FROM (b.written_at - t.updated_at)) FROM traces_detailbody b "
        "JOIN traces_trace t ON t.id = b.trace_id WHERE b.trace_id = %s",
        (run_id,),
    )
    return {
        "seconds_after_ready": max((float(row[2]) for row in rows), default=None),
        "written_bytes": {coding: size for coding, size, _ in rows},
    }


def remove_written_bodies(db: str) -> None:
    """The trace's written bodies removed (the pieces first: Django's cascade is its own)."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DELETE FROM traces_detailbodychunk")
        conn.execute("DELETE FROM traces_detailbody")
