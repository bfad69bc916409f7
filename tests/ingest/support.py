"""Helpers the ingest tests share: stats files and their strategies, runs and simulations uploaded, what a parse stores (not tests themselves)."""

import ctypes
import json
import os
import re
import string
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import orjson
from django.db import transaction
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ingest import bucket, events, parse
from ingest.bucket import S3Object
from ingest.listing import fingerprint, inventory
from ingest.read_ahead import ReadAhead
from ingest.stats import KernelRow
from ingest.stats_fast_path import LaunchText
from ingest.timing.timeline import StepIndex
from ingest.timing.timing_csv import read_timing
from simulations.models import Simulation
from tests.helpers import (
    PREFIX,
    STATS_HEADER,
    TEST_BUCKET,
    VECADD_CTX,
    shared_fixture,
    stats_row,
)
from traces import kernel_store, services
from traces.models import Kernel, Trace, TraceState, next_trace_keys

EXAMPLES = int(os.environ.get("CASCADE_HYPOTHESIS_EXAMPLES", "300"))


PROPERTY = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def stats_files(draw, *, variants=("standard", "latency", "device", "distributed"), min_launches=0):
    """A stats file as the tracer (or a fork) writes it, and the rows it holds."""
    variant = draw(st.sampled_from(variants))
    # The device-id fork writes every device into one stats.csv, with its header.
    header = variant == "device" or draw(st.booleans())
    trace_file, gpu = trace_file_namer(draw, variant)
    count = draw(st.integers(min_launches, 12))
    increments = st.sampled_from([1, 1, 1, 2, 17])
    next_id: dict[int | None, int] = {}
    text = {"standard": TRACER_STATS_HEADER, "latency": LATENCY_HEADER, "device": DEVICE_HEADER}.get(
        variant, TRACER_STATS_HEADER
    )
    if not header:
        text = ""
    expected = []
    kinds: list[tuple] = []
    for _ in range(count):
        device = draw(st.integers(0, 3)) if variant == "device" else None
        stream = (
            draw(st.one_of(st.integers(0, 64), st.integers(0, UINT32 - 1))) if device is not None else None
        )
        kernel_id = (
            next_id.get(device, 0) + draw(increments) if device in next_id else draw(st.integers(1, 3))
        )
        next_id[device] = kernel_id
        # A run launches a few kernels in a few shapes, again and again.
        if kinds and draw(st.booleans()):
            name, grid, block = draw(st.sampled_from(kinds))
        else:
            name, grid, block = draw(NAME), draw(DIM3), draw(DIM3)
            kinds.append((name, grid, block))
        # None: a launch captured into a CUDA graph, or the kernel a killed run never finished.
        totals = draw(st.one_of(st.none(), st.tuples(TOTAL, TOTAL)))
        text += tracer_launch_half(
            trace_file(kernel_id), name, grid, block, device_id=device, stream_id=stream
        )
        if totals is not None:
            latency = (f"{draw(LATENCY):.6f}",) if variant == "latency" else ()
            text += tracer_totals(*totals, *latency)
        expected.append(
            KernelRow(
                kernel_id=kernel_id,
                name=name,
                trace_file=trace_file(kernel_id),
                grid_x=grid[0],
                grid_y=grid[1],
                grid_z=grid[2],
                block_x=block[0],
                block_y=block[1],
                block_z=block[2],
                blocks=grid[0] * grid[1] * grid[2] % UINT32,
                threads=block[0] * block[1] * block[2] % UINT32,
                total_insts=None if totals is None else totals[0],
                total_reported_insts=None if totals is None else totals[1],
                device_id=gpu if variant == "distributed" else device,
                stream_id=stream,
            )
        )
    # Copies through other systems: a final newline added or lost, CRLF line endings.
    if text.endswith("\n"):
        if draw(st.booleans()):
            # The tracer ends every totals line with a newline in the same write: totals
            # without one may be cut short, and are not trusted (issue 29).
            text = text[:-1]
            if expected and expected[-1].total_insts is not None:
                expected[-1] = expected[-1]._replace(total_insts=None, total_reported_insts=None)
    elif text and draw(st.booleans()):
        text += "\n"
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    extra = 1 if variant == "latency" else 0
    # A header in the file wins over what the caller passes; a headerless file needs the right width.
    extra_columns = draw(st.integers(0, 3)) if header else extra
    return StatsFile(text.encode(), expected, extra_columns, variant, header)


# The tracer's header as tracer_tool.cu prints it, written out here: the property tests' outside
# truth (not tools.tracer_format's, which the generator uses).
TRACER_STATS_HEADER = (
    "kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, "
    "block_dimX, block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
)


DEVICE_HEADER = "device_id, stream_id, " + TRACER_STATS_HEADER


LATENCY_HEADER = TRACER_STATS_HEADER.rstrip("\n") + ", latency\n"


TOKENS = st.sampled_from(
    [
        b"kernel-1.trace",
        b"kernel-2-ctx_0x1f.trace.xz",
        b"kernel-3_1.trace",
        b"kernel-",
        b".trace",
        b", ",
        b",",
        b" ",
        b"\n",
        b"\r\n",
        b"\r",
        b"-",
        b"0",
        b"1",
        b"32",
        b"2147483648",
        b"-2147483648",
        b"-2147483649",
        b"4294967296",
        b"99999999999999999999999",
        b"1.500000",
        b"_Z1av",
        b"void f<1, 2>(int)",
        b"kernel id",
        TRACER_STATS_HEADER.encode(),
        DEVICE_HEADER.encode(),
        LATENCY_HEADER.encode(),
        b"kernel name,total_insts,total_reported_insts\n",
        b"1-_Z6vecAddPdS_S_i.trace,50066,50066\n",
        b"\x00",
        b"\xff",
        b"\xc3\xa9",
        "\u2028".encode(),
        b"\xef\xbb\xbf",
    ]
)


SOUP = st.lists(TOKENS, max_size=60).map(b"".join)


@st.composite
def mutated_files(draw):
    """A valid file, truncated or with commas, newlines and stray bytes inserted, deleted, repeated."""
    data = draw(stats_files()).data
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        match draw(st.sampled_from(["truncate", "insert", "delete", "repeat"])):
            case "truncate":
                data = data[:at]
            case "insert":
                data = data[:at] + draw(TOKENS) + data[at:]
            case "delete":
                data = data[:at] + data[at + draw(st.integers(1, 12)) :]
            case "repeat":
                data = data[:at] + data[at : at + draw(st.integers(1, 200))] + data[at:]
    return data


@st.composite
def long_numbers(draw):
    """A file the tracer wrote, with one of its numbers (a kernel id, grid, block, a total, a
    latency) replaced by a very long digit string."""
    data = draw(stats_files(min_launches=1)).data
    numbers = list(re.finditer(rb"[0-9]+", data))
    if not numbers:
        return data
    number = draw(st.sampled_from(numbers))
    return data[: number.start()] + draw(LONG_DIGITS) + data[number.end() :]


LONG_TOTALS = b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, " + b"9" * 5000 + b",5\n"


LONG_GRID = b"kernel-1.trace, _Z1av, " + b"9" * 5000 + b", 1, 1, 1, 32, 1, 1, 32, 5,5\n"


LONG_KERNEL_ID = b"kernel-" + b"9" * 5000 + b".trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n"


def run_files(n: int) -> tuple[dict, dict | None]:
    """Run n's files and metadata.json: ready ones of several shapes, failed ones, unfinished ones."""
    kind = n % 6
    if kind == 0:  # two contexts, the header in the first file only, listed in metadata.json
        files = {
            "traces/stats_ctx_0x1": stats_file(n % 7 + 1),
            "traces/stats_ctx_0x2": stats_file(3, "0x2", header=False),
        }
        listed = [{"key": f"{PREFIX}r{n:03d}/{name}", "bytes": len(body)} for name, body in files.items()]
        return files, {**OK, "files": listed}
    if kind == 1:  # a kernelslist, an instruction trace that is never read, and timing
        files = {
            "traces/stats_ctx_0x1": stats_file(5),
            "traces/kernelslist_ctx_0x1": "kernel-2-ctx_0x1.trace.xz\n",
            "traces/kernel-2-ctx_0x1.trace.xz": b"\xfd7zXZ\x00",
            "timing.csv": "ctx,kernel_id,start_ns,end_ns,duration_ns\n"
            + "".join(f"0x1,{k},{k * 100},{k * 100 + 50},50\n" for k in range(1, 6)),
        }
        return files, OK
    if kind == 2:
        return {"traces/stats_ctx_0x1": stats_file(n + 1)}, {"status": "failed", "error": "OOM"}
    if kind == 3:
        return {"traces/stats_ctx_0x1": "garbage\n"}, OK
    if kind == 4:
        return {"traces/stats_ctx_0x1": stats_file(2)}, None  # still uploading
    return {"traces/stats_ctx_0x1": stats_file(n)}, {**OK, "model": f"model-{n}"}


def upload_runs(s3, count: int, make=run_files) -> None:
    def put(n: int) -> None:
        files, metadata = make(n)
        for name, body in files.items():
            body = body.encode() if isinstance(body, str) else body
            s3.put_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}r{n:03d}/{name}", Body=body)
        if metadata is not None:
            s3.put_object(
                Bucket=TEST_BUCKET, Key=f"{PREFIX}r{n:03d}/metadata.json", Body=orjson.dumps(metadata)
            )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(count)))


def outcome(api) -> dict:
    """Every trace as the database holds it, with its kernels as the API serves them."""
    traces = {}
    for trace in Trace.objects.order_by("id"):
        kernels = (
            api.get(f"/api/traces/{trace.id}").json()["kernels"] if trace.state == TraceState.READY else []
        )
        traces[trace.id] = (
            trace.state,
            trace.error,
            trace.kernel_count,
            trace.files,
            trace.parsed_fingerprint,
            trace.model,
            trace.has_real_timing,
            kernels,
        )
    return traces


def in_queue(sqs, url) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def drain(url) -> list[events.BatchResult]:
    batches = []
    while (batch := events.consume_batch(url, wait_seconds=0)).received:
        batches.append(batch)
    return batches


# `nsys stats --report cuda_gpu_trace --format csv` (2024.x column set): kernels and a memcpy.
NSYS_HEADER = (
    "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
    "Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name\n"
)


def nsys_row(start, duration, corr, grid, block, name, ctx=1):
    gx, gy, gz = grid
    bx, by, bz = block
    return f"{start},{duration},{corr},{gx},{gy},{gz},{bx},{by},{bz},32,0.000,0.000,,,,,NVIDIA H100 (0),{ctx},,7,{name}\n"


def lines(text: str) -> list[bytes]:
    return text.encode().splitlines(keepends=True)


def assert_stored_alike(
    files: list[bytes] | dict[str, bytes],
    extra_columns: int,
    steps: list | None = None,
    timing_csv: str | None = None,
) -> tuple[list | str, int]:
    general, _ = stored(files, extra_columns, fast=False, steps=steps, timing_csv=timing_csv)
    fast, taken = stored(files, extra_columns, fast=True, steps=steps, timing_csv=timing_csv)
    assert fast == general
    return fast, taken


# The six real logs this module reads (docs/formats.md#the-simulators-log), by name: the folder holds more.
NAMES = [
    "akj10__matrixMul_log_n128.log",
    "bcpark__rodinia_lud_output.txt",
    "halUW__benchmark_1_stream_clean.log",
    "spapad__backprop_classic.out",
    "spapad__classic_run_l1_bw_32f_out.TRUNCATED.log",
    "swayhrl__replay_1_run.MAXCYCLE.EXCERPT.log",
]


LOGS = {name: shared_fixture("real-sim-logs", name).read_bytes() for name in NAMES}


def real_log(name: str) -> bytes:
    return shared_fixture("real-sim-logs", name).read_bytes()


def timing_csv(durations: dict[int, int], ctx: str = VECADD_CTX) -> str:
    lines = ["ctx,kernel_id,start_ns,end_ns,duration_ns"]
    start = 1000
    for kernel_id, duration in sorted(durations.items()):
        lines.append(f"{ctx},{kernel_id},{start},{start + duration},{duration}")
        start += duration + 100
    return "\n".join(lines) + "\n"


OK_MARKER = {"status": "ok", "simulator": "accel-sim", "config": "SM7_TITANV"}


def upload_simulation(
    s3, run_id: str, name: str, log: bytes, marker: dict | None = OK_MARKER, log_name="sim.log"
):
    folder = f"{PREFIX}{run_id}/simulations/{name}/"
    s3.put_object(Bucket=TEST_BUCKET, Key=folder + log_name, Body=log)
    if marker is not None:
        s3.put_object(Bucket=TEST_BUCKET, Key=folder + "simulation.json", Body=json.dumps(marker).encode())


def simulation(run_id: str, name: str) -> Simulation:
    return Simulation.objects.get(trace_id=run_id, name=name)


def hal_trace(log: bytes, measured: dict[int, int] | None = None) -> dict:
    names = launches_of(log)
    headers = headers_of(log)
    launches = [(kernel_id, names[uid]) for uid, kernel_id in enumerate(headers, 1)]
    return trace_of(launches, measured)


GOOD = b"""Accel-Sim [build accelsim-commit-test]
        *** GPGPU-Sim Simulator Version 4.2.0  [build gpgpu-sim_git-commit-test] ***
-gpgpu_clock_domains 1000.0:1000.0:1000.0:1000.0
Header info loaded for kernel command : /t/kernel-1.traceg
launching kernel name: _Z5firstv uid: 1 cuda_stream_id: 0
Destroy streams for kernel 1: size 0
kernel_name = _Z5firstv
kernel_launch_uid = 1
gpu_sim_cycle = 100
gpu_sim_insn = 10
gpu_tot_sim_cycle = 100
gpgpu_simulation_time = 0 days, 0 hrs, 0 min, 1 sec (1 sec)
Header info loaded for kernel command : /t/kernel-2.traceg
launching kernel name: _Z6secondv uid: 2 cuda_stream_id: 0
Destroy streams for kernel 2: size 0
kernel_name = _Z6secondv
kernel_launch_uid = 2
gpu_sim_cycle = 200
gpu_sim_insn = 20
gpu_tot_sim_cycle = 300
gpgpu_simulation_time = 0 days, 0 hrs, 0 min, 1 sec (1 sec)
GPGPU-Sim: *** exit detected ***
"""


GOOD_LAUNCHES = [(1, 1, "_Z5firstv"), (2, 2, "_Z6secondv")]


def spec_of(log: bytes) -> tuple[str | None, list[tuple[int, int, str]]]:
    """(ctx, [(uid, kernel id, name)]) of a log: trace-driven by its headers, else PTX order."""
    headers = HEADER.findall(log)
    if headers:
        names = {int(uid): name.decode().strip() for name, uid in LAUNCH.findall(log)}
        ctxs = {ctx.decode() for _, ctx in headers if ctx}
        launches = [(uid, int(kid), names[uid]) for uid, (kid, _) in enumerate(headers, 1) if uid in names]
        return (ctxs.pop() if ctxs else None), launches
    return None, [(uid, uid, name.decode()) for uid, name in enumerate(PUSH.findall(log), 1)]


def trace_files(ctx: str | None, launches: list[tuple[int, int, str]]) -> dict[str, str]:
    """A trace holding exactly the log's launches, with a measured time for each."""
    ctx = ctx or "0x1"
    rows = "".join(
        stats_row(kernel_id, ctx=ctx, name=name)
        for _, kernel_id, name in sorted(launches, key=lambda x: x[1])
    )
    return {
        f"traces/stats_ctx_{ctx}": STATS_HEADER + rows,
        "timing.csv": timing_csv({kernel_id: 1000 + 7 * kernel_id for _, kernel_id, _ in launches}, ctx=ctx),
    }


OK = {"status": "ok", "trace_gpu_arch": "sm_90"}


def upload_run(s3, run_id: str, kernels: int = 2, metadata: dict = OK) -> None:
    put(s3, f"{run_id}/traces/stats_ctx_0x1", stats_file(kernels))
    put(s3, f"{run_id}/metadata.json", orjson.dumps(metadata))


def register_ready(run_ids: list[str]) -> None:
    """Ready traces holding their runs' listings as a pass registers and parses them (checked:
    a full pass then finds nothing to change), without parsing a thousand runs."""
    listed = bucket.list_runs_objects(set(run_ids))
    Trace.objects.bulk_create(
        Trace(
            id=run_id,
            key=key,
            state=TraceState.READY,
            files=inventory(listed[run_id]),
            bytes=sum(obj.size for obj in listed[run_id]),
            parsed_fingerprint=fingerprint(listed[run_id]),
            kernel_count=2,
        )
        for run_id, key in zip(run_ids, next_trace_keys(len(run_ids)), strict=True)
    )


UINT32 = 2**32


IDENTIFIER_CHARS = string.ascii_letters + string.digits + "_"


IDENT = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(string.ascii_letters + "_"),
    st.text(IDENTIFIER_CHARS, max_size=14),
)


MANGLED = st.one_of(
    st.builds(lambda n, rest: f"_Z{n}{rest}", st.integers(1, 200), IDENT),
    IDENT,  # extern "C" kernels: compute_sm80_group_gemm_args
    # CUTLASS-sized: real names run past 1,500 characters.
    st.text(IDENTIFIER_CHARS, min_size=1, max_size=2000).map(lambda s: "_ZN" + s),
)


SCOPE = st.lists(st.one_of(IDENT, st.just("(anonymous namespace)")), min_size=1, max_size=4).map("::".join)


TEMPLATE_VALUE = st.one_of(
    st.integers(-(2**31), UINT32).map(str),
    st.sampled_from(["true", "false", "(cudaDataType_t)3", "128u", "4l"]),
)


BUILTIN = st.sampled_from(["float", "int", "unsigned int", "long", "bool", "double", "c10::Half", "__half"])


TYPE = st.recursive(
    st.one_of(BUILTIN, SCOPE),
    lambda inner: st.builds(
        lambda scope, args, close: f"{scope}<{', '.join(args)}{close}",
        SCOPE,
        st.lists(st.one_of(inner, TEMPLATE_VALUE), min_size=1, max_size=4),
        st.sampled_from([">", " >"]),
    ),
    max_leaves=6,
)


PARAMETER = st.builds(
    lambda t, ref: t + ref, TYPE, st.sampled_from(["", "*", " const*", "&", " const&", "**"])
)


LAMBDA = st.integers(1, 9).map(lambda n: f"::{{lambda(int)#{n}}}")


DEMANGLED = st.builds(
    lambda ret, scope, targs, params, suffix: f"{ret}{scope}{targs}({', '.join(params)}){suffix}",
    st.sampled_from(["", "void "]),
    SCOPE,
    st.one_of(
        st.just(""),
        st.lists(st.one_of(TYPE, TEMPLATE_VALUE), min_size=1, max_size=10).map(
            lambda args: f"<{', '.join(args)}>"
        ),
    ),
    st.lists(PARAMETER, max_size=6),
    st.one_of(st.just(""), st.just(" const"), LAMBDA),
)


NAME = st.one_of(MANGLED, DEMANGLED)


TOTAL = st.one_of(st.integers(0, 10**6), st.integers(0, UINT32 - 1), st.sampled_from([2**31, UINT32 - 1]))


# --- Values -----------------------------------------------------------------------------------------
# Unsigned 32-bit: `%d` prints 2^31 and above as negative numbers, which the parser reads back.
U32 = st.one_of(
    st.integers(1, 1024),
    st.integers(1, UINT32 - 1),
    st.sampled_from([2**31 - 1, 2**31, 2**31 + 1, UINT32 - 1]),
)


DIM3 = st.tuples(U32, U32, U32)


LATENCY = st.one_of(st.just(-1.0), st.floats(0, 1e9, allow_nan=False, allow_infinity=False))


@dataclass(frozen=True)
class StatsFile:
    data: bytes
    expected: list[KernelRow]
    extra_columns: int  # what the caller passes (the first context's header width, for a headerless file)
    variant: str
    header: bool


def trace_file_namer(draw, variant: str):
    if variant == "distributed":
        gpu = draw(st.integers(0, 15))
        return (lambda kernel_id: f"kernel-{kernel_id}_{gpu}.trace"), gpu
    ctx = draw(CTX)
    form = draw(
        st.sampled_from(["{n}.trace", "{n}.trace.xz", "{n}-ctx_{ctx}.trace.xz", "{n}-ctx_{ctx}.trace"])
    )
    return (lambda kernel_id: "kernel-" + form.format(n=kernel_id, ctx=ctx)), None


# Digit strings past what any reader takes in one go: 20 digits (past 64 bits), Python's own limit
# for int() (4,300 digits) and beyond. The tracer prints none of them.
LONG_DIGITS = st.one_of(st.sampled_from([19, 20, 21, 4300, 4301, 5000]), st.integers(19, 6000)).map(
    lambda length: b"9" * length
)


def stored(
    files: list[bytes] | dict[str, bytes],
    extra_columns: int,
    *,
    fast: bool,
    steps: list | None = None,
    timing_csv: str | None = None,
) -> tuple[list | str, int]:
    """The launches stored for `files` (one context each, by ctx, or 0x3e8, 0x3e9... in turn), or
    the error that refused them; and how many of them LaunchText wrote. Steps and durations as
    ingest.parse adds them."""
    bodies: dict = {}
    if not isinstance(files, dict):
        files = {f"0x{1000 + i:x}": data for i, data in enumerate(files)}
    sources = [source(ctx, data, bodies) for ctx, data in files.items()]
    step_index = StepIndex(steps) if steps else None
    durations = None if timing_csv is None else read_timing(timing_csv.encode().splitlines(True))
    taken = 0

    def rows(writer):
        nonlocal taken

        def launch_text(source, traced):
            duration_of = None if durations is None else durations.duration_of
            step_of = None if step_index is None else step_index.step_of
            return LaunchText(source.ctx, writer, traced, step_of, duration_of)

        launches = parse.kernel_rows(
            "run", sources, extra_columns, None, ReadAhead(bodies), launch_text if fast else None
        )
        for row in parse.with_steps_and_durations(launches, step_index, durations, services.RunExtras()):
            if type(row) is kernel_store.LaunchBlock:
                taken += row.launches
            yield row

    try:
        with transaction.atomic():
            trace = Trace.objects.create(id="run")
            try:
                count = kernel_store.kernels_replace(trace.id, rows, trace_key=trace.key)
            except parse.TraceInputError as problem:
                result = f"TraceInputError: {problem}"
            else:
                result = list(
                    Kernel.objects.filter(trace=trace.key).order_by("pk").values_list(*LAUNCH_COLUMNS)
                )
                assert count == len(result)
            raise Rollback
    except Rollback:
        pass
    return result, taken


def trace_of(launches: list[tuple[int, str]], durations: dict[int, int] | None = None) -> dict:
    """A one-context run whose launches are (kernel id, name), with measured times."""
    files = {
        f"traces/stats_ctx_{VECADD_CTX}": STATS_HEADER + "".join(stats_row(k, name=n) for k, n in launches)
    }
    if durations:
        files["timing.csv"] = timing_csv(durations)
    return files


def headers_of(log: bytes) -> list[int]:
    """The kernel id each trace header names, in load order: uid k is the k-th."""
    return [int(m[1]) for m in re.finditer(rb"Header info loaded for kernel command : .*?kernel-(\d+)", log)]


def launches_of(log: bytes) -> dict[int, str]:
    return {int(m[2]): m[1].decode() for m in re.finditer(rb"launching kernel name: (\S+) uid: (\d+)", log)}


HEADER = re.compile(
    rb"^Header info loaded for kernel command : .*?kernel-(\d+)(?:-ctx_(0x[0-9a-f]+))?\.traceg", re.M
)


LAUNCH = re.compile(rb"^launching kernel name: (.*) uid: (\d+)", re.M)


PUSH = re.compile(rb"^GPGPU-Sim PTX: pushing kernel '([^']*)'", re.M)


def stats_file(count: int, ctx: str = "0x1", header: bool = True) -> str:
    rows = "".join(stats_row(n, ctx, name="_Z1kv", insts=n) for n in range(1, count + 1))
    return (STATS_HEADER if header else "") + rows


def put(s3, key: str, body) -> None:
    s3.put_object(Bucket=TEST_BUCKET, Key=PREFIX + key, Body=body.encode() if isinstance(body, str) else body)


CTX = st.integers(2**20, 2**48).map(hex)


def tracer_launch_half(trace_file, name, grid, block, *, device_id=None, stream_id=None) -> str:
    gx, gy, gz = grid
    bx, by, bz = block
    numbers = (gx, gy, gz, gx * gy * gz, bx, by, bz, bx * by * bz)
    half = LAUNCH_FORMAT % (trace_file, name, *(c_int(n) for n in numbers))
    if device_id is None:
        return half
    return DEVICE_FORMAT % (c_int(device_id), c_int(stream_id)) + half


def tracer_totals(total_insts: int, total_reported_insts: int, *latency: str) -> str:
    return (
        EXIT_FORMAT % (c_int(total_insts), c_int(total_reported_insts))
        + "".join(f",{v}" for v in latency)
        + "\n"
    )


class Rollback(Exception):
    pass


def source(ctx: str, data: bytes, bodies: dict) -> parse.StatsSource:
    obj = S3Object(key=f"run/traces/stats_ctx_{ctx}", size=len(data), etag=f'"{ctx}"')
    bodies[(obj.key, obj.etag)] = data
    return parse.StatsSource(stats=obj, kernelslists=(), ctx=ctx)


LAUNCH_FORMAT = "%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, "  # at launch: no newline


EXIT_FORMAT = "%d,%d"  # at exit; a fork appends ",%.6f" (latency), then "\n"


DEVICE_FORMAT = "%d, %d, "  # the device-id fork: device and stream before the launch half


def c_int(value: int) -> int:
    """The int C's `%d` receives for an unsigned 32-bit value (2^31 and above print negative)."""
    return ctypes.c_int32(value).value


# What a stored launch is compared on (`stored`).
LAUNCH_COLUMNS = (
    "ctx",
    "device",
    "kernel_id",
    "name",
    "trace_file",
    *kernel_store.KERNEL_COLUMNS[4:15],
    "stream",
    "step",
    "duration_ns",
)
