"""Kernel names as a person reads them: C++ symbols demangled, everything else as it is.

NVBit reports a kernel by its symbol: PyTorch, vLLM and FlashAttention kernels come mangled
(`_ZN5flash24flash_fwd_splitkv_kernelI...`), cuBLAS's own kernels (`sm90_xmma_gemm_...`,
`nvjet_...`) do not. Demangling goes through `cxxfilt`, which calls libstdc++'s
`__cxa_demangle`, the demangler the compilers' own tools use, rather than a parser of our own.

Kernel names come from whoever uploads a run, and a symbol's substitutions (`S1_`, `T_`) copy
earlier parts of it: each can double the demangled text, so a symbol of 270 bytes can
demangle to hundreds of megabytes (docs/decisions/0008). `__cxa_demangle` takes no limit and
cannot be stopped once called, so:

- a symbol whose demangled text is small whatever it holds (its length times the most a
  character prints, doubled per reference: `demangled_length_bound`) and that libstdc++'s
  recursion limit lets through (RECURSION_LIMITED_CHARS) is demangled here;
- any other is demangled in a child process with a memory limit and a CPU limit a name,
  all of a batch's names in one child, within a budget of seconds for them all (`Budget`: per
  trace at ingest, per request for a read); one that runs out of its limit, or finds the
  budget spent, keeps its mangled name and is marked (`KernelName.demangle_limited`);
- a demangled name longer than DEMANGLED_MAX_CHARS is cut there, with a marker that says so
  and tells names apart that share their first characters (`?by=demangled` merges only names
  that demangle alike in full).

Names are demangled once, when ingest first stores them (`traces/kernel_store.py` keeps the
text in `KernelName.demangled`); reads take the stored text, and demangle only names stored
before there was one, within their budget. The cache keeps the most recently used names up
to DEMANGLE_CACHE_BYTES, however long they are.
"""

import glob
import hashlib
import os
import re
import selectors
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import cxxfilt

# What a page or an answer shows of one demangled name, at most (real kernels' names stay under
# it: CUTLASS 2's grouped GEMM, the longest of the real tracers' files, demangles to 8,475).
DEMANGLED_MAX_CHARS = 16384
# The cache's keys and values, in characters (kernel names are ASCII): a few thousand names.
DEMANGLE_CACHE_BYTES = 16 * 1024**2
# The most a mangled character prints before references copy anything: `Sd` prints
# std::basic_iostream<char, std::char_traits<char> > (25 a character), `y` unsigned long long.
PRINTED_PER_CHAR = 40
# A symbol whose bound is under this is demangled in this process: at worst a megabyte, once.
IN_PROCESS_BOUND = 1024**2
# libstdc++'s `__cxa_demangle` refuses a symbol past 1,024 characters (twice as many parts as
# DEMANGLE_RECURSION_LIMIT, 2,048, guards its stack), CUTLASS's kernels among them; c++filt
# reads them with --no-recursion-limit. Such names are demangled in the child, by binutils'
# `cplus_demangle` with c++filt's options (DMGL_PARAMS | DMGL_ANSI | DMGL_VERBOSE) and
# DMGL_NO_RECURSE_LIMIT, where libbfd is installed: a stack it overflows ends only the child.
RECURSION_LIMITED_CHARS = 1024
UNLIMITED_OPTIONS = 1 | 2 | 8 | 1 << 18
BFD_LIBRARIES = ("/usr/lib/*/libbfd*.so*", "/usr/lib64/libbfd*.so*", "/usr/lib/libbfd*.so*")
# What copies earlier text when printed: substitutions (S_, S0_...), template parameters
# (T_, T0_...), pack expansions (Dp). Matching more than these only makes the bound larger.
REFERENCE = re.compile(r"S[0-9A-Z]*_|T[0-9A-Z]*_|Dp")
# The child's limits: memory on top of what the interpreter takes, and CPU seconds for one
# name (an interval timer whose signal ends the child). A demangler out of memory still walks
# the whole symbol (only its appends fail), so the CPU limit is what ends a hostile name.
# Real names take microseconds each.
CHILD_MEMORY = 128 * 1024**2
NAME_CPU_SECONDS = 0.1
# What demangling may cost in all, in seconds of waiting (children started, names read): per
# trace at ingest, per request where a name was stored before its demangled text was. Names
# still pending when it runs out are kept mangled and marked, like one that hits its limit.
INGEST_BUDGET_SECONDS = 2.0
REQUEST_BUDGET_SECONDS = 0.3

# The child: says it is ready, then reads names a line each and writes a line each as it goes
# (so that the names done before one that exhausts a limit are kept): `+<demangled>`,
# `~<length> <digest> <first DEMANGLED_MAX_CHARS>` for a longer one (the parent never holds
# more), or `-` for a name that is no symbol.
CHILD_SOURCE = """
import ctypes, hashlib, resource, signal, sys
import cxxfilt
headroom, seconds, most, options, unlimited = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
demangleb = cxxfilt.demangleb
if unlimited:  # binutils' own demangler, as c++filt --no-recursion-limit calls it
    bfd = ctypes.CDLL(unlimited)
    bfd.cplus_demangle.restype, bfd.cplus_demangle.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]

    def demangleb(name):
        text = bfd.cplus_demangle(name, options)
        if not text:
            raise cxxfilt.Error(name)
        try:
            return ctypes.string_at(text)
        finally:
            libc.free(text)
try:
    with open("/proc/self/statm") as statm:
        used = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + headroom, used + headroom))
except (OSError, ValueError):
    pass  # no /proc (not Linux): the time limits still hold
signal.signal(signal.SIGPROF, signal.SIG_DFL)  # the timer's signal ends the child
out = sys.stdout.buffer
out.write(b"ready\\n")
out.flush()
for line in sys.stdin.buffer:
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        text = demangleb(line.rstrip(b"\\n")).replace(b"\\n", b" ")
        if len(text) > most:
            digest = hashlib.blake2b(text, digest_size=6).hexdigest().encode()
            text = b"~%d %s %s" % (len(text), digest, text[:most])
        else:
            text = b"+" + text
    except (cxxfilt.Error, MemoryError):
        text = b"-"
    signal.setitimer(signal.ITIMER_PROF, 0)
    out.write(text + b"\\n")
    out.flush()
"""


def unlimited_library() -> str:
    """binutils' shared library (libbfd, which c++filt links), whose demangler can be told to
    lift the recursion limit; "" where binutils is not installed."""
    global _unlimited
    if _unlimited is None:
        found = [path for pattern in BFD_LIBRARIES for path in sorted(glob.glob(pattern))]
        _unlimited = found[0] if found else ""
    return _unlimited


_unlimited: str | None = None


class Budget:
    """Seconds of demangling left to a trace's ingest or to a request: only the time spent
    demangling (`spending`) counts, not the parse or the queries around it.

    `clock` (the class's, or one handed to a budget) says what a second is: a test hands one it
    moves, so that the verdict does not depend on the machine's load."""

    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, seconds: float, *, clock: Callable[[], float] | None = None):
        self.seconds = seconds
        self.since: float | None = None
        if clock is not None:
            self.clock = clock

    def left(self) -> float:
        spent = self.clock() - self.since if self.since is not None else 0.0
        return max(0.0, self.seconds - spent)

    @contextmanager
    def spending(self) -> Iterator[None]:
        self.since = self.clock()
        try:
            yield
        finally:
            self.seconds, self.since = self.left(), None


class ByteBoundedCache:
    """Least recently used names first out, once keys and values pass `limit` characters."""

    def __init__(self, limit: int):
        self.limit = limit
        self.size = 0
        self.entries: OrderedDict[str, str] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self.lock:
            value = self.entries.get(key)
            if value is not None:
                self.entries.move_to_end(key)
            return value

    def put(self, key: str, value: str) -> None:
        cost = len(key) + len(value)
        if cost > self.limit:
            return
        with self.lock:
            if key in self.entries:
                return
            self.entries[key] = value
            self.size += cost
            while self.size > self.limit:
                old_key, old_value = self.entries.popitem(last=False)
                self.size -= len(old_key) + len(old_value)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.size = 0


cache = ByteBoundedCache(DEMANGLE_CACHE_BYTES)


def demangled_length_bound(name: str) -> int:
    """The most `name` can demangle to: each reference copies at most everything before it."""
    # Past 64 references the bound is past any limit: no need to count them all, or shift further.
    references = sum(1 for _ in zip(REFERENCE.finditer(name), range(64), strict=False))
    return len(name) * PRINTED_PER_CHAR << references


def cut(text: str) -> str:
    """`text`, or its first DEMANGLED_MAX_CHARS and a marker: how long it was, and a digest of it."""
    if len(text) <= DEMANGLED_MAX_CHARS:
        return text
    return marked(
        text[:DEMANGLED_MAX_CHARS], len(text), hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
    )


def marked(head: str, length: int, digest: str) -> str:
    return f"{head}… [cut: {length:,} characters, #{digest}]"


def child_answer(line: bytes, name: str) -> str:
    """What the child wrote for `name` (CHILD_SOURCE): the demangled name, cut, or the name."""
    text = line[1:].decode("utf-8", "replace")
    if line.startswith(b"+"):
        return text
    if line.startswith(b"~"):
        length, digest, head = text.split(" ", 2)
        return marked(head, int(length), digest)
    return name


def demangle_here(name: str) -> str:
    try:
        return cut(cxxfilt.demangle(name))
    except cxxfilt.Error:
        return name


# How a child ended: every name answered; the budget ran out; a name stopped it (its limit, a
# crash); it never said it was ready (no interpreter, no cxxfilt).
DONE, OUT_OF_TIME, STOPPED, BROKEN = "done", "out of time", "stopped", "broken"


def _feed(pipe, names: list[str]) -> None:
    try:
        with pipe:
            pipe.write("".join(f"{name}\n" for name in names).encode())
    except OSError:  # the child ended (a limit) before it read them all
        pass


def run_child(names: list[str], budget: Budget) -> tuple[list[bytes], str]:
    """One child's answers (CHILD_SOURCE) to the first of `names`, and how it ended."""
    try:
        child = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-c",
                CHILD_SOURCE,
                *map(str, (CHILD_MEMORY, NAME_CPU_SECONDS, DEMANGLED_MAX_CHARS, UNLIMITED_OPTIONS)),
                unlimited_library(),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return [], BROKEN
    feeder = threading.Thread(target=_feed, args=(child.stdin, names), daemon=True)
    feeder.start()
    lines: list[bytes] = []
    buffer = bytearray()
    ready = False
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(child.stdout, selectors.EVENT_READ)
            while len(lines) < len(names):
                left = budget.left()
                if not left or not selector.select(left):
                    return lines, OUT_OF_TIME
                chunk = os.read(child.stdout.fileno(), 1 << 16)
                if not chunk:  # the child ended
                    return lines, STOPPED if ready else BROKEN
                buffer += chunk
                *complete, rest = bytes(buffer).split(b"\n")
                buffer = bytearray(rest)
                if complete and not ready:
                    ready = complete.pop(0) == b"ready"
                    if not ready:
                        return [], BROKEN
                lines.extend(complete)
        return lines[: len(names)], DONE
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        feeder.join(1)


def demangle_in_child(names: list[str], budget: Budget) -> dict[str, str | None]:
    """`names` demangled (and cut) in child processes with limits, while `budget` lasts: None
    for a name that exhausted a limit; the names the budget left untried are absent."""
    results: dict[str, str | None] = {}
    pending = list(names)
    # A spent budget starts no child: a page that demangles row by row pays for one process,
    # not one a row, once its budget is gone.
    while pending and budget.left():
        lines, ended = run_child(pending, budget)
        for name, line in zip(pending, lines, strict=False):
            results[name] = child_answer(line, name)
        pending = pending[len(lines) :]
        if ended != STOPPED or not pending:
            break
        # The child answered the names before this one; this one stopped it: it keeps its
        # mangled name, and a new child reads the rest.
        results[pending.pop(0)] = None
    return results


def needs_demangling(name: str) -> bool:
    """An Itanium symbol the demangler can be handed: ASCII, one line (the child reads lines)."""
    return name.startswith("_Z") and name.isascii() and "\n" not in name and "\r" not in name


# What the cache holds for a name that exhausted a limit (a demangled name is never empty).
LIMITED = ""


def demangle_names(names: Iterable[str], budget: Budget) -> dict[str, str | None]:
    """Each name demangled (cut past DEMANGLED_MAX_CHARS), as it is when it is no symbol, or None
    where a limit or `budget` ran out first: the name is then kept mangled and marked. What
    ingest stores (`KernelName.demangled`)."""
    results: dict[str, str | None] = {}
    for_child: list[str] = []
    for name in dict.fromkeys(names):
        if not needs_demangling(name):
            results[name] = name
        elif (known := cache.get(name)) is not None:
            results[name] = known or None
        elif len(name) <= RECURSION_LIMITED_CHARS and demangled_length_bound(name) <= IN_PROCESS_BOUND:
            results[name] = demangle_here(name)
            cache.put(name, results[name])
        else:
            for_child.append(name)
    # The shortest first: the names most likely to be real and cheap come before the budget ends.
    for_child.sort(key=len)
    answered: dict[str, str | None] = {}
    if for_child:
        with budget.spending():
            answered = demangle_in_child(for_child, budget)
    for name in for_child:
        results[name] = answered.get(name)
        if name in answered:  # a name the budget left untried may be tried again
            cache.put(name, answered[name] or LIMITED)
    return results


def demangle_all(
    names: Iterable[str], *, stored: dict[str, str | None] | None = None, budget: Budget | None = None
) -> dict[str, str]:
    """Each name as a page shows it: demangled, or as it is (no symbol, or kept mangled).

    `stored`: the names' texts as ingest stored them (`KernelName.demangled`), taken as they
    are; None for a name stored before there was one. The others are demangled within
    `budget` (REQUEST_BUDGET_SECONDS by default): a request's demangling is bounded whatever
    names it meets.
    """
    stored = stored or {}
    results: dict[str, str] = {}
    rest: list[str] = []
    for name in dict.fromkeys(names):
        if (text := stored.get(name)) is not None:
            results[name] = text
            # Kept for the request's later `demangle(name)`s (a chart's labels) and the next.
            if needs_demangling(name):
                cache.put(name, text)
        else:
            rest.append(name)
    if rest:
        demangled = demangle_names(rest, budget or Budget(REQUEST_BUDGET_SECONDS))
        results.update((name, text if text is not None else name) for name, text in demangled.items())
    return results


def demangle(name: str) -> str:
    """`name` demangled when it is an Itanium C++ symbol (`_Z...`), else `name` unchanged.

    A name the demangler cannot read (truncated by a tracer, or not a real symbol), one whose
    demangling exceeds the child's limits or the budget, or a machine without libstdc++, also
    gives `name` back: a display name never fails a request. At most DEMANGLED_MAX_CHARS and a marker.
    """
    return demangle_all((name,))[name]
