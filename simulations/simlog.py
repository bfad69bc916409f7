"""The simulator's stdout (GPGPU-Sim / Accel-Sim): a pure, streaming reader. One
module past 500 lines on purpose: the reader is one state machine over the log (`_Reader`), whose
patterns, states and helpers only make sense together, on the hot path of a multi-gigabyte log.

Lines in (bytes, as `ingest.bucket.iter_lines` gives them), facts out: the build lines, the core
clock, the trace headers in load order, each uid's launch, its stat blocks and its end, and how
the log ended. What the format is, with real examples: docs/formats.md#the-simulators-log. The
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
- A block's statistics (after its `gpu_tot_sim_cycle`, up to its `gpgpu_simulation_time`
  footer: the cache statistics, most of a log's bytes) are skipped, but for the lines another
  thread may print there: PTX mode's launches (`GPGPU-Sim PTX: pushing kernel '`, as in bcpark's
  lud, line 21794), the break line and `exit detected`. So `read_sim_log_chunks` skips them
  with a find of the footer and a memchr for `'` and `*` (which statistics never print).
- `exit detected` is printed after a cycle-limit break too: `stopped` is "max_cycles" when the
  break line was read, "killed" when the log just ends (no `exit detected`, or cut mid-line, as
  a killed job's block-buffered stdout is at a 4 KiB boundary), None for a normal end.
- GPGPU-Sim 3.x prints no end marker at all, even for a normal run (its log ends with the
  application's output): a 3.x log is complete (None) when it ends with a newline, no block is
  left open and every launched kernel (at least one) has a complete block; "max_cycles" after
  the break line; "killed" otherwise.

Memory grows with the number of uids only (at most MAX_UIDS): a block is reduced to a few
numbers as it is read, names recurring are one str.
"""

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from traces.storable_text import replace_unstorable, unstorable_character

STOPPED_MAX_CYCLES = "max_cycles"
STOPPED_KILLED = "killed"
STOPPED_DEADLOCK = "deadlock"
# The simulator quit on one of its fatal lines (FATAL) after some kernels finished.
STOPPED_ERROR = "error"
STOPPED = (STOPPED_DEADLOCK, STOPPED_KILLED, STOPPED_MAX_CYCLES, STOPPED_ERROR)

# Counts the simulator prints fit in 64 bits; more digits than this are not a count but junk
# (and Python's int() of thousands of digits is slow, then refused).
MAX_DIGITS = 20
MAX_UIDS_PER_BLOCK = 100_000
# Results are kept per uid; a log naming more uids than any run launches is hostile, not a run.
MAX_UIDS = 80_000  # ~650 bytes each at most: under 100 MB of RSS with the reader's own (measured)
# Ids (uids, kernel ids, streams) are stored as signed 64-bit integers.
MAX_ID = 2**63 - 1
# A block's cycles or instructions past this are not a simulation's (1.15 x 10^12: 19 minutes of
# a 1 GHz GPU, months of simulating): under it, the nanoseconds of every uid at 10 MHz or more
# (ingest.simulation_marker.MIN_CLOCK_MHZ) add up within a signed 64-bit integer.
MAX_COUNT = MAX_ID // (MAX_UIDS * 100)

_INT = rb"(\d{1,20})"  # MAX_DIGITS
# Every pattern here runs in time linear in its line, whatever the line holds: each repeat is
# bounded or possessive (no backtracking into it), and a pattern searched for is a literal (or an
# alternation of literals) before any repeat. A part of a line that a pattern would reach with
# `.*` is found with bytes methods (`rfind` of the text after it, `rstrip`) and only the bounded
# rest is matched. tests/simulations/test_simlog_linear.py checks both against the patterns these
# replace, and counts the bytes the reader's searches scan.
ACCELSIM_BUILD = re.compile(rb"Accel-Sim \[build ([^\]]*+)\]")
VERSION_START = b"*** GPGPU-Sim Simulator Version "
VERSION_REST = re.compile(rb"(\S++)\s++\[build ([^\]]*+)\]")
CLOCK_DOMAINS = re.compile(rb"-gpgpu_clock_domains\s++(\d{1,9}(?:\.\d{1,9})?)(?::|\s|$)")
HEADER_START = b"Header info loaded for kernel command : "
# A grouped trace, or Accel-Sim 2.0's zstd `.tracez` (its layout unknown: accepted by name).
TRACE_FILE_NAME = re.compile(
    rf"kernel-(\d{{1,{MAX_DIGITS}}})(?:-ctx_(0x[0-9a-fA-F]{{1,16}}))?\.trace(?:g(?:\.xz)?|z)"
)
# Matched against a line less its trailing whitespace (the `\s*$` of a line), so fullmatch.
DIM = re.compile(rb"-(grid|block) dim = (\(\d{1,10},\d{1,10},\d{1,10}\))")
LAUNCH_START = b"launching kernel name: "
LAUNCH_UID = b" uid: "
LAUNCH_REST = re.compile(rb" uid: " + _INT + rb"(?: cuda_stream_id: " + _INT + rb")?")
PTX_START = b"GPGPU-Sim PTX: pushing kernel '"
PTX_STREAM = b"' to stream "
PTX_REST = re.compile(
    rb"' to stream " + _INT + rb", "
    rb"gridDim= (\(\d{1,10},\d{1,10},\d{1,10}\)) blockDim = (\(\d{1,10},\d{1,10},\d{1,10}\))"
)
DESTROY = re.compile(rb"Destroy streams for kernel " + _INT + rb": ")
# The lines with which the simulator (or what it runs) says it cannot go on, as the real logs
# print them (docs/formats.md#the-simulators-log, how each failure looks): SASS it
# has no opcode map for, a trace `xz -dc` could not open, a kernel list it could not open (the
# release build's `Unable to open file: <list>`, then exit 1: accel-sim-framework 73f9fac
# gpu-simulator/trace-parser/trace_parser.cc, parse_commandlist_file), a config option it does
# not know, an assertion, a deadlock. Each holds one of FATAL_NEEDLES, which a chunk is searched
# for. An assertion (`Assertion `...' failed` anywhere in the line) is found with `_is_assertion`.
FATAL = re.compile(
    rb"(?:unsupported binary version: |xz: |Unable to open file: |GPGPU-Sim \*\* ERROR"
    rb"|GPGPU-Sim uArch: ERROR|GPGPU-Sim PTX: ERROR)"
)
ASSERTIONS = (b"Assertion `", b"Assertion '")
ASSERTION_FAILED = b"' failed"
FATAL_NEEDLES = (b"unsupported binary version: ", b"xz: ", b"Unable to open file: ", b"ERROR", b"Assertion ")
DEADLOCK = b"GPGPU-Sim uArch: ERROR ** deadlock detected"
MAX_FATAL_TEXT = 500
BLOCK_COUNTS = (b"gpu_sim_cycle =", b"gpu_sim_insn =", b"gpu_tot_sim_cycle =")
BLOCK_NUMBER = re.compile(rb"(gpu_sim_cycle|gpu_sim_insn|gpu_tot_sim_cycle) = " + _INT)

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
    interrupted: bool = False  # did not finish (a cycle limit, a kill, a deadlock): left out
    line: int | None = None  # the log's line that first named it (its header, launch or block)


@dataclass(slots=True)
class SimLog:
    accelsim_build: str | None = None
    gpgpusim_version: str | None = None
    gpgpusim_build: str | None = None
    core_clock_mhz: float | None = None
    headers: int = 0
    blocks: int = 0  # complete stat blocks
    total_cycles: int | None = None  # the last complete block's gpu_tot_sim_cycle
    # The same, without the block of a kernel a cycle limit stopped: the finished kernels' total.
    finished_cycles: int | None = None
    exit_detected: bool = False
    stopped: str | None = None
    # The simulator's first fatal line (FATAL): (its line number, its text), or None.
    fatal: tuple[int, str] | None = None
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

    @property
    def finished(self) -> int:
        """The launched kernels that finished (in a complete stat block, not interrupted)."""
        return sum(
            1 for kernel in self.kernels.values() if kernel.name is not None and not kernel.interrupted
        )


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

# The lines a block's statistics may hold that are read (see the module's docstring): each has
# a `'` or a `*`, which the statistics of real logs never do, so that a memchr for those two
# bytes skips a block's statistics whole.
STATS_LINES = (
    b"GPGPU-Sim PTX: pushing kernel '",
    b"GPGPU-Sim: ** break due to reaching the maximum",
    b"GPGPU-Sim: *** exit detected ***",
)
FOOTER = b"gpgpu_simulation_time"
NEWLINE_FOOTER = b"\n" + FOOTER
# Outside a block's statistics, the lines that do something: any other is a no-op (but the
# version line, looked for apart while it has not been read).
READ_LINES = (
    b"kernel_name =",
    b"kernel_launch_uid =",
    b"gpu_sim_cycle",
    b"gpu_sim_insn",
    b"gpu_tot_sim_cycle",
    FOOTER,
    b"Destroy streams",
    b"Header info",
    b"-grid dim",
    b"-block dim",
    b"launching kernel",
    b"GPGPU-Sim PTX: pushing kernel",
    b"GPGPU-Sim: **",
    b"-gpgpu_clock_domains",
    b"Accel-Sim",
)
VERSION_TEXT = b"GPGPU-Sim Simulator Version"


def _starting(prefixes: tuple[bytes, ...]) -> tuple[re.Pattern, re.Pattern]:
    """Patterns for a line starting with one of `prefixes`: after a newline, and at a position."""
    alternatives = b"|".join(re.escape(prefix) for prefix in prefixes)
    return re.compile(rb"\n(?:" + alternatives + rb")"), re.compile(rb"(?:" + alternatives + rb")")


READ_LINE = _starting(READ_LINES)
# Each such line after a newline, up to its own newline (which may begin the next match).
READ_LINE_IN_A_ROW = re.compile(
    rb"\n(?:" + b"|".join(re.escape(prefix) for prefix in READ_LINES) + rb")[^\n]*+"
).finditer
STATS_LINE = _starting(STATS_LINES)


def _next_line(
    patterns: tuple[re.Pattern, re.Pattern], buffer: bytes, start: int, end: int, finds: "_Finds"
) -> int:
    """Where the first line in buffer[start:end] (start: a line's; end: a line's, or the
    buffer's) matching `patterns` starts, or -1."""
    after_newline, at = patterns
    if start == 0 or buffer[start - 1] != 10:  # 10: b"\n"
        if at.match(buffer, start, end):
            return start
        found = finds.search(after_newline, start)
    else:
        found = finds.search(after_newline, start - 1)
    return found + 1 if 0 <= found and found + 1 < end else -1


class _Finds:
    """The next place of each of a few needles in buffer[:end], each looked for again only once
    the scan has passed it: a scan that asks at every line where the next footer (or `'`, or
    fatal needle) is would otherwise search the rest of the buffer each time, quadratic in a
    chunk of such lines. With it every byte is searched at most once a needle."""

    __slots__ = ("buffer", "end", "found")

    def __init__(self, buffer: bytes, end: int):
        self.buffer, self.end, self.found = buffer, end, {}

    def find(self, needle: bytes, start: int) -> int:
        """buffer.find(needle, start, end), for `start`s that never go back."""
        where = self.found.get(needle)
        if where is None or 0 <= where < start:
            where = self.found[needle] = self.buffer.find(needle, start, self.end)
        return where

    def search(self, pattern: re.Pattern, start: int) -> int:
        """Where pattern.search(buffer, start, end) starts, for `start`s that never go back."""
        where = self.found.get(pattern)
        if where is None or 0 <= where < start:
            match = pattern.search(self.buffer, start, self.end)
            where = self.found[pattern] = -1 if match is None else match.start()
        return where


def _next_footer(buffer: bytes, start: int, end: int, finds: _Finds) -> int:
    """`_next_line` of the footer: bytes.find, faster than a regular expression's search."""
    if (start == 0 or buffer[start - 1] != 10) and buffer.startswith(FOOTER, start, end):
        return start
    found = finds.find(NEWLINE_FOOTER, start - 1 if start else 0)
    return found + 1 if 0 <= found < end else -1


def read_sim_log_chunks(chunks: Iterable[bytes]) -> SimLog:
    """`read_sim_log` of a log's bytes as they stream in (S3, a decompressor): the reader
    ingestion calls. A line longer than MAX_LINE is a SimLogError naming it.

    Fast: the lines that matter are found with C searches over each chunk (a regular expression
    over the lines between blocks, bytes.find and memchr over a block's statistics, most of a
    log), then read one by one as `read_sim_log` reads them; the others are only counted. The
    same results as `read_sim_log` over the same bytes' lines, errors and their line included.
    """
    reader = _Reader()
    pending: list[bytes] = []  # the start of a line that began in earlier chunks
    pending_size = 0
    offset = 0  # of the chunk in the log
    for chunk in chunks:
        if not chunk:
            continue
        start = 0  # where the chunk's first line not yet read starts
        if pending:
            newline = chunk.find(b"\n")
            if newline < 0:
                pending.append(chunk)
                pending_size += len(chunk)
                offset += len(chunk)
                if pending_size > MAX_LINE:
                    raise reader.line_too_long(offset - pending_size)
                continue
            start = newline + 1
            first = b"".join((*pending, chunk[:start]))
            if len(first) - 1 > MAX_LINE:
                raise reader.line_too_long(offset - pending_size)
            reader.scan(first, 0, len(first))
            pending, pending_size = [], 0
        end = chunk.rfind(b"\n", start) + 1  # just after the chunk's last newline
        if end:
            too_long = _first_line_too_long(chunk, start, end)
            reader.scan(chunk, start, end if too_long < 0 else too_long)
            if too_long >= 0:
                raise reader.line_too_long(offset + too_long)
        else:
            end = start
        if end < len(chunk):
            pending.append(chunk[end:])
            pending_size += len(chunk) - end
        offset += len(chunk)
        if pending_size > MAX_LINE:
            raise reader.line_too_long(offset - pending_size)
    if pending:
        reader.number += 1  # the last line, cut: a fragment, not read
    return reader.end(cut_mid_line=bool(pending))


def _first_line_too_long(buffer: bytes, start: int, end: int) -> int:
    """Where the first line of buffer[start:end] (whole lines) longer than MAX_LINE starts, or -1:
    a window of MAX_LINE + 1 bytes without a newline, looked for a window at a time."""
    while end - start > MAX_LINE + 1:
        last = buffer.rfind(b"\n", start, start + MAX_LINE + 1)
        if last < 0:
            return start
        start = last + 1
    return -1


def read_sim_log(lines: Iterable[bytes]) -> SimLog:
    """Read a simulator's stdout, line by line, into a SimLog; SimLogError names the bad line."""
    reader = _Reader()
    last_line = b"\n"
    lines = iter(lines)
    while True:
        try:
            line = next(lines, None)
        except ValueError as error:  # the lines' own (a line too long), before line `number + 1`
            raise SimLogError(f"line {reader.number + 1}: {error}") from None
        if line is None:
            break
        reader.number += 1
        last_line = line
        # A line without its newline is the last, cut by a kill: a fragment, not read.
        if line.endswith(b"\n"):
            reader.read(line)
            reader.check_fatal(line)
    return reader.end(cut_mid_line=not last_line.endswith(b"\n"))


class _Reader:
    """The reading of one log: `read` takes its lines that matter, in order, with `number` the
    line's; `scan` finds them in a buffer of whole lines; `end` gives the SimLog."""

    def __init__(self):
        self.log = SimLog()
        self.number = 0  # lines read (or counted) so far
        # The single-uid blocks' numbers, until the end says whether another block lists the uid too.
        self.own: dict[int, tuple[int, int | None]] = {}
        self.block: _Block | None = None
        self.in_stats = False  # in a block's statistics: after its gpu_tot_sim_cycle, before its footer
        self.destroyed: int | None = None
        self.dims: dict[bytes, str] = {}
        self.launched_ptx = 0
        self.broke = False
        self.stopped_in_block: set[int] = set()
        self.last_block_uids: list[int] = []
        self.since_block_launches = True  # a launch or header read since the last complete block
        self.total_before_last_block: int | None = None

    def check_fatal(self, line: bytes) -> None:
        """Line `self.number` (whole), kept if it is the first fatal line."""
        if self.log.fatal is None and (FATAL.match(line) or _is_assertion(line)):
            text = line.decode("utf-8", "replace").strip()[:MAX_FATAL_TEXT]
            self.log.fatal = (self.number, replace_unstorable(text))

    def scan_fatal(self, buffer: bytes, start: int, end: int, number: int) -> None:
        """`check_fatal` of each line of buffer[start:end] (whole lines, the first one line
        `number + 1`) holding a FATAL_NEEDLE, until one is fatal: C finds, no line split."""
        at = start
        finds = _Finds(buffer, end)
        while self.log.fatal is None and at < end:
            found = [finds.find(needle, at) for needle in FATAL_NEEDLES]
            found = [where for where in found if where >= 0]
            if not found:
                return
            where = min(found)
            line_start = buffer.rfind(b"\n", at, where) + 1 or at
            line_end = buffer.index(b"\n", where) + 1
            number += buffer.count(b"\n", at, line_start) + 1
            saved, self.number = self.number, number
            self.check_fatal(buffer[line_start:line_end])
            self.number = saved
            at = line_end

    def line_too_long(self, at: int) -> SimLogError:
        return SimLogError(
            f"line {self.number + 1}: a line of more than {MAX_LINE} bytes (a simulator log's limit) at byte {at}"
        )

    def scan(self, buffer: bytes, start: int, end: int) -> None:
        """Read the lines of buffer[start:end] (whole lines: `start` a line's, `end` after a
        newline) that matter, counting the others."""
        log = self.log
        number = self.number
        if log.fatal is None:
            self.scan_fatal(buffer, start, end, number)
        finds = _Finds(buffer, end)
        at = start
        while at < end:
            if log.exit_detected:  # nothing more is read
                break
            if self.in_stats:
                footer = _next_footer(buffer, at, end, finds)
                stats_end = end if footer < 0 else footer
                line = -1
                if 0 <= finds.find(b"'", at) < stats_end or 0 <= finds.find(b"*", at) < stats_end:
                    line = _next_line(STATS_LINE, buffer, at, stats_end, finds)
                if line < 0:
                    line = footer
            elif log.gpgpusim_version is not None and at and buffer[at - 1] == 10:  # 10: b"\n"
                # The lines between blocks' statistics, in a row: most of the lines read.
                for match in READ_LINE_IN_A_ROW(buffer, at - 1, end):
                    number += buffer.count(b"\n", at, match.start() + 1) + 1
                    self.number = number
                    at = match.end() + 1  # after the line's newline, left to the next match
                    self.read(buffer[match.start() + 1 : at])
                    if self.in_stats or log.exit_detected:
                        break
                else:
                    break
                continue
            else:
                line = _next_line(READ_LINE, buffer, at, end, finds)
                if log.gpgpusim_version is None:
                    version_at = finds.find(VERSION_TEXT, at)
                    # Before the next line read, or none: its line's start, looked back for once.
                    if version_at >= 0 and (line < 0 or version_at < line):
                        line = buffer.rfind(b"\n", at, version_at) + 1 or at
            if line < 0:
                break
            line_end = buffer.index(b"\n", line) + 1
            number += buffer.count(b"\n", at, line) + 1
            self.number = number
            self.read(buffer[line:line_end])
            at = line_end
        self.number = number + buffer.count(b"\n", at, end)

    def read(self, line: bytes) -> None:
        """One whole line, line `self.number`: what it says, if anything."""
        log = self.log
        if log.exit_detected or not line.startswith(LINE_STARTS):
            return
        if self.in_stats and not line.startswith((FOOTER, *STATS_LINES)):
            return
        try:
            self._read(log, line)
        except SimLogError as error:
            raise SimLogError(f"line {self.number}: {error}") from None

    def _read(self, log: SimLog, line: bytes) -> None:
        block = self.block
        if line.startswith(b"kernel_name ="):
            if block is not None:
                raise SimLogError(f"a stat block begins before the one at line {block.line} ended")
            self.block = _Block(line=self.number, destroyed=self.destroyed)
            self.destroyed = None
        elif block is not None and line.startswith(b"kernel_launch_uid ="):
            if block.uids is not None:
                raise SimLogError("a second kernel_launch_uid in one stat block")
            block.uids = _uids(line)
        elif block is not None and line.startswith(BLOCK_COUNTS):
            # Only `name = N` exactly: forks add lines such as `gpu_sim_insn calculated by ...`.
            match = BLOCK_NUMBER.fullmatch(line.rstrip())
            if match is None:
                raise SimLogError(f"not a count: {_text(line)!r}")
            setattr(block, match[1].decode()[4:], _number(match[2], match[1].decode(), MAX_COUNT))
            if match[1] == b"gpu_tot_sim_cycle":
                self.in_stats = True
        elif line.startswith(FOOTER):
            if block is not None:
                self.total_before_last_block = log.total_cycles
                _end_block(log, block, self.own)
                log.finished_cycles = log.total_cycles
                self.last_block_uids, self.block = block.uids, None
                self.in_stats = self.since_block_launches = False
        elif line.startswith(b"Destroy streams"):
            match = DESTROY.match(line)
            if match is None:
                raise SimLogError(f"not a `Destroy streams for kernel U:` line: {_text(line)!r}")
            self.destroyed = _number(match[1], "uid", MAX_ID)
            kernel = _kernel(log, self.destroyed, self.number)
            if kernel.finished:
                raise SimLogError(f"uid {self.destroyed} finished twice (a second `Destroy streams` for it)")
            kernel.finished = True
        elif line.startswith(b"Header info"):
            _header(log, line, self.dims, self.number)
            self.since_block_launches = True
        elif line.startswith((b"-grid dim", b"-block dim")):
            match = DIM.fullmatch(line.rstrip())
            if match is not None:
                self.dims[match[1]] = _dim(match[2])
        elif line.startswith(b"launching kernel"):
            _trace_launch(log, line, self.number)
            self.since_block_launches = True
        elif line.startswith(b"GPGPU-Sim"):
            if line.startswith(b"GPGPU-Sim PTX: pushing kernel"):
                self.launched_ptx += 1
                _ptx_launch(log, line, self.launched_ptx, self.number)
                self.since_block_launches = True
            elif line.startswith(b"GPGPU-Sim: *** exit detected ***"):
                log.exit_detected = True
            elif line.startswith(b"GPGPU-Sim: ** break due to reaching the maximum"):
                # Accel-Sim dev prints a block for the kernel the limit stopped: the
                # last block, when no launch came between it and the break line.
                self.stopped_in_block = set() if self.since_block_launches else set(self.last_block_uids)
                if not self.since_block_launches:  # that block's cycles are the stopped kernel's
                    log.finished_cycles = self.total_before_last_block
                self.broke = True
        elif line.startswith(b"-gpgpu_clock_domains"):
            match = CLOCK_DOMAINS.match(line)
            if match is None:
                raise SimLogError(f"no core clock in {_text(line)!r}")
            log.core_clock_mhz = float(match[1])
        elif line.startswith(b"Accel-Sim"):
            match = ACCELSIM_BUILD.match(line)
            if match is not None and log.accelsim_build is None:
                log.accelsim_build = _name(match[1])
        elif log.gpgpusim_version is None and VERSION_TEXT in line:
            match = _gpgpusim_version(line)
            if match is not None:
                log.gpgpusim_version = _name(match[1])
                log.gpgpusim_build = _name(match[2])

    def end(self, cut_mid_line: bool) -> SimLog:
        log = self.log
        log.lines = self.number
        if log.fatal is not None and log.fatal[1].encode().startswith(DEADLOCK):
            log.stopped = STOPPED_DEADLOCK
        elif log.fatal is not None and not log.exit_detected:
            log.stopped = STOPPED_ERROR
        elif cut_mid_line:
            log.stopped = STOPPED_KILLED
        elif log.exit_detected or _is_3x(log):
            if self.broke:
                log.stopped = STOPPED_MAX_CYCLES
                for kernel in log.kernels.values():  # launched, never in a block: the one the limit stopped
                    if kernel.uid in self.stopped_in_block or (
                        kernel.name is not None and kernel.blocks == 0
                    ):
                        kernel.interrupted = True
            elif not log.exit_detected and (self.block is not None or not _every_launch_in_a_block(log)):
                log.stopped = STOPPED_KILLED
        else:
            log.stopped = STOPPED_KILLED
        if log.stopped in (STOPPED_KILLED, STOPPED_DEADLOCK, STOPPED_ERROR):
            # Launched, and in no complete block (nor an empty one after its `Destroy streams`):
            # running when the log ended. Left out, as the kernel a cycle limit stops.
            for kernel in log.kernels.values():
                if kernel.name is not None and kernel.blocks == 0 and not kernel.overlapped:
                    kernel.interrupted = True
        for uid, (cycles, insn) in self.own.items():
            kernel = log.kernels[uid]
            if not kernel.overlapped and not kernel.interrupted:
                kernel.sim_cycles, kernel.sim_insn = cycles, insn
        return log


def _is_3x(log: SimLog) -> bool:
    """GPGPU-Sim 3.x prints no end marker, not even for a normal run (gpgpu-sim-output.md §7)."""
    return log.gpgpusim_version is not None and log.gpgpusim_version.startswith("3.")


def _every_launch_in_a_block(log: SimLog) -> bool:
    launched = [kernel for kernel in log.kernels.values() if kernel.name is not None]
    return bool(launched) and all(kernel.blocks > 0 for kernel in launched)


def _end_block(log: SimLog, block: _Block, own: dict[int, tuple[int, int | None]]) -> None:
    if block.uids is None:
        raise SimLogError(f"the stat block at line {block.line} has no kernel_launch_uid")
    if block.sim_cycle is None or block.tot_sim_cycle is None:
        raise SimLogError(f"the stat block at line {block.line} has no gpu_sim_cycle or gpu_tot_sim_cycle")
    log.blocks += 1
    log.total_cycles = block.tot_sim_cycle
    for uid in block.uids:
        _kernel(log, uid, block.line).blocks += 1
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
        uids.append(_number(value, "uid", MAX_ID))
    return uids


def _header(log: SimLog, line: bytes, dims: dict[bytes, str], number: int) -> None:
    if not line.startswith(HEADER_START):
        raise SimLogError(f"not a `Header info loaded for kernel command : PATH` line: {_text(line)!r}")
    path = _name(line[len(HEADER_START) :].rstrip())
    match = TRACE_FILE_NAME.fullmatch(path.rpartition("/")[2])
    if match is None:
        raise SimLogError(f"not a kernel-N[-ctx_0x...].traceg[.xz] or .tracez trace file: {path!r}")
    log.headers += 1
    kernel = _kernel(log, log.headers, number)
    kernel_id = _number(match[1], "kernel id", MAX_ID)
    kernel.kernel_id, kernel.ctx, kernel.trace_file = kernel_id, _ctx(match[2]), path
    # The dims are printed with the header, before it (a window of headers may be loaded before
    # any of their launches).
    kernel.grid, kernel.block = dims.pop(b"grid", None), dims.pop(b"block", None)


def _trace_launch(log: SimLog, line: bytes, number: int) -> None:
    name, match = _split_last(line, LAUNCH_START, LAUNCH_UID, LAUNCH_REST)
    if match is None:
        raise SimLogError(f"not a `launching kernel name: NAME uid: U` line: {_text(line)!r}")
    uid = _number(match[1], "uid", MAX_ID)
    if uid == 0:
        raise SimLogError("uid 0 launched: the simulator's uids count from 1")
    if log.headers and uid > log.headers:
        raise SimLogError(f"uid {uid} launched, but only {log.headers} trace headers were loaded")
    kernel = _launched(log, uid, _name(name), number)
    if match[2] is not None:
        kernel.stream = _number(match[2], "cuda_stream_id", MAX_ID)


def _ptx_launch(log: SimLog, line: bytes, uid: int, number: int) -> None:
    name, match = _split_last(line, PTX_START, PTX_STREAM, PTX_REST)
    if match is None:
        raise SimLogError(f"not a `pushing kernel 'NAME' to stream S, gridDim= ...` line: {_text(line)!r}")
    kernel = _launched(log, uid, _name(name), number)
    kernel.stream, kernel.grid = _number(match[1], "stream", MAX_ID), _dim(match[2])
    kernel.block = _dim(match[3])


def _split_last(
    line: bytes, start: bytes, separator: bytes, rest: re.Pattern
) -> tuple[bytes, re.Match | None]:
    """`start (.*)REST\\s*$` without backtracking: the name is what lies between `start` and the
    last `separator` (REST, which begins with it, cannot hold it again), REST fullmatched
    against the line's bounded rest, less its trailing whitespace."""
    if not line.startswith(start):
        return b"", None
    line = line.rstrip()
    at = line.rfind(separator, len(start))
    if at < 0:
        return b"", None
    return line[len(start) : at], rest.fullmatch(line, at)


def _gpgpusim_version(line: bytes) -> re.Match | None:
    """The first `*** GPGPU-Sim Simulator Version V  [build B]` in `line`, as a search of it would
    find, in time linear in the line: VERSION_REST is tried after each VERSION_START (their runs do
    not overlap), never past the line's last `]` (which a build needs)."""
    close = line.rfind(b"]") + 1
    at = line.find(VERSION_START, 0, close)
    while at >= 0:
        match = VERSION_REST.match(line, at + len(VERSION_START), close)
        if match is not None:
            return match
        at = line.find(VERSION_START, at + 1, close)
    return None


def _is_assertion(line: bytes) -> bool:
    """`.*Assertion [`'].*' failed` matches line's first line, found with finds (that pattern
    backtracks over every `Assertion ` of a line): the earliest `Assertion ` and a quote, with
    `' failed` after it, as any later one's `' failed` is after it too."""
    end = line.find(b"\n")
    end = len(line) if end < 0 else end
    found = [at for at in (line.find(text, 0, end) for text in ASSERTIONS) if at >= 0]
    return bool(found) and line.find(ASSERTION_FAILED, min(found) + len(ASSERTIONS[0]), end) >= 0


def _launched(log: SimLog, uid: int, name: str, number: int) -> SimKernel:
    kernel = _kernel(log, uid, number)
    if kernel.name is not None:
        raise SimLogError(f"uid {uid} launched twice")
    kernel.name = name
    return kernel


def _kernel(log: SimLog, uid: int, number: int | None = None) -> SimKernel:
    kernel = log.kernels.get(uid)
    if kernel is None:
        if len(log.kernels) >= MAX_UIDS:
            raise SimLogError(f"more than {MAX_UIDS} uids")
        kernel = log.kernels[uid] = SimKernel(uid, line=number)
    return kernel


def _number(digits: bytes | str, what: str, most: int) -> int:
    """The number `digits` spell (at most MAX_DIGITS), or SimLogError past `most`."""
    value = int(digits)
    if value > most:
        raise SimLogError(f"{what} {value} is more than {most}, the most Cascade reads")
    return value


@functools.lru_cache(maxsize=4096)  # one str for a name that recurs: memory grows with the uids
def _name(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    problem = unstorable_character(text)
    if problem is not None:
        raise SimLogError(f"{problem} in {text!r}")
    return text


@functools.lru_cache(maxsize=64)
def _ctx(ctx: str | None) -> str | None:
    return ctx


@functools.lru_cache(maxsize=4096)
def _dim(raw: bytes) -> str:
    return raw.decode()


def _text(raw: bytes) -> str:
    return raw[:200].decode("utf-8", "replace").rstrip("\n")
