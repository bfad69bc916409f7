"""SASS versions and the GPU generations Accel-Sim's configs model: pure functions, no I/O.

A trace's SASS version is the `-binary version = N` of its headers, or its `trace_gpu_arch`
(`sm_75` -> 75). A config `SMxx_*` models one GPU generation, read from its name as the sweeps
contract says (Accel-Sim's maintainers ask that a trace run on the config of its own GPU):
`SM6_*` 60-69, `SM7_*` 70-72, `SM75_*` 75, `SM8x_*` (SM80, SM86, ...) 80-87, `SM89_*` 89,
`SM90_*` 90-99, `SM10x_*` 100-109, and so on by tens. The name says the generation; what a
simulator tree actually runs is read from the tree (`accel_sim.tree_sass_versions`).

Shared by the client (`cascade simulate`, `cascade worker`) and the server (sweep pairing): no
Django here.
"""

import re

# Generations whose versions do not fill their tens: Volta 70-72 and Turing 75 share the 7x;
# Ampere 80-87 and Ada 89 the 8x. Any other generation is its tens (6x, 9x, 10x, 12x, ...).
SPLIT_GENERATIONS = ((70, 72), (75, 75), (80, 87), (89, 89))
CONFIG_NUMBER = re.compile(r"SM(\d{1,3})_", re.IGNORECASE)
ARCH = re.compile(r"(?:sm|compute)_?(\d{1,3})[a-z]?")


def generation(version: int) -> range:
    """The SASS versions of `version`'s generation: 86 -> 80-87, 75 -> 75, 90 -> 90-99."""
    for first, last in SPLIT_GENERATIONS:
        if first <= version <= last:
            return range(first, last + 1)
    tens = version // 10 * 10
    return range(tens, tens + 10)


def config_number(config: str) -> int | None:
    """The SASS number a config's name gives: 86 for `SM86_RTX3070`, 70 for `SM7_QV100` (a
    one-digit `SMx_` is its generation's first version), None for a name without `SMxx_`."""
    match = CONFIG_NUMBER.match(config.strip())
    if match is None:
        return None
    digits = match.group(1)
    return int(digits) * 10 if len(digits) == 1 else int(digits)


def config_generation(config: str) -> range | None:
    """The SASS versions the config `SMxx_*` models by its name (the contract's rule), None for
    a name without `SMxx_`."""
    number = config_number(config)
    return None if number is None else generation(number)


def config_models(config: str, version: int) -> bool | None:
    """Whether the config models SASS `version`'s generation; None when its name does not say."""
    models = config_generation(config)
    return None if models is None else version in models


def arch_version(trace_gpu_arch: str | None) -> int | None:
    """75 for `sm_75` (or `sm75`, `sm_90a`, `compute_80`), None when the trace does not say."""
    match = ARCH.fullmatch((trace_gpu_arch or "").strip().lower())
    return int(match.group(1)) if match else None


def nearest_config(wanted: str, configs: list[str]) -> str | None:
    """Of `configs`, the one nearest `wanted`: the same generation first, then the nearest SM
    number (ties to the lower, then by name); None when no config has an `SMxx_` number and
    none is `wanted` itself."""
    if wanted in configs:
        return wanted
    number = config_number(wanted)
    numbered = [(config_number(c), c) for c in configs]
    numbered = [(n, c) for n, c in numbered if n is not None]
    if number is None or not numbered:
        return None
    same = generation(number)
    return min(numbered, key=lambda nc: (nc[0] not in same, abs(nc[0] - number), nc[0], nc[1]))[1]
