"""The tracer's kernelslist files: which launches were traced (their instruction traces written).

A kernelslist names, in launch order, the trace file of each kernel the tracer traced, among
`MemcpyHtoD,<addr>,<bytes>` lines (docs/formats.md#the-tracers-files). Pure: lines (bytes, as
read from S3) to the ids they name, no Django, no I/O. Its errors and notes are the stats
reader's (ingest.stats: StatsError, StatsNote), and so is its reading of a trace file's name.
"""

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Set

from ingest.stats import (
    TRACE_FILE,
    TRACE_FILE_ID,
    StatsError,
    kernel_id_error,
    kernel_id_number,
    note,
    shown_text,
)

# Past any kernel id (ids are at most 2^63 - 1): the last of a span with no traced id after it.
LAST_ID = 2**63


class TracedIds(Set):
    """A context's traced kernel ids as sorted, disjoint ranges (first and last id in two 8-byte
    arrays): the tracer's default kernelslist names every launch, one range of 16 bytes where a
    set of ints takes about 60 bytes an id. Ids arrive as kernelslist lists them;
    consecutive ones extend the last range, anything else (a gap, a duplicate, an id out of
    order) starts one, and `finish` sorts and merges them. Equal to the set of the same ids."""

    __slots__ = ("_firsts", "_lasts", "_count", "_sorted")

    def __init__(self, ids: Iterable[int] = ()):
        self._firsts, self._lasts = array("q"), array("q")
        self._count = 0  # ids, once finished
        self._sorted = True  # every range so far after the previous one, not touching it
        for kernel_id in ids:
            self.add(kernel_id)
        self.finish()

    def add(self, kernel_id: int) -> None:
        """One id (0 to 2^63 - 1); `finish` before asking anything."""
        lasts = self._lasts
        if lasts:
            last = lasts[-1]
            if kernel_id == last + 1:
                lasts[-1] = kernel_id
                return
            if self._firsts[-1] <= kernel_id <= last:
                return  # already in the last range
            if kernel_id <= last:
                self._sorted = False
        self._firsts.append(kernel_id)
        lasts.append(kernel_id)

    def finish(self) -> "TracedIds":
        """Sort and merge the ranges if ids came out of order, and count the ids."""
        firsts, lasts = self._firsts, self._lasts
        if not self._sorted:
            order = sorted(range(len(firsts)), key=firsts.__getitem__)
            merged_firsts, merged_lasts = array("q"), array("q")
            for i in order:
                first, last = firsts[i], lasts[i]
                if merged_lasts and first <= merged_lasts[-1] + 1:
                    merged_lasts[-1] = max(merged_lasts[-1], last)
                else:
                    merged_firsts.append(first)
                    merged_lasts.append(last)
            self._firsts, self._lasts, self._sorted = merged_firsts, merged_lasts, True
        self._count = sum(last - first + 1 for first, last in zip(self._firsts, self._lasts, strict=True))
        return self

    def __contains__(self, kernel_id) -> bool:
        at = bisect_right(self._firsts, kernel_id) - 1
        return at >= 0 and kernel_id <= self._lasts[at]

    def span(self, kernel_id: int) -> tuple[bool, int]:
        """Whether `kernel_id` is traced, and the last id from it on that is the same: the
        parse asks once a run of launches (ingest.stats_fast_path), not once a launch."""
        firsts = self._firsts
        at = bisect_right(firsts, kernel_id) - 1
        if at >= 0 and kernel_id <= self._lasts[at]:
            return True, self._lasts[at]
        return False, firsts[at + 1] - 1 if at + 1 < len(firsts) else LAST_ID

    def __iter__(self) -> Iterator[int]:
        for first, last in zip(self._firsts, self._lasts, strict=True):
            yield from range(first, last + 1)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return bool(self._firsts)

    @property
    def ranges(self) -> int:
        return len(self._firsts)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{first}" if first == last else f"{first}-{last}"
            for first, last in zip(self._firsts[:8], self._lasts[:8], strict=True)
        )
        return f"TracedIds({shown}{', ...' if len(self._firsts) > 8 else ''})"


def parse_kernelslist_lines(
    lines: Iterable[bytes],
    *,
    held: Callable[[str], bool] | None = None,
    ctx: str | None = None,
    notes: list | None = None,
    traced: TracedIds | None = None,
) -> TracedIds:
    """The ids of the kernels that were traced: the trace files a kernelslist names.

    `MemcpyHtoD,<addr>,<bytes>` lines and anything else that names no kernel trace are
    skipped; every layout the simulator and its post-processor read counts: `kernelslist`,
    `kernelslist_ctx_<ctx>` and their post-processed `.g`, naming `.trace` (raw) or `.traceg`
    (grouped) files, `.xz` or not. Held as ranges (TracedIds), not a set: a kernelslist may
    name millions of launches.

    `held(file name)`: whether the run holds that file (beside the list): a launch whose file
    the run lacks was not traced as far as anyone can use it. `ctx`: the context the ids are
    for; a list's entries of another context (a run-wide `kernelslist.g`) are skipped.
    `traced`: ids already read from another list of the context, added to. A last line
    without its newline that names no file the run holds was cut: dropped, and said in `notes`.
    """
    traced = TracedIds() if traced is None else traced
    position = 0
    ctx_suffix = None if ctx is None else f"-ctx_{ctx}".lower()
    for number, raw in enumerate(lines, start=1):
        offset = position
        position += len(raw)
        if b"\x00" in raw:
            raise StatsError(number, "binary data (NUL byte), not a text file")
        cut = not raw.endswith(b"\n")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            if not (cut and error.reason == "unexpected end of data"):
                raise StatsError(number, "binary data (not UTF-8 text), not a text file") from None
            line = raw[: error.start].decode("utf-8")
        entry = line.strip().removeprefix("\ufeff")
        file_name = entry.rpartition("/")[2]
        match = TRACE_FILE_ID.match(file_name)
        whole = match is not None and TRACE_FILE.fullmatch(file_name) is not None
        if cut and entry and not (whole and (held is None or held(file_name))):
            note(
                notes,
                offset,
                f"the list ends mid-line (no newline): its last line {shown_text(entry)} is dropped",
            )
            break
        if match is None:
            continue
        kernel_id = kernel_id_number(match.group(1), number, entry)
        if kernel_id < 1:
            raise kernel_id_error(match.group(1), number, entry)
        if ctx_suffix is not None and "-ctx_" in file_name and ctx_suffix + "." not in file_name.lower():
            continue  # another context's launch, in a list of the whole run
        if held is None or held(file_name):
            traced.add(kernel_id)
    return traced.finish()
