"""`GET /api/traces/{trace_id}/selection`: a trace's launches grouped by the work they do, each
group with the launch to simulate for it and its weight.

Every expected answer is computed here, from the rule as docs/api.md states it, over the JSON
detail's kernels (`expected_selection`): on the shipped OPT-125m H100 sample ingested from the
bucket as any run is, and on launches hypothesis draws.
"""

import json
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import passes
from tests.helpers import content, kernel_dict, store_kernels
from tools.upload import upload_run_folder
from traces.models import Step, Trace, TraceState

REPO = Path(__file__).resolve().parents[2]
SAMPLE = "sample__facebook_opt-125m__h100-e2e"
# docs/api.md: a count joins a group up to 1.2 times the group's smallest.
TOLERANCE = Fraction(1, 5)


# --- the rule, written from docs/api.md ------------------------------------------------------------


def expected_selection(kernels: list[dict], cover: Fraction = Fraction(1)) -> dict:
    """The groups the documented rule makes of `kernels` (the detail's, in its order)."""
    order = {id(kernel): position for position, kernel in enumerate(kernels)}
    shapes = defaultdict(list)
    for kernel in kernels:
        shapes[(kernel["name"], tuple(kernel["grid_dim"]), tuple(kernel["block_dim"]))].append(kernel)
    groups = []
    for (name, grid, block), launches in shapes.items():
        counted = sorted(
            (k for k in launches if k["total_insts"] is not None), key=lambda k: k["total_insts"]
        )
        runs = []
        for kernel in counted:
            if runs and kernel["total_insts"] <= runs[-1][0]["total_insts"] * (1 + TOLERANCE):
                runs[-1].append(kernel)
            else:
                runs.append([kernel])
        uncounted = [k for k in launches if k["total_insts"] is None]
        if uncounted:
            runs.append(uncounted)
        for members in runs:
            insts = [k["total_insts"] for k in members]
            has_counts = insts[0] is not None
            median = sorted(insts)[(len(insts) - 1) // 2] if has_counts else None
            candidates = [k for k in members if k["traced"]] or members
            representative = min(
                candidates,
                key=lambda k: (abs(k["total_insts"] - median) if has_counts else 0, order[id(k)]),
            )
            times = [k["duration_ns"] for k in members if k["duration_ns"] is not None]
            groups.append(
                {
                    "name": name,
                    "grid": list(grid),
                    "block": list(block),
                    "count": len(members),
                    "total_insts": sum(insts) if has_counts else None,
                    "duration_ns": sum(times) if times else None,
                    "representative": representative,
                    "members": sorted(members, key=lambda k: order[id(k)]),
                    "low": min(insts) if has_counts else None,
                }
            )
    total_time = sum(g["duration_ns"] or 0 for g in groups)
    total_insts = sum(g["total_insts"] or 0 for g in groups)
    if any(g["duration_ns"] is not None for g in groups) and total_time > 0:
        basis, total, weight = "time", total_time, lambda g: g["duration_ns"] or 0
    elif total_insts > 0:
        basis, total, weight = "insts", total_insts, lambda g: g["total_insts"] or 0
    else:
        basis, total, weight = "launches", len(kernels), lambda g: g["count"]
    groups.sort(key=lambda g: (-weight(g), g["name"], g["grid"], g["block"], g["low"] is None, g["low"] or 0))
    kept, reached = [], 0
    for group in groups:
        if cover < 1 and kept and reached >= cover * total:
            break
        kept.append(group)
        reached += weight(group)
    for group in kept:
        group["share"] = weight(group) / total if total else 0.0
    return {
        "launches": len(kernels),
        "basis": basis,
        "groups": kept,
        "covered": reached / total if total else 0,
    }


def launch_key(kernel: dict) -> dict:
    key = {"ctx": kernel["ctx"], "kernel_id": kernel["kernel_id"]}
    if "device_id" in kernel:
        key["device_id"] = kernel["device_id"]
    return key


def assert_matches(answer: dict, expected: dict) -> None:
    assert answer["launches"] == expected["launches"]
    assert answer["basis"] == expected["basis"]
    assert answer["covered"] == pytest.approx(expected["covered"])
    assert len(answer["groups"]) == len(expected["groups"])
    for got, want in zip(answer["groups"], expected["groups"], strict=True):
        assert (got["name"], got["grid"], got["block"]) == (want["name"], want["grid"], want["block"])
        assert (got["count"], got["total_insts"], got["duration_ns"]) == (
            want["count"],
            want["total_insts"],
            want["duration_ns"],
        )
        assert got["share"] == pytest.approx(want["share"])
        rep = want["representative"]
        assert got["representative"] == {
            **launch_key(rep),
            "trace_file": rep["trace_file"],
            "traced": rep["traced"],
        }
        assert got["members"] == [launch_key(k) for k in want["members"]]


# --- the sample, ingested from the bucket -----------------------------------------------------------


@pytest.fixture
def sample(s3, db) -> dict:
    """The OPT-125m H100 sample uploaded and ingested as the profiler's runs are; its detail."""
    upload_run_folder(REPO / "samples" / SAMPLE, SAMPLE, skip_unchanged=False)
    passes.poll_bucket()
    trace = Trace.objects.get(pk=SAMPLE)
    assert trace.state == TraceState.READY, trace.error
    return trace


def detail(api, trace_id: str) -> dict:
    response = api.get(f"/api/traces/{trace_id}", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return json.loads(content(response))


def selection(api, trace_id: str, **params) -> dict:
    response = api.get(f"/api/traces/{trace_id}/selection", params, HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content[:300]
    return json.loads(content(response))


def test_the_samples_groups_are_the_rules_and_weigh_the_whole_run(api, sample):
    kernels = detail(api, SAMPLE)["kernels"]
    answer = selection(api, SAMPLE, by="unique")
    assert answer["trace_id"] == SAMPLE and answer["by"] == "unique" and answer["step"] is None
    assert (answer["cover"], answer["tolerance"]) == (1.0, 0.2)
    assert_matches(answer, expected_selection(kernels))
    # The run has measured times: shares are of time, and every launch is in exactly one group.
    assert answer["basis"] == "time" and answer["covered"] == pytest.approx(1.0)
    assert sum(group["count"] for group in answer["groups"]) == answer["launches"] == len(kernels) == 700
    members = [(m["ctx"], m["kernel_id"]) for group in answer["groups"] for m in group["members"]]
    assert sorted(members) == sorted((k["ctx"], k["kernel_id"]) for k in kernels)
    # Fewer groups than launches: the run repeats its layers' kernels.
    assert len(answer["groups"]) < len(kernels) / 5
    shares = [group["share"] for group in answer["groups"]]
    assert shares == sorted(shares, reverse=True)


def test_the_samples_one_kernel_with_two_kinds_of_work_is_two_groups(api, sample):
    """index_elementwise_kernel on a (12,1,1) grid runs 426 instructions once and 15.9 million
    once (the sample's prefill context): the same name and shape, not the same work."""
    answer = selection(api, SAMPLE)
    kernels = detail(api, SAMPLE)["kernels"]
    ctx = kernels[0]["ctx"]
    counts = sorted(
        k["total_insts"]
        for k in kernels
        if "index_elementwise_kernel" in k["name"] and k["grid_dim"] == [12, 1, 1] and k["ctx"] == ctx
    )
    assert counts[0] * 1000 < counts[-1]
    found = [
        g
        for g in answer["groups"]
        if "index_elementwise_kernel" in g["name"] and g["grid"] == [12, 1, 1] and g["count"] == 1
    ]
    assert {g["total_insts"] for g in found} >= {counts[0]}


def test_cover_keeps_the_fewest_largest_groups_that_reach_it(api, sample):
    kernels = detail(api, SAMPLE)["kernels"]
    every = selection(api, SAMPLE)
    for cover in ["0.9", "0.5", "0.001", "1"]:
        answer = selection(api, SAMPLE, cover=cover)
        expected = expected_selection(kernels, Fraction(cover))
        assert_matches(answer, expected)
        assert answer["cover"] == float(cover)
        assert answer["groups"] == every["groups"][: len(answer["groups"])]
        kept = answer["groups"]
        assert sum(g["share"] for g in kept) >= float(cover) - 1e-12
        assert sum(g["share"] for g in kept[:-1]) < float(cover)
    assert len(selection(api, SAMPLE, cover="0.5")["groups"]) < len(every["groups"])


def test_by_step_groups_one_steps_launches(api, sample):
    kernels = detail(api, SAMPLE)["kernels"]
    for step in ["step 0 (prefill)", "step 10 (decode)"]:
        answer = selection(api, SAMPLE, by="step", step=step)
        ours = [k for k in kernels if k["step"] == step]
        assert ours and answer["step"] == step and answer["by"] == "step"
        assert_matches(answer, expected_selection(ours))
        assert sum(g["count"] for g in answer["groups"]) == answer["launches"] == len(ours)


def test_members_can_be_left_out(api, sample):
    full = selection(api, SAMPLE)
    short = selection(api, SAMPLE, members="0")
    assert [{k: v for k, v in g.items() if k != "members"} for g in full["groups"]] == short["groups"]


def test_a_representative_is_traced_when_its_group_has_a_traced_launch(api, sample):
    kernels = detail(api, SAMPLE)["kernels"]
    traced = {(k["ctx"], k["kernel_id"]) for k in kernels if k["traced"]}
    answer = selection(api, SAMPLE)
    for group in answer["groups"]:
        members = {(m["ctx"], m["kernel_id"]) for m in group["members"]}
        rep = group["representative"]
        assert (rep["ctx"], rep["kernel_id"]) in members
        assert rep["traced"] == bool(members & traced)
        assert rep["traced"] == ((rep["ctx"], rep["kernel_id"]) in traced)


def test_a_large_answer_streams_compressed(api, sample, monkeypatch):

    import zstandard

    from traces import views

    monkeypatch.setattr(views, "STREAM_KERNELS_ABOVE", 10)
    response = api.get(f"/api/traces/{SAMPLE}/selection", HTTP_ACCEPT_ENCODING="zstd")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Encoding"] == "zstd"
    body = zstandard.ZstdDecompressor().decompressobj().decompress(b"".join(response.streaming_content))
    monkeypatch.setattr(views, "STREAM_KERNELS_ABOVE", 10**9)
    assert json.loads(body) == selection(api, SAMPLE)


# --- drawn launches -------------------------------------------------------------------------------

# Counts around the tolerance's edges (100 -> 120 joins, 121 does not), none, and zero.
COUNTS = st.sampled_from([None, 0, 1, 2, 99, 100, 101, 119, 120, 121, 144, 145, 5000, 6000, 6001])
launch_strategy = st.fixed_dictionaries(
    {
        "ctx": st.sampled_from(["0x1", "0x2"]),
        "name": st.sampled_from(["_Z1av", "_Z1bv"]),
        "grid": st.sampled_from([(1, 1, 1), (2, 1, 1)]),
        "block": st.sampled_from([(128, 1, 1)]),
        "insts": COUNTS,
        "traced": st.booleans(),
        "duration_ns": st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
        "step": st.sampled_from([0, 1, None]),
    }
)


def store(trace_id: str, launches: list[dict]) -> None:
    Trace.objects.create(id=trace_id, state=TraceState.READY, kernel_count=len(launches))
    Step.objects.bulk_create(
        Step(trace_id=trace_id, index=index, name=f"s{index}", first_kernel_id=1, last_kernel_id=1)
        for index in (0, 1)
    )
    next_id = defaultdict(int)
    rows = []
    for launch in launches:
        next_id[launch["ctx"]] += 1
        kernel_id = next_id[launch["ctx"]]
        rows.append(
            kernel_dict(
                kernel_id,
                ctx=launch["ctx"],
                name=launch["name"],
                grid=launch["grid"],
                block=launch["block"],
                insts=launch["insts"],
                traced=launch["traced"],
                step=launch["step"],
                duration_ns=launch["duration_ns"],
            )
        )
    store_kernels(trace_id, rows)


@pytest.fixture
def unthrottled(settings):
    """Three requests an example, sixty examples: past CASCADE_API_RATE on a fast machine."""
    settings.CASCADE_API_RATE = ""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    launches=st.lists(launch_strategy, min_size=1, max_size=30),
    cover=st.sampled_from(["1", "0.9", "0.5", "0.25"]),
    timed=st.booleans(),
)
def test_drawn_launches_are_grouped_by_the_rule(unthrottled, api, launches, cover, timed):
    if not timed:  # a run without timing.csv: shares of instructions (or launches)
        launches = [{**launch, "duration_ns": None} for launch in launches]
    with transaction.atomic():
        store("drawn", launches)
        kernels = detail(api, "drawn")["kernels"]
        answer = selection(api, "drawn", cover=cover)
        by_step = selection(api, "drawn", by="step", step="s1")
        transaction.set_rollback(True)
    assert_matches(answer, expected_selection(kernels, Fraction(cover)))
    if cover == "1":
        assert sum(g["count"] for g in answer["groups"]) == len(launches)
    ours = [k for k in kernels if k["step"] == "s1"]
    assert_matches(by_step, expected_selection(ours))
    assert sum(g["count"] for g in by_step["groups"]) == len(ours)


# --- errors ---------------------------------------------------------------------------------------


@pytest.fixture
def small(make_trace):
    trace = make_trace("small", state=TraceState.READY, kernel_count=1)
    Step.objects.create(trace=trace, index=0, name="step 0 (prefill)", first_kernel_id=1, last_kernel_id=1)
    store_kernels(
        "small", [kernel_dict(1, ctx="0x1", name="_Z1av", grid=(1, 1, 1), block=(1, 1, 1), insts=5, step=0)]
    )
    return trace


@pytest.mark.parametrize(
    ("params", "detail_starts"),
    [
        ({"by": "name"}, "by accepts one of unique, step; got 'name'."),
        ({"by": "step"}, "step accepts the name of one of the trace's steps, and by=step needs it."),
        (
            {"by": "step", "step": "step 9"},
            "step accepts the name of one of the trace's steps ('step 0 (prefill)')",
        ),
        ({"step": "step 0 (prefill)"}, "step is read with by=step only"),
        ({"cover": "0"}, "cover accepts a number greater than 0 and at most 1; got '0'."),
        ({"cover": "1.5"}, "cover accepts"),
        ({"cover": "-0.5"}, "cover accepts"),
        ({"cover": "nan"}, "cover accepts"),
        ({"cover": "inf"}, "cover accepts"),
        ({"cover": "ninety"}, "cover accepts"),
        ({"members": "maybe"}, "members accepts true or false"),
        ({"by": ""}, "by accepts one of unique, step; got ''."),
        ({"cover": ""}, "cover accepts"),
        ({"members": ""}, "members accepts"),
    ],
)
def test_bad_parameters_are_400s_as_the_lists_filters(api, small, params, detail_starts):
    response = api.get("/api/traces/small/selection", params)
    assert response.status_code == 400
    assert list(response.json()) == ["detail"]
    assert response.json()["detail"].startswith(detail_starts)


def test_good_parameters_of_the_small_trace(api, small):
    answer = selection(api, "small", by="step", step="step 0 (prefill)", cover="0.5", members="false")
    assert answer == {
        "trace_id": "small",
        "by": "step",
        "step": "step 0 (prefill)",
        "cover": 0.5,
        "tolerance": 0.2,
        "launches": 1,
        "basis": "insts",
        "covered": 1.0,
        "groups": [
            {
                "name": "_Z1av",
                "grid": [1, 1, 1],
                "block": [1, 1, 1],
                "count": 1,
                "total_insts": 5,
                "duration_ns": None,
                "share": 1.0,
                "representative": {
                    "ctx": "0x1",
                    "kernel_id": 1,
                    "trace_file": "kernel-1-ctx_0x1.trace.xz",
                    "traced": False,
                },
            }
        ],
    }


def test_a_trace_not_ready_is_a_409(api, make_trace):
    make_trace("arriving")
    response = api.get("/api/traces/arriving/selection")
    assert response.status_code == 409
    assert response.json() == {"detail": "trace arriving is uploading"}
