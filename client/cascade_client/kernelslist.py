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
# every context, so that the step writes one kernelslist.g (given a folder, it writes one
# `.g` per context and only the first is named kernelslist.g).
RAW_LIST = "traces/kernelslist.cascade"


def trace_stem(name: str) -> str | None:
    """`kernel-5-ctx_0x64` for `kernel-5-ctx_0x64.trace.xz` and for its `.traceg.xz`: what a
    launch's raw and post-processed trace files have in common; None for another file."""
    match = KERNEL_TRACE.match(PurePosixPath(name).name)
    return match.group(1) if match else None


def is_kernel_trace(path: str) -> bool:
    return PurePosixPath(path).parent.name == "traces" and trace_stem(path) is not None


def postprocessed(line: str) -> str:
    """A kernel line as the post-processing step rewrites it: `.trace.xz` → `.traceg.xz`,
    `.trace` → `.traceg`; memcpy lines unchanged."""
    if line.startswith("Memcpy"):
        return line
    if line.endswith(".xz"):
        return line[:-3] + "g.xz"
    return line + "g"


def lines_of(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def source_lists(paths: list[str]) -> tuple[str, list[str]]:
    """Which of the run's lists say the launch order, and how the run is laid out:
    ("postprocessed", [traces/kernelslist.g]) or ("raw", the tracer's lists, contexts in the
    order of their names, as the API orders contexts), ("raw", []) for a run without any."""
    if POSTPROCESSED_LIST in paths:
        return "postprocessed", [POSTPROCESSED_LIST]
    per_context = sorted(p for p in paths if re.fullmatch(r"traces/kernelslist_ctx_0x[0-9a-fA-F]+", p))
    legacy = [p for p in paths if p == "traces/kernelslist"]
    return "raw", per_context + legacy


def selected(lines: list[str], stems: set[str] | None) -> list[str]:
    """The list's memcpy lines, in order, and the kernel lines of the launches in `stems`
    (every one when `stems` is None)."""
    return [line for line in lines if line.startswith("Memcpy") or stems is None or trace_stem(line) in stems]


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
