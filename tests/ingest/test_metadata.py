"""metadata.json read against the upload contract: pure functions, no S3, no database."""

import pytest
from cascade_client.sass import config_models

from ingest.metadata import (
    GPU_CONFIGS,
    MetadataError,
    MetadataLimits,
    derive_arch_and_config,
    failure,
    missing_listed_files,
    parse_metadata,
    run_fields,
)

RUN_PREFIX = "accelsim-traces/run/"
STORED = [
    {"key": "accelsim-traces/run/metadata.json", "bytes": 90, "etag": '"m"'},
    {"key": "accelsim-traces/run/traces/stats_ctx_0x1", "bytes": 700, "etag": '"s"'},
]


@pytest.mark.parametrize(
    ("listed", "missing"),
    [
        ([{"key": "accelsim-traces/run/traces/stats_ctx_0x1", "bytes": 700}], []),  # full key
        ([{"key": "traces/stats_ctx_0x1", "bytes": 700}], []),  # relative to the run folder
        ([{"key": "/traces/stats_ctx_0x1", "bytes": 700}], []),
        ([{"key": "traces/stats_ctx_0x1", "bytes": 699}], ["traces/stats_ctx_0x1"]),  # still growing
        ([{"key": "s_ctx_0x1", "bytes": 700}], ["s_ctx_0x1"]),  # a suffix, not a path
        (
            [{"key": "metadata.json", "bytes": 90}, {"key": "traces/stats_ctx_0x2", "bytes": 5}],
            ["traces/stats_ctx_0x2"],
        ),
    ],
)
def test_missing_listed_files(listed, missing):
    assert missing_listed_files(listed, STORED, RUN_PREFIX) == missing


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[1, 2]", "metadata.json must be a JSON object, not list"),
        (b'{"status": "ok", "x": NaN}', "metadata.json is not valid JSON: NaN is not a JSON value"),
        (b'{"model": 3}', "metadata.json: 'model' must be a string, not int"),
        (b'{"layers": "all"}', "metadata.json: 'layers' must be a list of strings"),
        (
            b'{"files": ["traces/a"]}',
            'metadata.json: "files" must be a list of {"key": string, "bytes": integer}',
        ),
        (b'{"files": [{"key": "a", "bytes": true}]}', 'metadata.json: "files" must be a list'),
    ],
)
def test_metadata_that_breaks_the_contract_says_how(raw, message):
    with pytest.raises(MetadataError) as problem:
        parse_metadata(raw)
    assert str(problem.value).startswith(message)


def test_big_integers_and_key_order_are_kept_as_written():
    raw = b'{"status": "ok", "seed": 123456789012345678901234567890, "a": 1}'
    assert run_fields(parse_metadata(raw), set(), "r")["metadata_json"] == (
        '{"status":"ok","seed":123456789012345678901234567890,"a":1}'
    )


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"status": "ok"}, None),
        ({}, 'metadata.json has no "status" (expected "ok")'),
        ({"status": "crashed"}, "profiler reported status 'crashed' in metadata.json"),
    ],
)
def test_failure(metadata, message):
    assert failure(metadata) == message


@pytest.mark.parametrize(
    ("arch", "config", "gpu", "derived"),
    [
        # The config metadata.json names is kept, whatever the GPU (issue 39) ...
        ("sm_90", "SM90_H200", "NVIDIA H100 80GB HBM3", ("sm_90", "SM90_H200")),
        ("sm_86", "SM90_H100", None, ("sm_86", "SM90_H100")),
        # ... else the config of the GPU it was traced on, as CUDA names the GPU (the samples'
        # source_gpu; the configs as upstream Accel-Sim names them: docs/formats.md) ...
        ("sm_90", None, "NVIDIA H100 80GB HBM3", ("sm_90", "SM90_H100")),
        ("sm_80", None, "NVIDIA A100-SXM4-80GB", ("sm_80", "SM80_A100")),
        ("sm_80", None, "NVIDIA A100 80GB PCIe", ("sm_80", "SM80_A100")),
        ("sm_75", None, "NVIDIA GeForce RTX 2060", ("sm_75", "SM75_RTX2060")),
        ("sm_75", None, "NVIDIA GeForce RTX 2060 SUPER", ("sm_75", "SM75_RTX2060_S")),
        ("sm_86", None, "NVIDIA GeForce RTX 3070", ("sm_86", "SM86_RTX3070")),
        ("sm_70", None, "NVIDIA TITAN V", ("sm_70", "SM7_TITANV")),
        (None, None, "NVIDIA A100-PCIE-40GB", ("sm_80", "SM80_A100")),
        # ... else none: not a guess from the arch (an sm_80 run may be an A30's, an sm_86 one
        # an RTX 3090's), nor the nearest GPU's.
        ("sm_80", None, "NVIDIA A30", ("sm_80", None)),
        ("sm_86", None, "NVIDIA GeForce RTX 3070 Ti", ("sm_86", None)),
        ("sm_86", None, "NVIDIA GeForce RTX 3090", ("sm_86", None)),
        ("sm_89", None, "NVIDIA GeForce RTX 4090", ("sm_89", None)),
        ("sm_80", None, None, ("sm_80", None)),
        ("sm_75", None, None, ("sm_75", None)),
        # The arch, when metadata.json leaves it out, is read off the config's name (the
        # sweeps' generation rule) ...
        (None, "SM80_A100", None, ("sm_80", "SM80_A100")),
        (None, "SM90_H100", None, ("sm_90", "SM90_H100")),
        (None, "SM7_QV100", None, ("sm_70", "SM7_QV100")),
        (None, "SM75_RTX2060_S", None, ("sm_75", "SM75_RTX2060_S")),
        (None, "SM86_RTX3070", None, ("sm_86", "SM86_RTX3070")),
        # ... or is the GPU's, where the name is not its SASS version: the Kepler TITAN is SASS
        # 35 (gpgpu-sim 667834c SM3_KEPLER_TITAN/gpgpusim.config: compute capability 3.5), the
        # Pascal TITAN X 61 (capability 6.1).
        (None, "SM3_KEPLER_TITAN", None, ("sm_35", "SM3_KEPLER_TITAN")),
        (None, "SM6_TITANX", None, ("sm_61", "SM6_TITANX")),
    ],
)
def test_suggested_config_is_the_runs_own_else_its_gpus(arch, config, gpu, derived):
    assert derive_arch_and_config(arch, config, gpu) == derived


@pytest.mark.parametrize(("pattern", "config", "version"), GPU_CONFIGS)
def test_each_gpus_config_models_its_sass_generation(pattern, config, version):
    assert config_models(config, version) is True


def test_unreadable_metadata_clears_what_it_described():
    fields = run_fields(None, {"timing.csv"}, "sample__x")
    assert fields["metadata_json"] is None
    assert fields["model"] is None and fields["layers"] == []
    assert (fields["has_real_timing"], fields["has_step_timeline"]) == (True, False)
    assert "sample" not in fields  # an operator's mark (load_samples), never the run's name


# --- Read strictly, within bounds ---------------------------------

LIMITS = MetadataLimits(max_bytes=300_000, max_depth=8, max_string=20, max_layers=3)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            b'{"status": "failed", "status": "ok"}',
            "metadata.json is not valid JSON: the key 'status' is given more than once",
        ),
        (b'{"status": "ok", "x": 1e999}', "metadata.json is not valid JSON: the number 1e999 is too large"),
        (
            b'{"status": "ok", "x": -Infinity}',
            "metadata.json is not valid JSON: -Infinity is not a JSON value",
        ),
        (
            b'{"status": "ok", "x": ' + b"9" * 5000 + b"}",
            "metadata.json is not valid JSON: an integer of 5000 digits",
        ),
        (
            b'{"status": "ok", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "metadata.json is nested more than CASCADE_METADATA_MAX_DEPTH (8)",
        ),
        (
            b'{"status": "ok", "x": ' + b"[" * 9 + b"]" * 9 + b"}",
            "metadata.json is nested more than CASCADE_METADATA_MAX_DEPTH (8)",
        ),
        (
            b'{"status": "ok", "model": "' + b"m" * 21 + b'"}',
            "metadata.json: 'model' is 21 characters long, more than CASCADE_METADATA_MAX_STRING (20)",
        ),
        (
            b'{"status": "ok", "layers": ["a", "b", "c", "d"]}',
            "metadata.json: 'layers' has 4 entries, more than CASCADE_METADATA_MAX_LAYERS (3)",
        ),
        (
            b'{"status": "ok", "layers": ["' + b"l" * 21 + b'"]}',
            "metadata.json: a 'layers' entry is longer than CASCADE_METADATA_MAX_STRING (20)",
        ),
        (
            b'{"status": "ok", "pad": "' + b"p" * 300_000 + b'"}',
            "metadata.json is 300027 bytes, more than CASCADE_METADATA_MAX_BYTES (300000)",
        ),
    ],
    ids=[
        "duplicate-key",
        "1e999",
        "infinity",
        "5000-digits",
        "100k-deep",
        "9-deep",
        "long-model",
        "many-layers",
        "long-layer",
        "too-big",
    ],
)
def test_metadata_is_read_strictly_and_within_bounds(raw, message):
    with pytest.raises(MetadataError) as problem:
        parse_metadata(raw, LIMITS)
    assert str(problem.value).startswith(message), str(problem.value)


def test_within_the_bounds_everything_is_kept():
    raw = b'{"status": "ok", "layers": ["a", "b", "c"], "model": "' + b"m" * 20 + b'", "n": [[[[[[[1]]]]]]]}'
    assert parse_metadata(raw, LIMITS)["n"] == [[[[[[[1]]]]]]]


# --- Characters the database cannot store -------------------------------
# PostgreSQL's text and jsonb refuse NUL; a surrogate alone is not a character and has no UTF-8.
# metadata.json is stored whole (`metadata_json`), so every key and string counts.


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            b'{"status": "ok", "model": "opt\\u0000"}',
            "metadata.json: 'model' holds a NUL character (\\u0000), which the database cannot store",
        ),
        (
            b'{"status": "ok", "layers": ["a", "b\\u0000"]}',
            "metadata.json: 'layers'[1] holds a NUL character (\\u0000), which the database cannot store",
        ),
        (
            b'{"status": "ok", "source_gpu": "\\ud800"}',
            "metadata.json: 'source_gpu' holds an unpaired surrogate (\\ud800), which is not a character, "
            "which the database cannot store",
        ),
        (
            # Raw UTF-8 bytes of a surrogate: Python's JSON reader lets them through as well.
            b'{"status": "ok", "notes": "\xed\xb0\x80"}',
            "metadata.json: 'notes' holds an unpaired surrogate (\\udc00), which is not a character, "
            "which the database cannot store",
        ),
        (
            b'{"status": "ok", "files": [{"key": "a", "bytes": 1}, {"key": "traces/\\u0000", "bytes": 2}]}',
            "metadata.json: 'files'[1]['key'] holds a NUL character (\\u0000), which the database cannot store",
        ),
        (
            b'{"status": "ok", "env": {"x": {"CUDA\\u0000": "1"}}}',
            "metadata.json: the key 'CUDA\\x00' in 'env'['x'] holds a NUL character (\\u0000), "
            "which the database cannot store",
        ),
        (
            b'{"status": "ok", "\\u0000": 1}',
            "metadata.json: the key '\\x00' at the top level holds a NUL character (\\u0000), "
            "which the database cannot store",
        ),
        (
            # The profiler's failure is written into the trace's error: checked like the rest.
            b'{"status": "oom\\u0000"}',
            "metadata.json: 'status' holds a NUL character (\\u0000), which the database cannot store",
        ),
    ],
    ids=["model", "layer", "surrogate", "utf8-surrogate", "listed-key", "nested-key", "top-key", "status"],
)
def test_a_character_the_database_cannot_store_is_refused_naming_the_field(raw, message):
    with pytest.raises(MetadataError) as problem:
        parse_metadata(raw)
    assert str(problem.value) == message
    assert "\x00" not in str(problem.value)
    str(problem.value).encode("utf-8")  # the error itself is stored: it must be storable


def test_escaped_surrogate_pairs_and_other_control_characters_are_kept():
    metadata = parse_metadata(b'{"status": "ok", "model": "\\ud83d\\ude00 \\u0001\\u2028"}')
    assert metadata["model"] == "\U0001f600 \x01\u2028"
