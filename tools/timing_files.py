"""What the profiling harness measures beside the tracer: `timing.csv` (the harness's own
format, or Nsight Systems' `cuda_gpu_trace` export) and `timeline.json`, the steps
(docs/formats.md#nsight-exports).
"""

import json
import math
import random
from dataclasses import dataclass

from tools.kernels import ARCH_SASS, K_ARGMAX, Platform, kernel_kind, kernel_resources, platform_for
from tools.workload import Launch, RunSpec, step_number

# One launch as the harness's clock saw it: (step, ctx, kernel id, start ns, end ns, captured).
TimingRow = tuple[int, str | None, int, int, int, bool]

# `nsys stats --report cuda_gpu_trace --format csv`: the columns in order, as Nsight Systems
# 2024 and later print them (the report script's `query_stub`, which also added `GreenCtx` and
# the `:mangled` option; the unit suffixes are what `nsys stats` appends to `:ts_ns`, `:dur_ns`,
# `:mem_B` and `:thru_B` columns). Releases before GreenCtx print the same list without it, and
# `Throughput (MBps)`.
NSYS_GPU_TRACE_COLUMNS = (
    "Start (ns)",
    "Duration (ns)",
    "CorrId",
    "GrdX",
    "GrdY",
    "GrdZ",
    "BlkX",
    "BlkY",
    "BlkZ",
    "Reg/Trd",
    "StcSMem (MB)",
    "DymSMem (MB)",
    "Bytes (MB)",
    "Throughput (MB/s)",
    "SrcMemKd",
    "DstMemKd",
    "Device",
    "Ctx",
    "GreenCtx",
    "Strm",
    "Name",
)
NSYS_STREAM = 7  # the stream vLLM's model runner works on; graph replays run there too


@dataclass(frozen=True)
class MemoryOp:
    """A memcpy or memset between the kernels: nsys lists them, the tracer does not."""

    ctx: str | None
    name: str  # "[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Host]", "[CUDA memset]"
    start: int
    end: int
    bytes: int
    src_kind: str  # memcpy source kind, or the memset's memory kind
    dst_kind: str  # "" for a memset


# The synthetic clock's constants: warp instructions an H100 retires per nanosecond in these
# kernels (well below its peak of ~900: they are small and memory-bound), and the spread of one
# kernel's time around the model (a log-normal factor, 2%: run-to-run jitter).
H100_WARP_INSTS_PER_NS = 40
DURATION_NOISE = 0.02


def kernel_duration(launch: Launch, platform: Platform) -> int:
    """Nanoseconds on the GPU, SYNTHETIC: no GPU ran these kernels. A real GPU's time grows with
    a kernel's work, and so does this one:

        (platform.launch_ns + total_insts / H100_WARP_INSTS_PER_NS * platform.slowdown[kind])
        * exp(gauss(0, DURATION_NOISE))

    `total_insts` is the launch's warp instructions (for a traced launch exactly the lines of its
    instruction trace: blocks x warps per block x its warp program), `kind` is gemm, attention or
    memory (`kernel_kind`), and the noise is drawn from `Random("<ctx>:<kernel id>:<name>")`, so
    the same launch always takes the same time. Measured times therefore correlate with the
    kernels' traced work, and a simulator's cycles can be correlated with them (docs/operating.md).
    """
    work_ns = launch.total_insts / H100_WARP_INSTS_PER_NS * platform.slowdown[kernel_kind(launch.name)]
    jitter = random.Random(f"{launch.ctx}:{launch.kernel_id}:{launch.name}").gauss(0, DURATION_NOISE)
    return max(1, round((platform.launch_ns + work_ns) * math.exp(jitter)))


def step_host_copies(launch: Launch) -> list[tuple[str, int, str, str]]:
    """What vLLM's model runner copies before a step: (name, bytes, source, destination).

    Input ids (int32), positions and slot mapping (int64), query start offsets and sequence
    lengths (int32) and the block table, from pinned buffers; then a memset of the padding.
    """
    htod, pinned = "[CUDA memcpy Host-to-Device]", "Pinned"
    return [
        (htod, launch.tokens * 4, pinned, "Device"),
        (htod, launch.tokens * 8, pinned, "Device"),
        (htod, (launch.batch + 1) * 4, pinned, "Device"),
        (htod, launch.batch * 4, pinned, "Device"),
        (htod, launch.tokens * 8, pinned, "Device"),
        (htod, launch.batch * 128 * 4, pinned, "Device"),
        ("[CUDA memset]", 512, "Device", ""),
    ]


def cascade_timing_csv(rows: list[TimingRow]) -> bytes:
    lines = ["ctx,kernel_id,start_ns,end_ns,duration_ns\n"]
    lines += [f"{ctx or ''},{kid},{start},{end},{end - start}\n" for _, ctx, kid, start, end, _ in rows]
    return "".join(lines).encode()


def nsys_timing_csv(
    spec: RunSpec, kernels: list[tuple[Launch, int, int]], memory: list[MemoryOp], rng: random.Random
) -> bytes:
    """timing.csv as `nsys stats --report cuda_gpu_trace:mangled --format csv` writes it.

    One row per GPU operation, sorted by start: kernels (with grid, block, registers and shared
    memory), memcpys and memsets (no grid; bytes, throughput and memory kinds). Every API call
    takes the next correlation id; a graph replay is one call (`cuGraphLaunch`), so all kernels
    of one replay carry the same CorrId. `Ctx` is nsys's context id (1, 2, ... here, one per
    process), not the tracer's pointer.
    """
    sass = ARCH_SASS.get(spec.trace_gpu_arch, 90)
    device = f"{spec.source_gpu or 'NVIDIA GPU'} (0)"
    contexts: dict[str | None, int] = {}
    correlation: dict[str | None, int] = {}
    replay: dict[str | None, tuple[int, int]] = {}  # ctx -> (step, CorrId) of the current replay

    def mb(value: int) -> str:
        return f"{value / 1e6:.3f}"

    def next_correlation(ctx: str | None) -> int:
        # Other API calls (stream queries, event records, allocator calls) take ids in between.
        correlation[ctx] = correlation.get(ctx, rng.randrange(300, 900)) + rng.randrange(1, 5)
        return correlation[ctx]

    operations: list[tuple[int, int, Launch | MemoryOp, int]] = [
        (start, index, launch, end) for index, (launch, start, end) in enumerate(kernels)
    ]
    operations += [(op.start, len(kernels) + index, op, op.end) for index, op in enumerate(memory)]
    operations.sort(key=lambda operation: operation[:2])
    lines = [",".join(NSYS_GPU_TRACE_COLUMNS) + "\n"]
    for start, _, operation, end in operations:
        ctx_id = str(contexts.setdefault(operation.ctx, len(contexts) + 1))
        if isinstance(operation, MemoryOp):
            corr = next_correlation(operation.ctx)
            duration = end - start
            fields = [
                str(start),
                str(duration),
                str(corr),
                *[""] * 9,
                mb(operation.bytes),
                # The report's own arithmetic: bytes * (1000000000 / duration), in integers.
                f"{operation.bytes * (1_000_000_000 // duration) / 1e6:.3f}",
                operation.src_kind,
                operation.dst_kind,
                device,
                ctx_id,
                "",
                str(NSYS_STREAM),
                operation.name,
            ]
        else:
            if operation.captured:
                step, corr = replay.get(operation.ctx, (None, 0))
                if step != operation.step:
                    corr = next_correlation(operation.ctx)
                    replay[operation.ctx] = (operation.step, corr)
            else:
                corr = next_correlation(operation.ctx)
            regs, static, dynamic = kernel_resources(operation.name, sass)
            fields = [
                str(start),
                str(end - start),
                str(corr),
                *(str(n) for n in operation.grid),
                *(str(n) for n in operation.block),
                str(regs),
                mb(static),
                mb(dynamic),
                *[""] * 4,
                device,
                ctx_id,
                "",
                str(NSYS_STREAM),
                operation.name,
            ]
        lines.append(",".join(fields) + "\n")
    return "".join(lines).encode()


def timeline_json(spec: RunSpec, rows: list[TimingRow]) -> bytes:
    """Per step: which launches belong to it, when it ran (from the harness's clock), and how
    many of its launches were captured into a CUDA graph (the stats file has no totals for those)."""
    steps: dict[int, dict] = {}
    for step, ctx, kernel_id, start, end, captured in rows:
        entry = steps.setdefault(
            step, {"step": step, "ctx": ctx, "first_kernel_id": kernel_id, "start_ns": start}
        )
        entry.update(
            last_kernel_id=kernel_id,
            end_ns=end,
            kernels=entry.get("kernels", 0) + 1,
            captured_kernels=entry.get("captured_kernels", 0) + captured,
        )
    labels = {step_number(layer, i): layer for i, layer in enumerate(spec.layers)}
    for entry in steps.values():
        entry["name"] = labels.get(entry["step"], f"step {entry['step']}")
        entry["phase"] = "prefill" if "prefill" in entry["name"] else "decode"
        entry["cuda_graph"] = entry["captured_kernels"] > 0
    return (
        json.dumps({"model": spec.model, "clock": "ns", "steps": list(steps.values())}, indent=2) + "\n"
    ).encode()


class HarnessClock:
    """The profiling harness's clock over a run: each launch's start and end, and the copies
    vLLM's model runner makes between steps, in the order the launches come.

    It has its own generators, so the stats and traces are the same bytes whichever timing
    format is asked for.
    """

    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.platform = platform_for(spec.trace_gpu_arch)
        self.rng = random.Random(f"{spec.seed}:files")
        self.timing_rng = random.Random(f"{spec.seed}:timing")
        self.now = 1_000_000 + self.rng.randrange(1_000_000)
        self.rows: list[TimingRow] = []
        self.kernel_times: list[tuple[Launch, int, int]] = []
        self.memory_ops: list[MemoryOp] = []
        self.current_step: tuple[str | None, int] | None = None
        self.last_launch: Launch | None = None

    def launch(self, launch: Launch) -> None:
        """One launch: the copies before its step if it starts one, then the kernel on the GPU."""
        if (launch.ctx, launch.step) != self.current_step:
            if self.last_launch is not None:
                self._sampled_tokens_back(self.last_launch)
            self.current_step = (launch.ctx, launch.step)
            for name, size, src, dst in step_host_copies(launch):
                self._copy(launch.ctx, name, size, src, dst)
        duration = kernel_duration(launch, self.platform)
        # A graph replay launches its kernels back to back, without the CPU's launch overhead.
        self.now += self.rng.randrange(600, 1800) if launch.captured else self.rng.randrange(2000, 9000)
        start, end = self.now, self.now + duration
        self.rows.append((launch.step, launch.ctx, launch.kernel_id, start, end, launch.captured))
        self.kernel_times.append((launch, start, end))
        self.now = end
        self.last_launch = launch

    def finish(self) -> None:
        """The run's end: a run that was not killed sends its last step's tokens back."""
        if self.last_launch is not None and not self.spec.crashed:
            self._sampled_tokens_back(self.last_launch)

    def timing_csv(self) -> bytes:
        if self.spec.timing_format == "nsys":
            return nsys_timing_csv(self.spec, self.kernel_times, self.memory_ops, self.timing_rng)
        return cascade_timing_csv(self.rows)

    def _copy(self, ctx: str | None, name: str, size: int, src: str, dst: str) -> None:
        self.now += self.timing_rng.randrange(300, 1500)
        if name == "[CUDA memset]":
            duration = self.timing_rng.randrange(800, 1300)
        else:  # ~20 GB/s from pinned memory, ~8 GB/s into pageable, plus the DMA's start
            duration = 600 + size // (20 if src == "Pinned" else 8) + self.timing_rng.randrange(0, 400)
        self.memory_ops.append(MemoryOp(ctx, name, self.now, self.now + duration, size, src, dst))
        self.now += duration

    def _sampled_tokens_back(self, launch: Launch) -> None:
        if launch.name == K_ARGMAX:  # the step ran to its end: the tokens go to the host
            self._copy(launch.ctx, "[CUDA memcpy Device-to-Host]", launch.batch * 8, "Device", "Pageable")
