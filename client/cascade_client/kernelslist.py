"""Accel-Sim's kernel lists, read and written: pure functions, no I/O.

A list holds `MemcpyHtoD,<addr>,<bytes>` lines and one line per traced kernel, the name of its
trace file. The tracer writes `kernelslist_ctx_0x<ctx>` per context (v5) or `kernelslist` (v4)
naming raw `kernel-<n>[-ctx_0x<ctx>].trace[.xz]` files; Accel-Sim's post-processing step
(`post-traces-processing <list>`) turns each into `.traceg[.xz]` and writes `kernelslist.g`,
the list the simulator reads: the memcpy lines as they were, each kernel line renamed.
"""

import re
from pathlib import PurePosixPath

KERNEL_TRACE = re.compile(r"^(kernel-.+?)\.trace")
POSTPROCESSED_LIST = "traces/kernelslist.g"
# The post-processing step's input that `pull` writes for a run of raw traces: one list over
# every context (`for_simulator`), so that the step writes one list, `kernelslist.cascade.g`
# (`<list>.g`), the lines of the kernelslist.g `pull` writes beside it.
RAW_LIST = "traces/kernelslist.cascade"


def trace_stem(name: str) -> str | None:
    """`kernel-5-ctx_0x64` for `kernel-5-ctx_0x64.trace.xz` and for its `.traceg.xz`: what a
    launch's raw and post-processed trace files have in common; None for another file."""
    match = KERNEL_TRACE.match(PurePosixPath(name).name)
    return match.group(1) if match else None


def is_kernel_trace(path: str) -> bool:
    return PurePosixPath(path).parent.name == "traces" and trace_stem(path) is not None


def needs_postprocessing(line: str) -> bool:
    """A kernel line naming a raw trace (`.trace`, `.trace.xz`), which the simulator reads only
    post-processed. Any other name (a `.traceg`, Accel-Sim 2.0's `.tracez`) is read as named."""
    return not line.startswith("Memcpy") and line.endswith((".trace", ".trace.xz"))


def postprocessed(line: str) -> str:
    """A kernel line as the post-processing step rewrites it: `.trace.xz` → `.traceg.xz`,
    `.trace` → `.traceg`; memcpy lines and names it does not take unchanged."""
    if not needs_postprocessing(line):
        return line
    if line.endswith(".xz"):
        return line[:-3] + "g.xz"
    return line + "g"


def lines_of(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def source_lists(paths: list[str]) -> tuple[str, list[str]]:
    """Which of the run's lists say the launch order, and how the run is laid out:
    ("postprocessed", [traces/kernelslist.g]) or ("raw", the tracer's lists: the run-wide
    `kernelslist` first, where there is one (it names every context's launches in launch order),
    then the contexts' in the order of their names, as the API orders contexts), ("raw", []) for
    a run without any."""
    if POSTPROCESSED_LIST in paths:
        return "postprocessed", [POSTPROCESSED_LIST]
    per_context = sorted(p for p in paths if re.fullmatch(r"traces/kernelslist_ctx_0x[0-9a-fA-F]+", p))
    legacy = [p for p in paths if p == "traces/kernelslist"]
    return "raw", legacy + per_context


def three_fields(line: str) -> str:
    """`MemcpyHtoD,ADDRESS,BYTES`: forks append a 4th field (the `.bin` file), on which the
    simulator aborts (trace_parser.cc:278, `params.size() == 3`); other lines as they are."""
    return ",".join(line.split(",")[:3]) if line.startswith("Memcpy") else line


def for_simulator(lists: list[list[str]], stems: set[str] | None = None) -> list[str]:
    """The one kernel list the simulator accepts, from the lines of the run's lists (in
    `source_lists` order), with only the launches in `stems` (every one when None).

    - each launch once, where it first appears: a run-wide `kernelslist` and a context's
      `kernelslist_ctx_0x..` name the same files, and the memcpy lines before a launch already
      taken are the copies taken with it, so they go too;
    - MemcpyHtoD lines in their order, cut to 3 fields; those before a launch not selected stay
      (the next kept launch may read what they copy);
    - no MemcpyHtoD line after the last kernel line (no kernel reads what it copies, and the
      real simulator aborts on it once the kernels are done: accel-sim.cc:144 Assertion 'k').

    The post-processing step copies memcpy lines as they are and renames kernel lines, so this
    list post-processed is this list renamed (`postprocessed`)."""
    taken: set[str] = set()
    kept: list[str] = []
    copies: list[str] = []  # memcpy lines waiting for the next kept launch
    for lines in lists:
        since = len(copies)  # where this launch's own copies start
        for line in lines:
            if line.startswith("Memcpy"):
                copies.append(three_fields(line))
                continue
            launch = trace_stem(line) or line
            if launch in taken:
                del copies[since:]
            else:
                taken.add(launch)
                if stems is None or launch in stems:
                    kept += [*copies, line]
                    copies = []
            since = len(copies)
    return kept


def missing(lines: list[str], paths: list[str]) -> list[str]:
    """The trace files a kernel list (in `traces/`) names that are not among the run's `paths`:
    each kernel line is the name of a file beside the list, `.trace`, `.traceg` or either `.xz`,
    which the simulator (or the post-processing step, for raw lists) opens as named."""
    present = set(paths)
    return [
        line
        for line in lines
        if not line.startswith("Memcpy") and str(PurePosixPath("traces") / line) not in present
    ]
