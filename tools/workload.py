"""The generated workload: what to generate (`RunSpec`), each launch as the tracer records it
(`Launch`, `stats_rows`), and the run's launches in order (`launches`): vLLM serving OPT-125m,
step by step, a decoder forward pass each, decode steps captured into CUDA graphs.

The row's bytes come from `tools.tracer_format`, the one definition of the tracer's stats row
(docs/formats.md#the-tracers-files).
"""

import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tools.kernels import (
    BLOCKS,
    FFN,
    H100,
    HEADS,
    HIDDEN,
    K_ADD,
    K_ARGMAX,
    K_CACHE,
    K_DIV,
    K_EMBED,
    K_EMBED_SMALL,
    K_EXPONENTIAL,
    K_GATHER,
    K_GEMV,
    K_LAYER_NORM,
    K_MASKED_FILL,
    K_POS_OFFSET,
    K_RELU,
    K_SOFTMAX,
    K_SORT,
    K_SPLITK_REDUCE,
    K_TO_FLOAT,
    K_TOPK,
    VOCAB,
    Platform,
    Shape,
    platform_for,
    warp_program_length,
)
from tools.tracer_format import stats_launch_half, stats_totals

OPT_125M_LAYERS = ("step 0 (prefill)", "step 2 (decode)", "step 10 (decode)", "step 26 (decode)")
TIMING_FORMATS = ("cascade", "nsys")
TRACE_LAYOUTS = ("raw", "grouped")


@dataclass(frozen=True)
class RunSpec:
    """What to generate. The defaults are an opt-125m inference run traced on an H100."""

    kernels: int = 700  # = steps_kernel_count(OPT_125M_LAYERS): the four steps, whole
    contexts: int = 1
    format: str = "v5"  # "v5" (stats_ctx_* per context) or "legacy" (stats.csv + kernelslist)
    seed: int = 0
    timeline: bool = True
    timing: bool = True
    # timing.csv as the harness writes it ("cascade": ctx,kernel_id,start_ns,end_ns,duration_ns)
    # or as Nsight Systems exports it ("nsys": `nsys stats --report cuda_gpu_trace:mangled`).
    timing_format: str = "cascade"
    # configs/ with simulator config files of our own making: off by default, since a run should
    # name one of the simulator's own tested configs (`suggested_sim_config`) and the simulator
    # refuses files it does not know (tests of a run's configs/ folder turn it on).
    configs: bool = False
    status: str = "ok"  # metadata.json's "status"; anything but "ok" is a failed profiler run
    error: str | None = None  # the profiler's message for a failed run
    unfinished: bool = False  # stop before metadata.json: an upload still in progress (or abandoned)
    crashed: bool = False  # killed during the last launch: the file ends in its launch half, in ", "
    # Decode steps captured into CUDA graphs (None: the default, on for v5, as vLLM serves decode
    # steps; off for legacy, whose tracers predate graph support). Prefill steps are ordinary launches.
    cuda_graphs: bool | None = None
    max_traced: int = 64  # kernels with an instruction trace (the tracer's kernel window)
    # Only launches of at most this many warps (blocks x warps per block) are traced, so that every
    # generated instruction trace holds every warp of every block and simulates in seconds.
    max_traced_warps: int = 256
    # "raw": the tracer's `.trace[.xz]` files and kernelslist; "grouped": also what Accel-Sim's
    # post-processing makes of them, `.traceg[.xz]` files and `<kernelslist>.g`, in their place.
    trace_files: str = "raw"
    model: str | None = "facebook/opt-125m"
    source_gpu: str | None = "NVIDIA H100 80GB HBM3"
    trace_gpu_arch: str = "sm_90"
    suggested_sim_config: str | None = "SM90_H100"
    layers: tuple[str, ...] = OPT_125M_LAYERS
    sample: bool = False
    extra_metadata: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.timing_format not in TIMING_FORMATS:
            raise ValueError(f"timing_format must be 'cascade' or 'nsys', not {self.timing_format!r}")
        if self.trace_files not in TRACE_LAYOUTS:
            raise ValueError(f"trace_files must be 'raw' or 'grouped', not {self.trace_files!r}")
        if self.format not in ("v5", "legacy"):
            raise ValueError(f"format must be 'v5' or 'legacy', not {self.format!r}")
        if self.kernels < 0 or self.contexts < 1:
            raise ValueError("kernels must be >= 0 and contexts >= 1")
        if self.format == "legacy" and self.contexts != 1:
            raise ValueError("the legacy format has exactly one context")
        if self.format == "legacy" and self.cuda_graphs:
            # Tracers that write stats.csv (before 2025-03-16) hook no CUDA graph API.
            raise ValueError("the legacy format's tracers predate CUDA graph support: no cuda_graphs")

    @property
    def decode_graphs(self) -> bool:
        """Whether decode steps run as CUDA graphs: by default in v5, as LLM serving runs them."""
        return self.cuda_graphs if self.cuda_graphs is not None else self.format == "v5"


@dataclass(frozen=True)
class Launch:
    """One kernel launch as the tracer records it: its launch half, and its totals if it exits.

    `total_insts` is what the kernel executes (the harness's timing uses it); a launch
    `captured` into a CUDA graph never reports it in the stats file. `replayed_insts` is what
    graph replays executed since the previous ordinary launch finished: the tracer's counters are
    global and read only at an ordinary launch's exit, so they land in this launch's totals.
    """

    ctx: str | None
    kernel_id: int
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    total_insts: int
    traced: bool
    step: int
    captured: bool = False
    replayed_insts: int = 0
    batch: int = 1  # sequences in the step, and the tokens it processes (host copies size by them)
    tokens: int = 1

    @property
    def trace_file(self) -> str:
        """The file the tracer writes (and names in the stats and the kernelslist): raw lines."""
        if self.ctx is None:
            return f"kernel-{self.kernel_id}.trace"
        return f"kernel-{self.kernel_id}-ctx_{self.ctx}.trace.xz"

    @property
    def grouped_trace_file(self) -> str:
        """What Accel-Sim's post-processing writes from it: `.trace` -> `.traceg`, `.trace.xz` -> `.traceg.xz`."""
        return grouped_name(self.trace_file)

    @property
    def warps(self) -> int:
        """Every warp of every block: blocks x ceil(threads per block / 32), as the simulator counts them."""
        gx, gy, gz = self.grid
        bx, by, bz = self.block
        return gx * gy * gz * math.ceil(bx * by * bz / 32)

    def stats_row(self, *, with_totals: bool | None = None) -> str:
        """What the tracer writes for this launch; by default totals unless it was captured."""
        if with_totals is None:
            with_totals = not self.captured
        half = stats_launch_half(self.trace_file, self.name, self.grid, self.block)
        counted = self.total_insts + self.replayed_insts
        return half + stats_totals(counted, counted) if with_totals else half


def stats_rows(launches: Iterable[Launch], *, killed: bool = False) -> Iterator[tuple[Launch, str]]:
    """Each launch with the text the tracer appends for it, in launch order.

    A captured launch gets its launch half only, so it runs together with whatever follows;
    with `killed`, the process died during the last launch, which gets its launch half only.
    """
    previous: Launch | None = None
    for launch in launches:
        if previous is not None:
            yield previous, previous.stats_row()
        previous = launch
    if previous is not None:
        yield previous, previous.stats_row(with_totals=False if killed else None)


def _elementwise(name: str, numel: int, per_block: int) -> Shape:
    return name, (max(1, math.ceil(numel / 512)), 1, 1), (128, 1, 1), per_block


def _gemm(platform: Platform, role: str, tokens: int, n: int, k: int, *, prefill: bool) -> list[Shape]:
    if tokens == 1 and role != "logits":
        return [(K_GEMV, (math.ceil(n / 4), 1, 1), (128, 1, 1), 4 * (k // 16) * 9)]
    name, tile_m, tile_n, splits = (platform.prefill_gemms if prefill else platform.decode_gemms)[role]
    large = tile_m >= 64 and tile_n >= 64
    block = (platform.gemm_block if large else 128, 1, 1)
    grid = (math.ceil(n / tile_n), math.ceil(tokens / tile_m), splits)
    per_block = (block[0] // 32) * (k // 64 // splits) * (160 if large else 60)
    shapes = [(name, grid, block, max(per_block, 40))]
    if splits > 1:
        shapes.append(
            (K_SPLITK_REDUCE, (math.ceil(n / 32), math.ceil(tokens / 16), 1), (32, 16, 1), 16 * 3 * splits)
        )
    return shapes


def _block_kernels(platform: Platform, tokens: int, prefill: bool, batch: int) -> list[Shape]:
    """One decoder block of OPT: pre-LN attention and a ReLU MLP."""
    norm = (K_LAYER_NORM, (tokens, 1, 1), (32, 4, 1), 4 * (HIDDEN // 128) * 30)
    if prefill:
        attention = [
            (
                platform.attention_prefill,
                (math.ceil(tokens / batch / 64), HEADS, batch),
                (128, 1, 1),
                4 * 2200,
            )
        ]
    else:
        attention = [
            (platform.attention_decode, (1, HEADS, batch * 4), (128, 1, 1), 4 * 620),
            (platform.attention_combine, (math.ceil(batch * HEADS / 16), 1, 1), (128, 1, 1), 4 * 48),
        ]
    return [
        norm,
        *_gemm(platform, "qkv", tokens, 3 * HIDDEN, HIDDEN, prefill=prefill),
        (K_CACHE, (tokens, 1, 1), (min(HIDDEN, 1024), 1, 1), 24 * 22),
        *attention,
        *_gemm(platform, "out", tokens, HIDDEN, HIDDEN, prefill=prefill),
        _elementwise(K_ADD, tokens * HIDDEN, 4 * 14),
        norm,
        *_gemm(platform, "fc1", tokens, FFN, HIDDEN, prefill=prefill),
        _elementwise(K_RELU, tokens * FFN, 4 * 12),
        *_gemm(platform, "fc2", tokens, HIDDEN, FFN, prefill=prefill),
        _elementwise(K_ADD, tokens * HIDDEN, 4 * 14),
    ]


def _step_kernels(
    prefill: bool, tokens: int, batch: int, platform: Platform = H100
) -> Iterator[tuple[int, Shape, bool]]:
    """One step as (decoder block, or -1 outside the blocks, shape, part of the model's forward).

    The model's forward (embeddings, the decoder blocks, the final norm) is what vLLM captures
    into a CUDA graph; selecting the last tokens' hidden states, the LM head and the sampler run
    eagerly after it, so the sampler's launch always ends the step as an ordinary launch.
    """
    embed = K_EMBED if tokens > 16 else K_EMBED_SMALL
    rows = math.ceil(tokens * HIDDEN / 256)
    yield -1, _elementwise(K_POS_OFFSET, tokens, 4 * 6), True
    yield -1, (embed, (rows, 1, 1), (128, 1, 1), 4 * 11), True
    yield -1, (embed, (rows, 1, 1), (128, 1, 1), 4 * 11), True
    yield -1, _elementwise(K_ADD, tokens * HIDDEN, 4 * 14), True
    for block in range(BLOCKS):
        for shape in _block_kernels(platform, tokens, prefill, batch):
            yield block, shape, True
    yield -1, (K_LAYER_NORM, (tokens, 1, 1), (32, 4, 1), 4 * 180), True
    yield -1, (K_GATHER, (math.ceil(batch * HIDDEN / 512), 1, 1), (128, 1, 1), 4 * 9), False
    for shape in _gemm(platform, "logits", batch, VOCAB, HIDDEN, prefill=prefill):
        yield -1, shape, False
    logits = batch * VOCAB
    yield -1, _elementwise(K_TO_FLOAT, logits, 4 * 10), False
    yield -1, _elementwise(K_DIV, logits, 4 * 12), False
    yield -1, (K_TOPK, (batch, 1, 1), (1024, 1, 1), 32 * 900), False
    yield -1, (K_SORT, (1, batch, 1), (16, 1, 1), 16 * 40), False
    yield -1, _elementwise(K_MASKED_FILL, logits, 4 * 12), False
    yield -1, (K_SOFTMAX, (batch, 1, 1), (1024, 1, 1), 32 * 1500), False
    yield -1, (K_EXPONENTIAL, (min(264, math.ceil(logits / 512)), 1, 1), (256, 1, 1), 8 * 160), False
    yield -1, _elementwise(K_DIV, logits, 4 * 12), False
    yield -1, (K_ARGMAX, (1, batch, 1), (32, 16, 1), 16 * 1800), False


def step_number(layer: str, index: int) -> int:
    """`step 10 (decode)` -> 10; any other label counts by position."""
    parts = layer.split()
    return int(parts[1]) if len(parts) > 1 and parts[0] == "step" and parts[1].isdigit() else index


def context_pointers(rng: random.Random, count: int) -> list[str]:
    """CUDA context pointers as the driver hands them out: 48-bit user-space addresses."""
    return [f"0x{rng.randrange(0x5500_0000_0000, 0x7FFF_0000_0000) & ~0xF:x}" for _ in range(count)]


def run_steps(layers: tuple[str, ...]) -> Iterator[tuple[int, bool, bool]]:
    """(step number, prefill, listed): the steps named in `layers`, then further decode steps."""
    number = -1
    for index, layer in enumerate(layers):
        number = step_number(layer, index)
        yield number, "prefill" in layer, True
    while True:
        number += 1
        yield number, False, False


def context_sizes(spec: RunSpec) -> list[int]:
    """Kernels per context: an even split, each cut moved to the nearest step start if it can be.

    A context is a process here, so a step should not straddle two of them.
    """
    n, c = spec.kernels, spec.contexts
    platform = platform_for(spec.trace_gpu_arch)
    starts, position = [], 0
    for _, prefill, _ in run_steps(spec.layers):
        if position >= n:
            break
        starts.append(position)
        position += sum(1 for _ in _step_kernels(prefill, 2 if not prefill else 128, 2, platform))
    cuts, previous = [], 0
    for k in range(1, c):
        target = round(k * n / c)
        choices = [s for s in starts if previous < s < n and s <= n - (c - k)]
        cut = (
            min(choices, key=lambda s: abs(s - target))
            if len(choices) >= c - k
            else max(target, previous + 1)
        )
        cuts.append(cut)
        previous = cut
    bounds = [0, *cuts, n]
    return [bounds[i + 1] - bounds[i] for i in range(c)]


def launches(spec: RunSpec) -> Iterator[Launch]:
    """Every launch of the run in launch order, kernel ids restarting at 1 in each context.

    Each step is a whole forward pass: the steps listed in `layers` first, then as many decode
    steps as `kernels` needs (the last one cut short). With CUDA graphs, a decode step's model
    forward is `captured`, then replayed: what the replay executes is counted into the totals of
    the step's first eager launch. The first decoder block and the eager tail (the LM head and the
    sampler) of each listed step are traced, up to `max_traced` kernels, as the tracer's kernel
    window would do; nothing runs while a stream captures, so in a graph step the window covers
    the eager tail only. Of those, only launches of at most `max_traced_warps` warps are traced:
    an instruction trace holds every warp of every block, and must simulate in seconds.
    """
    rng = random.Random(spec.seed)
    platform = platform_for(spec.trace_gpu_arch)
    ctxs = context_pointers(rng, spec.contexts) if spec.format == "v5" else [None]
    per_ctx = context_sizes(spec)
    batch = rng.choice((4, 8, 16))
    prompt = rng.choice((96, 128, 160, 192))
    traced = emitted = 0
    ctx_index = kernel_id = 0
    replayed = 0  # instructions of the captured forward, counted when the graph replays
    for step, prefill, listed in run_steps(spec.layers):
        tokens = batch * prompt if prefill else batch
        graph_step = spec.decode_graphs and not prefill
        for block, (name, grid, block_dim, per_block), forward in _step_kernels(
            prefill, tokens, batch, platform
        ):
            if emitted == spec.kernels:
                return
            while kernel_id == per_ctx[ctx_index]:
                ctx_index, kernel_id = ctx_index + 1, 0
            kernel_id += 1
            emitted += 1
            captured = graph_step and forward
            window = not forward if graph_step else (block == 0 or not forward)
            blocks = grid[0] * grid[1] * grid[2]
            warps = blocks * math.ceil(block_dim[0] * block_dim[1] * block_dim[2] / 32)
            is_traced = listed and window and traced < spec.max_traced and warps <= spec.max_traced_warps
            traced += is_traced
            insts = max(1, int(blocks * per_block * rng.uniform(0.93, 1.07)))
            if is_traced:  # what its instruction trace holds, warp instruction for warp instruction
                insts = warps * warp_program_length(name)
            counted_before = 0 if captured else replayed
            replayed = replayed + insts if captured else 0
            yield Launch(
                ctx=ctxs[ctx_index],
                kernel_id=kernel_id,
                name=name,
                grid=grid,
                block=block_dim,
                total_insts=insts % 2**32,
                traced=is_traced,
                step=step,
                captured=captured,
                replayed_insts=counted_before,
                batch=batch,
                tokens=tokens,
            )
        if spec.kernels == 0:
            return


def steps_kernel_count(layers: tuple[str, ...], arch: str = "sm_90") -> int:
    """How many launches the steps in `layers` make: the size of a run that is exactly them."""
    platform = platform_for(arch)
    return sum(
        sum(1 for _ in _step_kernels(prefill, 8 * 128 if prefill else 8, 8, platform))
        for _, (_, prefill, _) in zip(range(len(layers)), run_steps(layers), strict=False)
    )


def grouped_name(trace_file: str) -> str:
    """The name Accel-Sim's post-processing gives a trace file: `.trace` -> `.traceg`, `.trace.xz` -> `.traceg.xz`."""
    if trace_file.endswith(".trace.xz"):
        return trace_file[: -len(".trace.xz")] + ".traceg.xz"
    return trace_file + "g"
