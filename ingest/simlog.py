"""The simulator's stdout (GPGPU-Sim / Accel-Sim): a pure, streaming reader (issue 20).

Lines in (bytes, as `ingest.bucket.iter_lines` gives them), facts out: the build lines, the core
clock, the trace headers in load order, each uid's launch, its stat blocks and its end, and how
the log ended. What the format is, with real examples: ../shared/docs/gpgpu-sim-output.md. The
rules that shape this reader:

- uid k is the k-th `Header info loaded for kernel command : .../kernel-N[-ctx_0x...].traceg`
  line, not N (the tracer's kernel id); in PTX mode (no headers) uids are launch order.
- A stat block lists the uids that *started* since the previous block, and its `gpu_sim_cycle`
  is the time since that block. So a kernel's cycles are its block's `gpu_sim_cycle` only when
  the block lists exactly that uid, once, and no other block lists it; a uid listed with
  others, twice, or named by `Destroy streams` before a block that lists none is `overlapped`
  (no cycles of its own). The run's total is the last complete block's `gpu_tot_sim_cycle`.
- A block counts once its `gpgpu_simulation_time` footer is read: a killed log's last block,
  cut before it, does not.
- `exit detected` is printed after a cycle-limit break too: `stopped` is "max_cycles" when the
  break line was read, "killed" when the log just ends (no `exit detected`, or cut mid-line, as
  a killed job's block-buffered stdout is at a 4 KiB boundary), None for a normal end.

Memory grows with the number of uids only: a block is reduced to a few numbers as it is read.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ingest import bucket
from ingest.bucket import LineTooLong
from traces.text import unstorable_character

STOPPED_MAX_CYCLES = "max_cycles"
STOPPED_KILLED = "killed"

# Counts the simulator prints fit in 64 bits; more digits than this are not a count but junk
# (and Python's int() of thousands of digits is slow, then refused).
MAX_DIGITS = 20
MAX_UIDS_PER_BLOCK = 100_000
# Results are kept per uid; a log naming more uids than any run launches is hostile, not a run.
MAX_UIDS = 2_000_000

_INT = rb"(\d{1,20})"  # MAX_DIGITS
ACCELSIM_BUILD = re.compile(rb"Accel-Sim \[build ([^\]]*)\]")
GPGPUSIM_VERSION = re.compile(rb"\*\*\* GPGPU-Sim Simulator Version (\S+)\s+\[build ([^\]]*)\]")
CLOCK_DOMAINS = re.compile(rb"-gpgpu_clock_domains\s+(\d{1,9}(?:\.\d{1,9})?)(?::|\s|$)")
HEADER = re.compile(
    rb"Header info loaded for kernel command : (.*?)\s*$",
)
TRACE_FILE = re.compile(
    rf"(?:.*/)?kernel-(\d{{1,{MAX_DIGITS}}})(?:-ctx_(0x[0-9a-fA-F]{{1,16}}))?\.traceg(?:\.xz)?"
)
DIM = re.compile(rb"-(grid|block) dim = (\(\d{1,10},\d{1,10},\d{1,10}\))\s*$")
TRACE_LAUNCH = re.compile(
    rb"launching kernel name: (.*) uid: " + _INT + rb"(?: cuda_stream_id: " + _INT + rb")?\s*$"
)
PTX_LAUNCH = re.compile(
    rb"GPGPU-Sim PTX: pushing kernel '(.*)' to stream " + _INT + rb", "
    rb"gridDim= (\(\d{1,10},\d{1,10},\d{1,10}\)) blockDim = (\(\d{1,10},\d{1,10},\d{1,10}\))\s*$"
)
DESTROY = re.compile(rb"Destroy streams for kernel " + _INT + rb": ")
BLOCK_COUNTS = (b"gpu_sim_cycle =", b"gpu_sim_insn =", b"gpu_tot_sim_cycle =")
BLOCK_NUMBER = re.compile(rb"(gpu_sim_cycle|gpu_sim_insn|gpu_tot_sim_cycle) = " + _INT + rb"\s*$")

LINE_STARTS = (
    b"Accel-Sim",
    b"  ",
    b"\t",
    b"-gpgpu_clock_domains",
    b"Header info",
    b"-grid dim",
    b"-block dim",
    b"launching kernel",
    b"GPGPU-Sim",
    b"Destroy streams",
    b"kernel_name =",
    b"kernel_launch_uid =",
    b"gpu_sim_cycle",
    b"gpu_sim_insn",
    b"gpu_tot_sim_cycle",
    b"gpgpu_simulation_time",
)


class SimLogError(ValueError):
    """A simulator log that cannot be read: the message names the line."""


@dataclass(slots=True)
class SimKernel:
    """One uid as the log tells it. `kernel_id` and `ctx` come from its trace header (kernel-N)."""

    uid: int
    kernel_id: int | None = None
    ctx: str | None = None
    trace_file: str | None = None
    name: str | None = None
    grid: str | None = None
    block: str | None = None
    stream: int | None = None
    blocks: int = 0  # complete stat blocks that list it (a uid listed twice in one counts twice)
    finished: bool = False  # `Destroy streams for kernel U` read (GPGPU-Sim 4.x only)
    sim_cycles: int | None = None
    sim_insn: int | None = None
    overlapped: bool = False
    interrupted: bool = False  # the kernel the cycle limit stopped: left out


@dataclass(slots=True)
class SimLog:
    accelsim_build: str | None = None
    gpgpusim_version: str | None = None
    gpgpusim_build: str | None = None
    core_clock_mhz: float | None = None
    headers: int = 0
    blocks: int = 0  # complete stat blocks
    total_cycles: int | None = None  # the last complete block's gpu_tot_sim_cycle
    exit_detected: bool = False
    stopped: str | None = None
    lines: int = 0
    kernels: dict[int, SimKernel] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.stopped is None

    @property
    def interrupted(self) -> list[int]:
        return [uid for uid, kernel in self.kernels.items() if kernel.interrupted]

    def in_uid_order(self) -> list[SimKernel]:
        return [self.kernels[uid] for uid in sorted(self.kernels)]


@dataclass(slots=True)
class _Block:
    line: int
    uids: list[int] | None = None
    destroyed: int | None = None  # the uid `Destroy streams` named just before the block
    sim_cycle: int | None = None
    sim_insn: int | None = None
    tot_sim_cycle: int | None = None


# A log's lines are short (option dump, counts, kernel names); a longer one is not a log.
MAX_LINE = 1024**2


def read_sim_log_chunks(chunks: Iterable[bytes]) -> SimLog:
    """`read_sim_log` of a log's bytes as they stream in (S3, a decompressor): the reader
    ingestion calls. A line longer than MAX_LINE is a SimLogError naming it."""
    return read_sim_log(bucket.lines_of_chunks(chunks, MAX_LINE))


def read_sim_log(lines: Iterable[bytes]) -> SimLog:
    """Read a simulator's stdout, line by line, into a SimLog; SimLogError names the bad line."""
    log = SimLog()
    number = 0
    # The single-uid blocks' numbers, until the end says whether another block lists the uid too.
    own: dict[int, tuple[int, int | None]] = {}
    block: _Block | None = None
    destroyed: int | None = None
    dims: dict[bytes, str] = {}
    launched_ptx = 0
    broke = False
    stopped_in_block: list[int] = []
    last_block_uids: list[int] = []
    since_block_launches = True  # a launch or header read since the last complete block
    last_line = b"\n"
    try:
        for line in lines:
            number += 1
            last_line = line
            # A line without its newline is the last, cut by a kill: a fragment, not read.
            if log.exit_detected or not line.startswith(LINE_STARTS) or not line.endswith(b"\n"):
                continue
            try:
                if line.startswith(b"kernel_name ="):
                    if block is not None:
                        raise SimLogError(f"a stat block begins before the one at line {block.line} ended")
                    block = _Block(line=number, destroyed=destroyed)
                    destroyed = None
                elif block is not None and line.startswith(b"kernel_launch_uid ="):
                    if block.uids is not None:
                        raise SimLogError("a second kernel_launch_uid in one stat block")
                    block.uids = _uids(line)
                elif block is not None and line.startswith(BLOCK_COUNTS):
                    # Only `name = N` exactly: forks add lines such as `gpu_sim_insn calculated by ...`.
                    match = BLOCK_NUMBER.match(line)
                    if match is None:
                        raise SimLogError(f"not a count: {_text(line)!r}")
                    setattr(block, match[1].decode()[4:], int(match[2]))
                elif line.startswith(b"gpgpu_simulation_time"):
                    if block is not None:
                        _end_block(log, block, own)
                        last_block_uids, block = block.uids, None
                        since_block_launches = False
                elif line.startswith(b"Destroy streams"):
                    match = DESTROY.match(line)
                    if match is None:
                        raise SimLogError(f"not a `Destroy streams for kernel U:` line: {_text(line)!r}")
                    destroyed = int(match[1])
                    _kernel(log, destroyed).finished = True
                elif line.startswith(b"Header info"):
                    _header(log, line, dims)
                    since_block_launches = True
                elif line.startswith((b"-grid dim", b"-block dim")):
                    match = DIM.match(line)
                    if match is not None:
                        dims[match[1]] = match[2].decode()
                elif line.startswith(b"launching kernel"):
                    _trace_launch(log, line)
                    since_block_launches = True
                elif line.startswith(b"GPGPU-Sim"):
                    if line.startswith(b"GPGPU-Sim PTX: pushing kernel"):
                        launched_ptx += 1
                        _ptx_launch(log, line, launched_ptx)
                        since_block_launches = True
                    elif line.startswith(b"GPGPU-Sim: *** exit detected ***"):
                        log.exit_detected = True
                    elif line.startswith(b"GPGPU-Sim: ** break due to reaching the maximum"):
                        # Accel-Sim dev prints a block for the kernel the limit stopped: the
                        # last block, when no launch came between it and the break line.
                        stopped_in_block = [] if since_block_launches else last_block_uids
                        broke = True
                elif line.startswith(b"-gpgpu_clock_domains"):
                    match = CLOCK_DOMAINS.match(line)
                    if match is None:
                        raise SimLogError(f"no core clock in {_text(line)!r}")
                    log.core_clock_mhz = float(match[1])
                elif line.startswith(b"Accel-Sim"):
                    match = ACCELSIM_BUILD.match(line)
                    if match is not None and log.accelsim_build is None:
                        log.accelsim_build = _name(match[1])
                elif log.gpgpusim_version is None and b"GPGPU-Sim Simulator Version" in line:
                    match = GPGPUSIM_VERSION.search(line)
                    if match is not None:
                        log.gpgpusim_version = _name(match[1])
                        log.gpgpusim_build = _name(match[2])
            except SimLogError as error:
                raise SimLogError(f"line {number}: {error}") from None
    except LineTooLong as error:  # from the lines' iterator, before line `number + 1`
        raise SimLogError(f"line {number + 1}: {error}") from None
    log.lines = number
    cut_mid_line = not last_line.endswith(b"\n")
    if cut_mid_line or not log.exit_detected:
        log.stopped = STOPPED_KILLED
    elif broke:
        log.stopped = STOPPED_MAX_CYCLES
        for kernel in log.kernels.values():  # launched, never in a block: the one the limit stopped
            if kernel.uid in stopped_in_block or (kernel.name is not None and kernel.blocks == 0):
                kernel.interrupted = True
    for uid, (cycles, insn) in own.items():
        kernel = log.kernels[uid]
        if not kernel.overlapped and not kernel.interrupted:
            kernel.sim_cycles, kernel.sim_insn = cycles, insn
    return log


def _end_block(log: SimLog, block: _Block, own: dict[int, tuple[int, int | None]]) -> None:
    if block.uids is None:
        raise SimLogError(f"the stat block at line {block.line} has no kernel_launch_uid")
    if block.sim_cycle is None or block.tot_sim_cycle is None:
        raise SimLogError(f"the stat block at line {block.line} has no gpu_sim_cycle or gpu_tot_sim_cycle")
    log.blocks += 1
    log.total_cycles = block.tot_sim_cycle
    for uid in block.uids:
        _kernel(log, uid).blocks += 1
    if len(block.uids) == 1:
        own[block.uids[0]] = (block.sim_cycle, block.sim_insn)
    else:
        for uid in block.uids:
            log.kernels[uid].overlapped = True
        if not block.uids and block.destroyed is not None:
            # An empty block: its cycles are part of the kernel that just finished, and others'.
            log.kernels[block.destroyed].overlapped = True
    for uid in block.uids:
        kernel = log.kernels[uid]
        if kernel.blocks > 1:
            kernel.overlapped = True


def _uids(line: bytes) -> list[int]:
    fields = line.split(b"=", 1)[1].split()
    if len(fields) > MAX_UIDS_PER_BLOCK:
        raise SimLogError(f"more than {MAX_UIDS_PER_BLOCK} uids in one stat block")
    uids = []
    for value in fields:
        if not value.isdigit() or len(value) > MAX_DIGITS or int(value) == 0:
            raise SimLogError(f"not a uid: {_text(value)!r}")
        uids.append(int(value))
    return uids


def _header(log: SimLog, line: bytes, dims: dict[bytes, str]) -> None:
    match = HEADER.match(line)
    if match is None:
        raise SimLogError(f"not a `Header info loaded for kernel command : PATH` line: {_text(line)!r}")
    path = _name(match[1])
    match = TRACE_FILE.fullmatch(path)
    if match is None:
        raise SimLogError(f"not a kernel-N[-ctx_0x...].traceg[.xz] trace file: {path!r}")
    log.headers += 1
    kernel = _kernel(log, log.headers)
    kernel.kernel_id, kernel.ctx, kernel.trace_file = int(match[1]), match[2], path
    # The dims are printed with the header, before it (a window of headers may be loaded before
    # any of their launches).
    kernel.grid, kernel.block = dims.pop(b"grid", None), dims.pop(b"block", None)


def _trace_launch(log: SimLog, line: bytes) -> None:
    match = TRACE_LAUNCH.match(line)
    if match is None:
        raise SimLogError(f"not a `launching kernel name: NAME uid: U` line: {_text(line)!r}")
    uid = int(match[2])
    if log.headers and uid > log.headers:
        raise SimLogError(f"uid {uid} launched, but only {log.headers} trace headers were loaded")
    kernel = _launched(log, uid, _name(match[1]))
    if match[3] is not None:
        kernel.stream = int(match[3])


def _ptx_launch(log: SimLog, line: bytes, uid: int) -> None:
    match = PTX_LAUNCH.match(line)
    if match is None:
        raise SimLogError(f"not a `pushing kernel 'NAME' to stream S, gridDim= ...` line: {_text(line)!r}")
    kernel = _launched(log, uid, _name(match[1]))
    kernel.stream, kernel.grid, kernel.block = int(match[2]), match[3].decode(), match[4].decode()


def _launched(log: SimLog, uid: int, name: str) -> SimKernel:
    kernel = _kernel(log, uid)
    if kernel.name is not None:
        raise SimLogError(f"uid {uid} launched twice")
    kernel.name = name
    return kernel


def _kernel(log: SimLog, uid: int) -> SimKernel:
    kernel = log.kernels.get(uid)
    if kernel is None:
        if len(log.kernels) >= MAX_UIDS:
            raise SimLogError(f"more than {MAX_UIDS} uids")
        kernel = log.kernels[uid] = SimKernel(uid)
    return kernel


def _name(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    problem = unstorable_character(text)
    if problem is not None:
        raise SimLogError(f"{problem} in {text!r}")
    return text


def _text(raw: bytes) -> str:
    return raw[:200].decode("utf-8", "replace").rstrip("\n")
