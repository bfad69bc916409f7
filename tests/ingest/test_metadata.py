"""metadata.json read against the upload contract: pure functions, no S3, no database."""

import pytest

from ingest.metadata import (
    MetadataError,
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
    ("arch", "config", "derived"),
    [
        ("sm_90", None, ("sm_90", "SM90_H100")),
        (None, "SM80_A100", ("sm_80", "SM80_A100")),
        (None, "SM7_QV100", ("sm_70", "SM7_QV100")),
        ("sm_89", None, ("sm_89", None)),
        ("sm_86", "SM90_H100", ("sm_86", "SM90_H100")),
    ],
)
def test_arch_and_simulator_config_fill_each_other_in(arch, config, derived):
    assert derive_arch_and_config(arch, config) == derived


def test_unreadable_metadata_clears_what_it_described():
    fields = run_fields(None, {"timing.csv"}, "sample__x")
    assert fields["metadata_json"] is None
    assert fields["model"] is None and fields["layers"] == []
    assert (fields["has_real_timing"], fields["has_step_timeline"], fields["sample"]) == (True, False, True)
