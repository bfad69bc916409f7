"""The common lines of a stats file, recognised and split into fields for COPY, on PostgreSQL.

Most lines of a run are the common shape. Read into a KernelRow each, they cost as much to
read as to store; recognised here and split into their fields, which traces.kernel_store
encodes as COPY text rows (launch_row), they keep pace with PostgreSQL's COPY (the figures:
docs/performance.md). Only the lines parse_stats_lines would read the same way are taken:
launch halves as the tracer prints them (one with its totals, or graph-captured halves run
together), names without commas, totals of 0 to 2^32 - 1, trace files `kernel-<id>` followed
by the scheme the writer holds for the file's context (so that the file name is derived,
never stored), kernel ids increasing. Any other line is left to parse_stats_lines: `line`
never raises, it declines, and every error is said by the one parser.
"""

import re
from collections.abc import Set

from ingest.stats import LAUNCH_NUMBERS, LAUNCHES_CACHED, UINT32, StatsError, read_launch
from traces.kernel_store import (
    KernelWriter,
    LaunchBlock,
    PendingShape,
    launch_block,
    launch_row,
    launch_row_without_totals,
)
from traces.models import NO_DEVICE

# What a launch half holds after its trace file, as the fast path of parse_stats_lines takes it.
LAUNCH = re.compile(rb"[^,]+" + rb", -?[0-9]{1,20}" * LAUNCH_NUMBERS).fullmatch
# A context's scheme that the tracer's v4 and v5 names follow (not the distributed fork's
# `_<gpu>`, which names a device).
SCHEME = re.compile(rb"(?:-ctx_0x[0-9a-fA-F]+)?\.trace[A-Za-z0-9.]*").fullmatch
FIRST_FILE = re.compile(rb"([0-9]{1,18})(?:-ctx_0x[0-9a-fA-F]+)?\.trace[A-Za-z0-9.]*").fullmatch
# Launches gathered before they are handed on: about 500 kB of COPY text; the first few go
# at once, so that PostgreSQL starts loading while the rest is read.
BLOCK_LAUNCHES = 8192
FIRST_BLOCK_LAUNCHES = 256
# Past any kernel id this path takes (18 digits at most): a tail that holds for every launch.
LAST_KERNEL_ID = 10**18


class LaunchText:
    """One stats file's common launches as COPY text (see the module's docstring)."""

    def __init__(self, ctx: str, writer: KernelWriter, traced: Set[int], step_of=None, duration_of=None):
        """`traced`: the kernel ids kernelslist names (kernelslist.TracedIds, or any set); `step_of(ctx, kernel_id)`: the launch's
        step; `duration_of(ctx, kernel_id, grid, block)`: its measured time, by kernel id alone
        (timing_csv.CascadeDurations: a declined line's launches may be asked for again)."""
        self.ctx = ctx
        self.writer = writer
        self.traced = traced
        self.step_of = step_of
        self.duration_of = duration_of
        self.context: int | None = None
        self.separator = b""  # the context's scheme and `, `: what follows a launch's kernel id
        self.declined = False  # the context's files follow no scheme this path can derive
        self.shapes: dict[bytes, bytes | PendingShape] = {}
        self.pending: dict[bytes, PendingShape] = {}  # of `shapes`, those not yet written as text
        # The tail of the launches from the current one to `tail_until` (launches come in
        # kernel-id order): the same for a run of launches until one of them is traced, or not,
        # where the last was not, or falls in another step (`_tail_span`).
        self.tail = writer.launch_tail(False, None)
        self.tail_traced = False
        self.tail_until = -1 if traced or step_of is not None or duration_of is not None else LAST_KERNEL_ID
        # The tails of the current step, traced or not (a dict of every step's was 200 bytes a step).
        self.tails: dict[bool, bytes] = {}
        self.tails_step: int | None = None
        self.rows: list = []  # COPY text rows, one a launch (a tuple where its shape is pending)
        self.launches = 0
        self.without_totals = 0
        self.traced_launches = 0  # of the launches taken, those `traced` names
        self.taken = False  # a block was handed on

    @property
    def full(self) -> bool:
        return self.launches >= (BLOCK_LAUNCHES if self.taken else FIRST_BLOCK_LAUNCHES)

    def take(self) -> LaunchBlock | None:
        """The launches gathered so far, if any."""
        if not self.rows:
            return None
        pending = self.pending
        if pending:
            self.writer.finish_shapes(self.context, pending.values())
            for launch, shape in pending.items():
                self.shapes[launch] = shape.text
            self.pending = {}
        block = launch_block(self.rows, self.launches, self.without_totals, pending=bool(pending))
        self.rows, self.launches, self.without_totals = [], 0, 0
        self.taken = True
        return block

    def line(self, raw: bytes, last_id: int) -> int | None:
        """Take `raw` if it is a common line whose kernel ids follow `last_id`: returns its
        last kernel id. None leaves the line, whole, to parse_stats_lines."""
        if self.declined or not raw.startswith(b"kernel-"):
            return None
        halves = raw.rstrip(b"\r\n")[7:].split(b", kernel-")
        if self.context is None and not self._start(halves[0]):
            return None
        taken = len(self.rows)
        last = self._halves(halves, last_id)
        if last is None:
            del self.rows[taken:]
        return last

    def _halves(self, halves: list[bytes], last_id: int) -> int | None:
        """The line's launches (`<id><scheme>, <name>, <8 numbers>` each, the last one maybe
        with `, <totals>`: graph-captured halves before it have none) onto `rows`; the last
        kernel id, or None to decline."""
        shapes, separator, rows = self.shapes, self.separator, self.rows
        tail, traced, until = self.tail, self.tail_traced, self.tail_until
        encode, encode_without_totals = launch_row, launch_row_without_totals  # the store's, looked up once
        traced_launches = 0
        final = halves.pop()
        # Graph-captured halves: no totals. Kernel ids as int() reads them back (no sign, space
        # or leading zero, at most 18 digits), each past the last: `0` is never past one.
        for half in halves:
            kernel_id, _, launch = half.partition(separator)
            shape = shapes.get(launch)
            if shape is None and (shape := self._shape(launch)) is None:
                return None
            if not kernel_id.isdigit() or kernel_id[0] == 48 or len(kernel_id) > 18:
                return None
            number = int(kernel_id)
            if number <= last_id:
                return None  # parse_stats_lines says why
            last_id = number
            if number > until:
                tail, traced, until = self._tail_span(number)
            traced_launches += traced
            rows.append(encode_without_totals(shape, kernel_id, tail))
        # The line's last half: its totals, or none (the line ends in `, `).
        kernel_id, _, launch = final.partition(separator)
        launch, _, totals = launch.rpartition(b", ")
        shape = shapes.get(launch)
        if shape is None and (shape := self._shape(launch)) is None:
            return None
        if not kernel_id.isdigit() or kernel_id[0] == 48 or len(kernel_id) > 18:
            return None
        number = int(kernel_id)
        if number <= last_id:
            return None
        if number > until:
            tail, traced, until = self._tail_span(number)
        traced_launches += traced
        if not totals:
            rows.append(encode_without_totals(shape, kernel_id, tail))
            self.without_totals += len(halves) + 1
        else:
            insts, _, reported = totals.partition(b",")
            if not (insts.isdigit() and reported.isdigit()):
                return None  # negative (%d of 2^31 or more), a fork's extra columns, damage
            # Past 32 bits, or past what int() reads (4,300 digits): parse_stats_lines says which.
            if any(
                len(total) > 9 and (len(total) > 20 or int(total) >= UINT32) for total in (insts, reported)
            ):
                return None
            rows.append(encode(shape, kernel_id, insts, reported, tail))
            self.without_totals += len(halves)
        self.tail, self.tail_traced, self.tail_until = tail, traced, until
        self.traced_launches += traced_launches
        self.launches += len(halves) + 1
        return number

    def _start(self, first_half: bytes) -> bool:
        """The file's context, from its first common launch: its number and scheme, from the
        writer (which has them from an earlier line if parse_stats_lines read that one)."""
        first = FIRST_FILE(first_half.split(b", ", 1)[0])
        if first is None:
            return False  # maybe the next line
        trace_file = "kernel-" + first[0].decode("ascii")
        self.context, suffix = self.writer.context_of(self.ctx, NO_DEVICE, trace_file, int(first[1]))
        self.declined = suffix is None or SCHEME(suffix.encode()) is None
        if not self.declined:
            self.separator = suffix.encode() + b", "
        return not self.declined

    def _shape(self, launch: bytes) -> PendingShape | None:
        if len(self.shapes) >= LAUNCHES_CACHED or LAUNCH(launch) is None:
            return None
        try:
            read = read_launch(launch, 0)
        except StatsError:
            return None  # a number beyond 32 bits: parse_stats_lines says which
        if read is None:
            return None
        shape = self.shapes[launch] = self.pending[launch] = PendingShape(read[0], read[1:])
        return shape

    def _tail_span(self, kernel_id: int) -> tuple[bytes, bool, int]:
        """The tail of launch `kernel_id`, whether it is traced, and the last kernel id the same
        tail holds for (a launch's own, where its duration or step is looked up by id)."""
        span = getattr(self.traced, "span", None)
        traced, until = span(kernel_id) if span is not None else (kernel_id in self.traced, kernel_id)
        if self.duration_of is not None:  # the launch's own: not worth keeping
            step = None if self.step_of is None else self.step_of(self.ctx, kernel_id)
            return (
                self.writer.launch_tail(traced, step, self.duration_of(self.ctx, kernel_id, None, None)),
                traced,
                kernel_id,
            )
        if self.step_of is None:
            return self.writer.launch_tail(traced, None), traced, until
        step = self.step_of(self.ctx, kernel_id)
        if step != self.tails_step:
            self.tails, self.tails_step = {}, step
        tail = self.tails.get(traced)
        if tail is None:
            tail = self.tails[traced] = self.writer.launch_tail(traced, step)
        return tail, traced, kernel_id
