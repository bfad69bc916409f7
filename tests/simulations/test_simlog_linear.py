"""A simulator log is read in time linear in its size, whatever its lines hold.

Two properties, no clock:

- each of the reader's patterns reads its line without backtracking (every repeat bounded or
  possessive), and gives what the patterns it replaced (REFERENCE, backtracking ones: a
  `Header info loaded for kernel command : ` line of 64,000 spaces took them 13-18 s) give, on
  hostile generated lines;
- the bytes the reader's searches scan (finds, counts, regular expression searches) add up to a
  few times the log's size on hostile logs, where a search of the rest of a chunk at every line
  (a chunk of `x ERROR` lines took 103 s a MiB) adds up to its square.
"""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulations import simlog
from simulations.simlog import SimLogError, read_sim_log_chunks
from tests.ingest.support import LOGS, NAMES, PROPERTY

# The patterns of the reader before they were made linear: the reference for what a line says.
REFERENCE = {
    "header": re.compile(rb"Header info loaded for kernel command : (.*?)\s*$"),
    "trace_file": re.compile(
        r"(?:.*/)?kernel-(\d{1,20})(?:-ctx_(0x[0-9a-fA-F]{1,16}))?(?:\.traceg(?:\.xz)?|\.tracez)"
    ),
    "dim": re.compile(rb"-(grid|block) dim = (\(\d{1,10},\d{1,10},\d{1,10}\))\s*$"),
    "launch": re.compile(rb"launching kernel name: (.*) uid: (\d{1,20})(?: cuda_stream_id: (\d{1,20}))?\s*$"),
    "ptx": re.compile(
        rb"GPGPU-Sim PTX: pushing kernel '(.*)' to stream (\d{1,20}), "
        rb"gridDim= (\(\d{1,10},\d{1,10},\d{1,10}\)) blockDim = (\(\d{1,10},\d{1,10},\d{1,10}\))\s*$"
    ),
    "fatal": re.compile(
        rb"(?:unsupported binary version: |xz: |Unable to open file: |GPGPU-Sim \*\* ERROR"
        rb"|GPGPU-Sim uArch: ERROR|GPGPU-Sim PTX: ERROR|.*Assertion [`'].*' failed)"
    ),
    "version": re.compile(rb"\*\*\* GPGPU-Sim Simulator Version (\S+)\s+\[build ([^\]]*)\]"),
    "clock": re.compile(rb"-gpgpu_clock_domains\s+(\d{1,9}(?:\.\d{1,9})?)(?::|\s|$)"),
    "accelsim": re.compile(rb"Accel-Sim \[build ([^\]]*)\]"),
    "count": re.compile(rb"(gpu_sim_cycle|gpu_sim_insn|gpu_tot_sim_cycle) = (\d{1,20})\s*$"),
}

STARTS = [
    b"",
    simlog.HEADER_START,
    simlog.LAUNCH_START,
    simlog.PTX_START,
    b"-grid dim = ",
    b"-block dim = ",
    b"-gpgpu_clock_domains",
    b"Accel-Sim [build ",
    b"  ",
    b"gpu_sim_cycle = ",
    b"gpu_tot_sim_cycle = ",
    b"GPGPU-Sim uArch: ERROR",
    b"Unable to open file: ",
]
# What the patterns look for, and what makes a backtracking one try again.
PIECES = [
    b" ",
    b"  ",
    b"\t",
    b"\r",
    b"\x0b",
    b"x",
    b"1",
    b"42",
    b"9" * 21,
    b"'",
    b"`",
    b"]",
    b"/",
    b"/t/",
    b"kernel-7",
    b"-ctx_0x1f",
    b".traceg",
    b".tracez",
    b".xz",
    b" uid: ",
    b" cuda_stream_id: ",
    b"' to stream ",
    b", gridDim= ",
    b" blockDim = ",
    b"(1,2,3)",
    b"Assertion ",
    b"Assertion `",
    b"Assertion '",
    b"' failed",
    b"xz: ",
    simlog.VERSION_START,
    b"4.2.0",
    b"[build ",
    b":",
    b"1000.0",
    b"\xc3\xa9",
]
LINES = st.builds(
    lambda start, pieces: start + b"".join(pieces) + b"\n",
    st.sampled_from(STARTS),
    st.lists(st.sampled_from(PIECES), max_size=24),
)


def groups(match) -> tuple | None:
    return None if match is None else match.groups()


@PROPERTY
@given(line=LINES)
def test_each_line_says_what_the_backtracking_patterns_said(line):
    old = REFERENCE["header"].match(line)
    new = line[len(simlog.HEADER_START) :].rstrip() if line.startswith(simlog.HEADER_START) else None
    assert groups(old) == (None if new is None else (new,))
    if new is not None:
        path = new.decode("utf-8", "replace")
        assert groups(REFERENCE["trace_file"].fullmatch(path)) == groups(
            simlog.TRACE_FILE_NAME.fullmatch(path.rpartition("/")[2])
        )

    name, match = simlog._split_last(line, simlog.LAUNCH_START, simlog.LAUNCH_UID, simlog.LAUNCH_REST)
    assert groups(REFERENCE["launch"].match(line)) == (None if match is None else (name, *match.groups()))
    name, match = simlog._split_last(line, simlog.PTX_START, simlog.PTX_STREAM, simlog.PTX_REST)
    assert groups(REFERENCE["ptx"].match(line)) == (None if match is None else (name, *match.groups()))

    assert groups(REFERENCE["dim"].match(line)) == groups(simlog.DIM.fullmatch(line.rstrip()))
    assert groups(REFERENCE["count"].match(line)) == groups(simlog.BLOCK_NUMBER.fullmatch(line.rstrip()))
    assert bool(REFERENCE["fatal"].match(line)) == bool(
        simlog.FATAL.match(line) or simlog._is_assertion(line)
    )
    assert groups(REFERENCE["version"].search(line)) == groups(simlog._gpgpusim_version(line))
    assert groups(REFERENCE["clock"].match(line)) == groups(simlog.CLOCK_DOMAINS.match(line))
    assert groups(REFERENCE["accelsim"].match(line)) == groups(simlog.ACCELSIM_BUILD.match(line))


def reader_patterns() -> list[re.Pattern]:
    found = []
    for value in vars(simlog).values():
        if isinstance(value, re.Pattern):
            found.append(value)
        elif isinstance(value, tuple) and value and all(isinstance(item, re.Pattern) for item in value):
            found.extend(value)
    found.append(simlog.READ_LINE_IN_A_ROW.__self__)
    return found


def test_every_repeat_in_the_readers_patterns_is_bounded_or_possessive():
    """A repeat that may give back what it took (greedy `*`, `+`, `{n,}`, or a lazy one) is what
    makes a pattern try again at every character: quadratic in a line."""
    patterns = reader_patterns()
    assert len(patterns) >= 15
    for pattern in patterns:
        source = pattern.pattern if isinstance(pattern.pattern, str) else pattern.pattern.decode("latin-1")
        plain = re.sub(r"\[(?:\\.|[^\]])*\]", "C", re.sub(r"\\.", "E", source))
        for repeat in re.finditer(r"[*+]\+?|\{\d*,\}", plain):
            assert repeat.group().endswith("++") or repeat.group() == "*+", (pattern.pattern, repeat.group())


# --- The bytes the reader's searches scan ------------------------------------------------------


class Scanned(bytes):
    """A log whose every scan (find, rfind, index, count) adds the bytes it looked at to `total`:
    a find up to what it found, an rfind back to it, a count its whole range. Its slices are
    counted too."""

    total = 0

    def _range(self, args) -> tuple[int, int]:
        start = args[1] if len(args) > 1 and args[1] is not None else 0
        end = args[2] if len(args) > 2 and args[2] is not None else len(self)
        return max(0, start), min(end, len(self))

    def find(self, *args):
        start, end = self._range(args)
        found = super().find(*args)
        Scanned.total += max(0, (end if found < 0 else found + len(args[0])) - start)
        return found

    def index(self, *args):
        start, end = self._range(args)
        found = super().find(*args)
        Scanned.total += max(0, (end if found < 0 else found + len(args[0])) - start)
        return super().index(*args)

    def rfind(self, *args):
        start, end = self._range(args)
        found = super().rfind(*args)
        Scanned.total += max(0, end - (start if found < 0 else found))
        return found

    def count(self, *args):
        start, end = self._range(args)
        Scanned.total += max(0, end - start)
        return super().count(*args)

    def __contains__(self, item):
        Scanned.total += len(self)
        return super().__contains__(item)

    def __getitem__(self, key):
        value = super().__getitem__(key)
        return Scanned(value) if isinstance(key, slice) else value


class CountedSearch:
    """A pattern whose searches add the bytes they looked at (up to their match's end, else
    their range) to Scanned.total."""

    def __init__(self, pattern: re.Pattern):
        self.pattern = pattern

    def search(self, string, pos=0, endpos=None):
        endpos = len(string) if endpos is None else endpos
        match = self.pattern.search(string, pos, endpos)
        Scanned.total += (endpos if match is None else match.end()) - pos
        return match

    def match(self, *args):
        return self.pattern.match(*args)

    def finditer(self, string, pos=0, endpos=None):
        endpos = len(string) if endpos is None else endpos
        for match in self.pattern.finditer(string, pos, endpos):
            Scanned.total += match.end() - pos
            pos = match.end()
            yield match
        Scanned.total += endpos - pos


def scanned(data: bytes) -> int:
    """The bytes scanned reading `data` as one chunk (the worst case: a search of the rest of a
    chunk at every line is quadratic in the chunk)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("READ_LINE", "STATS_LINE"):
            patch.setattr(simlog, name, tuple(CountedSearch(p) for p in getattr(simlog, name)))
        patch.setattr(
            simlog, "READ_LINE_IN_A_ROW", CountedSearch(simlog.READ_LINE_IN_A_ROW.__self__).finditer
        )
        Scanned.total = 0
        try:
            read_sim_log_chunks([Scanned(data)])
        except SimLogError:
            pass
        return Scanned.total


STATS = b"kernel_name = k\nkernel_launch_uid = 1\ngpu_sim_cycle = 1\ngpu_tot_sim_cycle = 1\n"
# Lines that each make the reader look again, after and within a block's statistics.
HOSTILE_LINES = [
    b"x ERROR\n",
    b"xz: \n",
    b"Assertion `\n",
    b"  GPGPU-Sim Simulator Version\n",
    b"Accel-Sim\n",
    b"'\n",
    b"*\n",
    b"GPGPU-Sim: ** break due to reaching the maximum cycles\n",
    b"-grid dim = (1,1,1)\n",
    b"plain\n",
]
# Bytes scanned a byte of log: one pass a needle (the fatal ones, the footer, `'`, `*`, the
# version, the lines read) and the counts and finds of each line's own range.
MOST_SCANNED_A_BYTE = 16


@PROPERTY
@given(
    lines=st.lists(st.sampled_from(HOSTILE_LINES), min_size=1, max_size=4),
    in_stats=st.booleans(),
    version_first=st.booleans(),
)
def test_the_bytes_scanned_grow_with_the_log_not_its_square(lines, in_stats, version_first):
    head = (b"        *** GPGPU-Sim Simulator Version 4.2.0  [build b] ***\n" if version_first else b"") + (
        STATS if in_stats else b""
    )
    body = b"".join(lines)
    data = head + body * (200_000 // len(body))
    assert scanned(data) <= MOST_SCANNED_A_BYTE * len(data)


@pytest.mark.parametrize("name", NAMES)
def test_a_real_log_is_scanned_a_few_times_at_most(name):
    assert scanned(LOGS[name]) <= MOST_SCANNED_A_BYTE * len(LOGS[name])


# --- The reproductions, as written ------------------------------------------------------

HEADER_64K = b"Header info loaded for kernel command : " + b" " * 64_000 + b"x\n"
ASSERTIONS_352KB = b"Assertion `" * 32_000 + b"\n"


def test_a_header_of_64_000_spaces_and_x_is_one_scan_and_a_simlogerror_naming_its_line():
    assert scanned(HEADER_64K) <= MOST_SCANNED_A_BYTE * len(HEADER_64K)
    with pytest.raises(SimLogError) as raised:
        read_sim_log_chunks([HEADER_64K])
    assert str(raised.value) == "line 1: not a kernel-N[-ctx_0x...].traceg[.xz] or .tracez trace file: 'x'"


def test_352_kb_of_assertion_backticks_is_one_scan_and_no_fatal_line():
    assert len(ASSERTIONS_352KB) == 352_001
    assert scanned(ASSERTIONS_352KB) <= MOST_SCANNED_A_BYTE * len(ASSERTIONS_352KB)
    log = read_sim_log_chunks([ASSERTIONS_352KB])
    assert (log.fatal, log.stopped, log.lines) == (None, "killed", 1)
    failed = ASSERTIONS_352KB[:-1] + b"' failed\n"  # the same line, an assertion that failed
    assert read_sim_log_chunks([failed]).fatal[0] == 1
