"""Kernel names as a person reads them: C++ symbols demangled, everything else as it is.

NVBit reports a kernel by its symbol: PyTorch, vLLM and FlashAttention kernels come mangled
(`_ZN5flash24flash_fwd_splitkv_kernelI...`), cuBLAS's own kernels (`sm90_xmma_gemm_...`,
`nvjet_...`) do not. Demangling goes through `cxxfilt`, which calls libstdc++'s
`__cxa_demangle`, the demangler the compilers' own tools use, rather than a parser of our own.

A trace holds a few hundred distinct names, so each is demangled once per process (the cache)
and the per-trace cost is that of the distinct names, never that of the launches.
"""

from functools import lru_cache

import cxxfilt

# Distinct kernel names across every trace the process reads: a few thousand at most.
DEMANGLE_CACHE_SIZE = 16384


@lru_cache(maxsize=DEMANGLE_CACHE_SIZE)
def demangle(name: str) -> str:
    """`name` demangled when it is an Itanium C++ symbol (`_Z...`), else `name` unchanged.

    A name the demangler cannot read (truncated by a tracer, or not a real symbol), or a
    machine without libstdc++, also gives `name` back: a display name never fails a request.
    """
    if not name.startswith("_Z"):
        return name
    try:
        return cxxfilt.demangle(name)
    except cxxfilt.Error:
        return name
