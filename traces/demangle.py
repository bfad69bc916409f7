"""Kernel names as a person reads them: C++ symbols demangled, everything else as it is.

NVBit reports a kernel by its symbol: PyTorch, vLLM and FlashAttention kernels come mangled
(`_ZN5flash24flash_fwd_splitkv_kernelI...`), cuBLAS's own kernels (`sm90_xmma_gemm_...`,
`nvjet_...`) do not. Demangling goes through `cxxfilt`, which calls libstdc++'s
`__cxa_demangle`, the demangler the compilers' own tools use, rather than a parser of our own.

Kernel names come from whoever uploads a run, and a symbol's substitutions (`S1_`, `T_`) copy
earlier parts of it: each can double the demangled text, so a symbol of 270 bytes can
demangle to hundreds of megabytes (issue 18, finding 10). `__cxa_demangle` takes no limit and
cannot be stopped once called, so:

- a symbol whose demangled text is small whatever it holds (its length times the most a
  character prints, doubled per reference: `demangled_length_bound`) is demangled here;
- any other is demangled in a child process with a memory and time limit, all of a request's
  new names in one child; one that runs out of either keeps its mangled name;
- a demangled name longer than DEMANGLED_MAX_CHARS is cut there, with a marker that says so
  and tells names apart that share their first characters (`?by=demangled` merges only names
  that demangle alike in full).

Each name is demangled once per process: the cache keeps the most recently used names up to
DEMANGLE_CACHE_BYTES, however long they are.
"""

import hashlib
import re
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable

import cxxfilt

# What a page or an answer shows of one demangled name, at most (real kernels' names, CUTLASS
# and FlashAttention templates included, stay well under it).
DEMANGLED_MAX_CHARS = 8192
# The cache's keys and values, in characters (kernel names are ASCII): a few thousand names.
DEMANGLE_CACHE_BYTES = 16 * 1024**2
# The most a mangled character prints before references copy anything: `Sd` prints
# std::basic_iostream<char, std::char_traits<char> > (25 a character), `y` unsigned long long.
PRINTED_PER_CHAR = 40
# A symbol whose bound is under this is demangled in this process: at worst a megabyte, once.
IN_PROCESS_BOUND = 1024**2
# What copies earlier text when printed: substitutions (S_, S0_...), template parameters
# (T_, T0_...), pack expansions (Dp). Matching more than these only makes the bound larger.
REFERENCE = re.compile(r"S[0-9A-Z]*_|T[0-9A-Z]*_|Dp")
# The child's limits: memory on top of what the interpreter takes, CPU seconds, and seconds of
# waiting for it. A demangler out of memory still walks the whole symbol (only its appends
# fail), so the CPU limit is what ends a hostile name: it costs that much once per process,
# then the cache answers. Real names take microseconds each.
CHILD_MEMORY = 128 * 1024**2
CHILD_CPU_SECONDS = 1
CHILD_WAIT_SECONDS = 10

# The child: reads names a line each, writes a line each as it goes (so that the names done
# before one that exhausts a limit are kept): `+<demangled>`, `~<length> <digest> <first
# DEMANGLED_MAX_CHARS>` for a longer one (the parent never holds more), or `-`.
CHILD_SOURCE = """
import hashlib, resource, sys
import cxxfilt
headroom, seconds, most = (int(value) for value in sys.argv[1:4])
try:
    with open("/proc/self/statm") as statm:
        used = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + headroom, used + headroom))
except (OSError, ValueError):
    pass  # no /proc (not Linux): the time limits still hold
resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    try:
        text = cxxfilt.demangleb(line.rstrip(b"\\n")).replace(b"\\n", b" ")
        if len(text) > most:
            digest = hashlib.blake2b(text, digest_size=6).hexdigest().encode()
            text = b"~%d %s %s" % (len(text), digest, text[:most])
        else:
            text = b"+" + text
    except (cxxfilt.Error, MemoryError):
        text = b"-"
    out.write(text + b"\\n")
    out.flush()
"""


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


def demangle_in_child(names: list[str]) -> dict[str, str]:
    """Each of `names` demangled (and cut) in child processes with limits; the mangled name for
    one that cannot be read or exhausts a limit."""
    results: dict[str, str] = {}
    pending = list(names)
    while pending:
        try:
            finished = subprocess.run(
                [
                    sys.executable,
                    "-I",
                    "-c",
                    CHILD_SOURCE,
                    *map(str, (CHILD_MEMORY, CHILD_CPU_SECONDS, DEMANGLED_MAX_CHARS)),
                ],
                input="".join(f"{name}\n" for name in pending).encode(),
                capture_output=True,
                timeout=CHILD_WAIT_SECONDS,
            )
        except subprocess.TimeoutExpired as timeout:
            finished = subprocess.CompletedProcess(timeout.cmd, -1, timeout.stdout or b"", b"")
        except OSError:  # no interpreter to start: every pending name stays mangled
            results.update((name, name) for name in pending)
            break
        if b"Traceback" in finished.stderr:  # a child that cannot demangle at all (no cxxfilt)
            results.update((name, name) for name in pending)
            break
        lines = finished.stdout.split(b"\n")[:-1]  # an unfinished last line is no answer
        for name, line in zip(pending, lines, strict=False):
            results[name] = child_answer(line, name)
        # The child answered the first len(lines) names; the next one stopped it (a limit, a
        # crash): it keeps its mangled name, and a new child reads the rest.
        done = len(lines)
        if done < len(pending):
            results[pending[done]] = pending[done]
            done += 1
        pending = pending[done:]
    return results


def needs_demangling(name: str) -> bool:
    """An Itanium symbol the demangler can be handed: ASCII, one line (the child reads lines)."""
    return name.startswith("_Z") and name.isascii() and "\n" not in name and "\r" not in name


def demangle_all(names: Iterable[str]) -> dict[str, str]:
    """Each name demangled as `demangle` does it; the names a child must read, in one child."""
    results: dict[str, str] = {}
    for_child: list[str] = []
    for name in dict.fromkeys(names):
        if not needs_demangling(name):
            results[name] = name
        elif (known := cache.get(name)) is not None:
            results[name] = known
        elif demangled_length_bound(name) <= IN_PROCESS_BOUND:
            results[name] = demangle_here(name)
            cache.put(name, results[name])
        else:
            for_child.append(name)
    if for_child:
        for name, text in demangle_in_child(for_child).items():
            results[name] = text
            cache.put(name, text)
    return results


def demangle(name: str) -> str:
    """`name` demangled when it is an Itanium C++ symbol (`_Z...`), else `name` unchanged.

    A name the demangler cannot read (truncated by a tracer, or not a real symbol), one whose
    demangling exceeds the child's limits, or a machine without libstdc++, also gives `name`
    back: a display name never fails a request. At most DEMANGLED_MAX_CHARS and a marker.
    """
    return demangle_all((name,))[name]
