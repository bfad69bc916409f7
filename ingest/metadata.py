"""What a run's `metadata.json` says, read strictly: pure functions, no S3, no database.

The upload contract (docs/trace-a-workload.md): `status` "ok" or the profiler's failure,
`files` the keys the upload is complete with, and the run's description that the API serves
(`model`, `layers`, `source_gpu`, `trace_gpu_arch`, `suggested_sim_config`).
"""

import json
import math
import re
from dataclasses import dataclass

from cascade_client import sass as sass_numbers

from traces.storable_text import unstorable_character

METADATA_NAME = "metadata.json"
TIMELINE_NAME = "timeline.json"
TIMING_NAME = "timing.csv"
METADATA_STRINGS = ("model", "source_gpu", "trace_gpu_arch", "suggested_sim_config")

# The GPUs upstream Accel-Sim has a tested config for (docs/formats.md#metadatajson has the
# sources), by the name CUDA and nvidia-smi give them (`source_gpu`, less "NVIDIA"/"GeForce"/
# "Tesla", upper case): (name pattern, the config, the GPU's SASS version). This only NAMES the
# config a run of that GPU suggests, as Accel-Sim's maintainers ask (simulate a trace with the
# config of the GPU it was traced on); what a simulator tree runs is read from the tree
# (cascade_client.accel_sim), never from here.
GPU_CONFIGS = (
    (re.compile(r"H100(?:[ -].{0,80})?"), "SM90_H100", 90),  # accel-sim-framework 553 (2.0), h100-test
    (re.compile(r"A100(?:[ -].{0,80})?"), "SM80_A100", 80),  # accel-sim-framework 443, gpgpu-sim 120/129
    (re.compile(r"RTX 3070"), "SM86_RTX3070", 86),
    (re.compile(r"RTX 2060 SUPER"), "SM75_RTX2060_S", 75),
    (re.compile(r"RTX 2060"), "SM75_RTX2060", 75),
    (re.compile(r"TITAN V"), "SM7_TITANV", 70),
    (re.compile(r"QUADRO GV100"), "SM7_QV100", 70),
    (re.compile(r"TITAN X \(PASCAL\)"), "SM6_TITANX", 61),
    (re.compile(r"GTX TITAN"), "SM3_KEPLER_TITAN", 35),
)
GPU_NAME_NOISE = re.compile(r"\b(?:NVIDIA|GEFORCE|TESLA)\b")


# Integers are kept as written, of any size up to this many digits (CPython's own limit for
# converting is 4,300, with a message that would puzzle a user).
MAX_INTEGER_DIGITS = 100


@dataclass(frozen=True)
class MetadataLimits:
    """What one run's metadata.json may put into every user's responses (settings CASCADE_METADATA_*).

    The defaults hold real runs with room to spare: a million-launch run's metadata.json
    lists a few thousand files (well under a megabyte).
    """

    max_bytes: int = 8 * 1024**2
    max_depth: int = 32
    max_string: int = 256
    max_layers: int = 1000


class MetadataError(ValueError):
    """metadata.json breaks the upload contract; the message says how."""


def parse_metadata(raw: bytes, limits: MetadataLimits = MetadataLimits()) -> dict:
    """metadata.json's object, read strictly and checked against the contract and `limits`.

    Strict: a key given twice, a number JSON cannot hold (NaN, Infinity, 1e999), an
    integer of more than MAX_INTEGER_DIGITS digits and a character the database cannot store
    (NUL, an unpaired surrogate: metadata.json is stored whole) are errors, never silently resolved.
    """
    if len(raw) > limits.max_bytes:
        raise MetadataError(
            f"metadata.json is {len(raw)} bytes, more than CASCADE_METADATA_MAX_BYTES ({limits.max_bytes})"
        )
    try:
        metadata = json.loads(
            raw,
            object_pairs_hook=unique_keys,
            parse_constant=reject_constant,
            parse_float=finite_float,
            parse_int=bounded_int,
        )
    except RecursionError:
        raise MetadataError(
            f"metadata.json is nested more than CASCADE_METADATA_MAX_DEPTH ({limits.max_depth}) levels deep"
        ) from None
    except ValueError as invalid:
        raise MetadataError(f"metadata.json is not valid JSON: {invalid}") from None
    if not isinstance(metadata, dict):
        raise MetadataError(f"metadata.json must be a JSON object, not {type(metadata).__name__}")
    if nesting_depth(metadata) > limits.max_depth:
        raise MetadataError(
            f"metadata.json is nested more than CASCADE_METADATA_MAX_DEPTH ({limits.max_depth}) levels deep"
        )
    unstorable = first_unstorable_string(metadata)
    if unstorable is not None:
        where, what = unstorable
        raise MetadataError(f"metadata.json: {where} holds {what}, which the database cannot store")
    for key in METADATA_STRINGS:
        value = metadata.get(key)
        if value is not None and not isinstance(value, str):
            raise MetadataError(f"metadata.json: {key!r} must be a string, not {type(value).__name__}")
        if isinstance(value, str) and len(value) > limits.max_string:
            raise MetadataError(
                f"metadata.json: {key!r} is {len(value)} characters long, more than "
                f"CASCADE_METADATA_MAX_STRING ({limits.max_string})"
            )
    layers = metadata.get("layers")
    if layers is not None and not (isinstance(layers, list) and all(isinstance(x, str) for x in layers)):
        raise MetadataError("metadata.json: 'layers' must be a list of strings")
    if layers is not None and len(layers) > limits.max_layers:
        raise MetadataError(
            f"metadata.json: 'layers' has {len(layers)} entries, more than "
            f"CASCADE_METADATA_MAX_LAYERS ({limits.max_layers})"
        )
    if layers is not None and any(len(layer) > limits.max_string for layer in layers):
        raise MetadataError(
            f"metadata.json: a 'layers' entry is longer than CASCADE_METADATA_MAX_STRING ({limits.max_string})"
        )
    listed_files(metadata)
    return metadata


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """An object whose keys are all different: a key given twice is an error, not "the last wins"."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"the key {twice[:80]!r} is given more than once")
    return result


def reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for JSON readers (it would be infinite)")
    return value


def bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise ValueError(f"an integer of {digits} digits (at most {MAX_INTEGER_DIGITS})")
    return int(text)


def nesting_depth(value) -> int:
    """How many objects and arrays deep `value` goes, without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in item if isinstance(child, dict | list))
    return deepest


def first_unstorable_string(metadata: dict) -> tuple[str, str] | None:
    """(where, what) of the first key or string, in document order, holding a character the
    database cannot store (traces.storable_text); None if every one can be stored. `where` names the
    field as a path (`'files'[2]['key']`), keys shown escaped."""
    stack: list[tuple[str, object]] = [("", metadata)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            what = unstorable_character(value)
            if what is not None:
                return path, what
        elif isinstance(value, dict):
            for key in value:
                what = unstorable_character(key)
                if what is not None:
                    return f"the key {key[:80]!r} {f'in {path}' if path else 'at the top level'}", what
            stack.extend(
                (f"{path}[{key[:80]!r}]" if path else repr(key[:80]), item)
                for key, item in reversed(value.items())
            )
        elif isinstance(value, list):
            stack.extend((f"{path}[{index}]", item) for index, item in reversed(list(enumerate(value))))
    return None


def listed_files(metadata: dict) -> list[dict]:
    """metadata.json's `files`, checked: the keys the upload is complete with ([] if none)."""
    listed = metadata.get("files")
    if listed is None:
        return []
    if not isinstance(listed, list) or not all(well_formed_listing(item) for item in listed):
        raise MetadataError('metadata.json: "files" must be a list of {"key": string, "bytes": integer}')
    return listed


def well_formed_listing(item) -> bool:
    return (
        isinstance(item, dict)
        and isinstance(item.get("key"), str)
        and isinstance(item.get("bytes"), int)
        and not isinstance(item.get("bytes"), bool)
    )


def missing_listed_files(listed: list[dict], files: list[dict], run_prefix: str) -> list[str]:
    """Keys that metadata.json lists (`{"key", "bytes"}`) but `files` does not hold at that size.

    A listed key is a full bucket key, or one relative to the run folder (`run_prefix`).
    """
    sizes = {item["key"]: item["bytes"] for item in files}
    missing = []
    for item in listed:
        key = item["key"] if item["key"] in sizes else run_prefix + item["key"].lstrip("/")
        if sizes.get(key) != item["bytes"]:
            missing.append(item["key"])
    return missing


def listed_keys(listed: list[dict], files: list[dict], run_prefix: str) -> set[str]:
    """The bucket keys of `files` that metadata.json lists (a full key, or one relative to the run)."""
    keys = {item["key"] for item in files}
    found = set()
    for item in listed:
        key = item["key"] if item["key"] in keys else run_prefix + item["key"].lstrip("/")
        if key in keys:
            found.add(key)
    return found


def failure(metadata: dict) -> str | None:
    """Why the profiler says the run failed, or None for `"status": "ok"`."""
    status = metadata.get("status")
    if status == "ok":
        return None
    if status is None:
        return 'metadata.json has no "status" (expected "ok")'
    if not isinstance(status, str):
        return f'metadata.json: "status" must be "ok" or the profiler\'s failure, not {type(status).__name__}'
    return f"profiler reported status '{status[:200]}' in metadata.json"


def run_fields(metadata: dict | None, names: set[str], run_id: str) -> dict:
    """The trace's description from metadata.json and the run's file names (relative to its
    folder). With `metadata` None (unreadable), what it described is cleared."""
    metadata_json = None if metadata is None else encode_metadata(metadata)
    metadata = metadata or {}
    return {
        "metadata_json": metadata_json,
        "model": metadata.get("model"),
        "layers": metadata.get("layers") or [],
        "source_gpu": metadata.get("source_gpu"),
        "trace_gpu_arch": metadata.get("trace_gpu_arch"),
        "suggested_sim_config": metadata.get("suggested_sim_config"),
        "has_step_timeline": TIMELINE_NAME in names,
        "has_real_timing": TIMING_NAME in names,
    }


def encode_metadata(metadata: dict) -> str:
    """Compact JSON in metadata.json's key order, as the API returns it."""
    return json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)


def with_derived_arch_and_config(run: dict) -> dict:
    """`run` with its simulator config and arch filled in where metadata.json left them out
    (for a trace that is parsed: a failed run keeps what its metadata.json said)."""
    arch, config = derive_arch_and_config(
        run["trace_gpu_arch"], run["suggested_sim_config"], run.get("source_gpu")
    )
    return {**run, "trace_gpu_arch": arch, "suggested_sim_config": config}


def gpu_config(source_gpu: str | None) -> tuple[str, int] | None:
    """(config, SASS version) of the GPU a run was traced on, where Accel-Sim has a tested config
    for it (GPU_CONFIGS); None for another GPU or none."""
    name = " ".join(GPU_NAME_NOISE.sub(" ", (source_gpu or "").upper()).split())
    return next(((config, sass) for pattern, config, sass in GPU_CONFIGS if pattern.fullmatch(name)), None)


def derive_arch_and_config(
    arch: str | None, config: str | None, source_gpu: str | None = None
) -> tuple[str | None, str | None]:
    """The config metadata.json names, else the config of the GPU the run was traced on
    (`gpu_config`), else none: never one guessed from the arch alone (an `sm_80` run may be an
    A30's). An arch left out comes from the config (its GPU's, or its `SMxx_` name's number:
    cascade_client.sass), else from the GPU."""
    by_gpu = gpu_config(source_gpu)
    if not config and by_gpu is not None:
        config = by_gpu[0]
    if not arch and config:
        known = next((sass for _, name, sass in GPU_CONFIGS if name == config.upper()), None)
        number = known or sass_numbers.config_number(config)
        arch = None if number is None else f"sm_{number}"
    if not arch and by_gpu is not None:
        arch = f"sm_{by_gpu[1]}"
    return arch, config
