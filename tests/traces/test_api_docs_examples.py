"""docs/api.md's JSON examples are the schema's (`traces.api_examples`, `simulations.api_examples`: one source), and they
have the live API's keys, order and types.

The live answers come from data seeded to match the examples: the demo trace's list and detail
answers equal their examples but for timestamps; every other route's answer has exactly the
example's keys in its order, each value of the example's type (null aside). A field added to a
shape (`traces.shapes`) and not to its example, or to the docs, fails here.
"""

import json
import re
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from cascade import api_docs
from cascade.api_docs import DOCS_EXAMPLES
from ingest import receivers, uploads
from simulations import api_examples as simulation_examples
from simulations import shapes as simulation_shapes
from simulations.serializers import SimulationCompleteRequestSerializer, SimulationUploadRequestSerializer
from tests.helpers import TEST_BUCKET, content, store_kernels, token_client
from tests.simulations.support import simulate
from tests.traces.support import assert_has_the_keys, response_validator
from traces import api_examples, shapes
from traces.api_examples import DEMO_METADATA, NULL_TOTALS_DETAIL
from traces.models import Step, Trace, TraceState

DOCS = Path(django_settings.BASE_DIR) / "docs" / "api.md"
SIMULATION = simulation_examples.SIMULATION_SUMMARY["name"]
# Each docs example's route, as the schema names it and as the seeded data answers it.
GETS = {
    "traces": ("/api/traces", "/api/traces"),
    "trace": ("/api/traces/{trace_id}", "/api/traces/demo"),
    "summary": ("/api/traces/{trace_id}/summary", "/api/traces/demo/summary"),
    "compare": ("/api/traces/{trace_id}/compare/{other_id}", "/api/traces/demo/compare/demo"),
    "selection": ("/api/traces/{trace_id}/selection", "/api/traces/demo/selection"),
    "files": ("/api/traces/{trace_id}/files", "/api/traces/demo/files"),
    "trace-simulations": ("/api/traces/{trace_id}/simulations", "/api/traces/demo/simulations"),
    "simulation": ("/api/traces/{trace_id}/simulations/{name}", f"/api/traces/demo/simulations/{SIMULATION}"),
    "simulations": ("/api/simulations", "/api/simulations"),
    "accuracy": ("/api/simulations/accuracy", "/api/simulations/accuracy"),
}
POSTS = {"upload": "upload-request", "complete": "complete-request"}
# Each answer's declaration (`traces.shapes`): a list's, of its items. The dicts of `/files` and
# of the upload's answers are built in ingest/: this is where their keys meet the declaration.
SHAPES = {
    "traces": shapes.TRACE_SUMMARY,
    "trace": shapes.TRACE_DETAIL,
    "summary": shapes.TRACE_ANALYSIS,
    "compare": shapes.TRACE_COMPARISON,
    "selection": shapes.SELECTION,
    "files": shapes.TRACE_FILES,
    "trace-simulations": simulation_shapes.SIMULATION_SUMMARY,
    "simulation": simulation_shapes.SIMULATION_DETAIL,
    "simulations": simulation_shapes.SIMULATION_LIST_ITEM,
    "accuracy": simulation_shapes.SIMULATION_ACCURACY,
    "upload": simulation_shapes.SIMULATION_UPLOAD,
    "complete": simulation_shapes.SIMULATION_COMPLETE,
}
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def docs_blocks() -> dict[str, object]:
    text = DOCS.read_text()
    return {block["name"]: json.loads(block["body"]) for block in api_docs.DOCS_BLOCK.finditer(text)}


def test_the_docs_examples_and_lists_of_keys_are_written_from_the_declarations():
    text = DOCS.read_text()
    assert api_docs.docs_with_examples(text) == text, "run `python -m cascade.api_docs`"
    assert docs_blocks() == DOCS_EXAMPLES
    assert text.count("```json") == len(DOCS_EXAMPLES), "every JSON example of docs/api.md is a marked one"
    listed = [keys["name"] for keys in api_docs.DOCS_KEY_LIST.finditer(text)]
    assert sorted(listed) == sorted(api_docs.DOCS_KEYS), "each list of keys is written once"


def test_the_manual_is_short():
    """Its own words, that is: the examples and lists of keys are written from the declarations
    and grow with each field added to them."""
    text = DOCS.read_text()
    written = api_docs.DOCS_BLOCK.sub(lambda block: block[1] + block[4], text)
    written = api_docs.DOCS_KEY_LIST.sub(lambda keys: keys[1], written)
    assert len(written.encode()) <= 13 * 1024


def test_each_example_conforms_to_the_schema(openapi):  # noqa: F811
    for name, (path, _) in GETS.items():
        response_validator(openapi, path, 200).validate(DOCS_EXAMPLES[name])
    assert SimulationUploadRequestSerializer(data=DOCS_EXAMPLES["upload-request"]).is_valid()
    assert SimulationCompleteRequestSerializer(data=DOCS_EXAMPLES["complete-request"]).is_valid()


def assert_declared(name: str, value) -> None:
    """An answer (or example) of `name` has its declaration's keys, each of a list's items too."""
    for index, item in enumerate(value if isinstance(value, list) else [value]):
        assert_has_the_keys(item, SHAPES[name], f"{name}[{index}]")


def test_each_docs_example_has_its_declarations_keys():
    assert set(SHAPES) == set(GETS) | set(POSTS)
    for name in SHAPES:
        assert_declared(name, DOCS_EXAMPLES[name])


def without_timestamps(value):
    if isinstance(value, dict):
        return {key: without_timestamps(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_timestamps(item) for item in value]
    return "<timestamp>" if isinstance(value, str) and TIMESTAMP.match(value) else value


def answer(response):
    return json.loads(content(response))


def assert_same_shape(example, live, where: str = "") -> None:
    """The same keys in the same order, each value of the same type (null matches any)."""
    if example is None or live is None:
        return
    assert type(example) is type(live), f"{where}: {example!r} against {live!r}"
    if isinstance(example, dict):
        assert list(example) == list(live), where
        for key in example:
            assert_same_shape(example[key], live[key], f"{where}.{key}")
    elif isinstance(example, list):
        for index, (item, answered) in enumerate(zip(example, live, strict=False)):
            assert_same_shape(item, answered, f"{where}[{index}]")


@pytest.fixture
def seeded(make_trace, s3):
    """The demo trace of the examples (its summary's values, two of its kernels, its metadata),
    a ready simulation of it (an overlapped launch among its launches) and one uploading."""
    summary = {
        key: value for key, value in api_examples.DEMO_SUMMARY.items() if key in shapes.TRACE_SUMMARY.keys
    }
    for key in ("id", "created_at", "updated_at", "waiting_for"):
        summary.pop(key)
    trace = make_trace("demo", **summary)
    trace.metadata = DEMO_METADATA
    trace.files = [
        {
            "key": f"{django_settings.CASCADE_S3_PREFIX}demo/{file['path']}",
            "bytes": file["bytes"],
            "etag": file["etag"],
        }
        for file in api_examples.FILES_EXAMPLE["files"]
    ]
    trace.save()
    Step.objects.create(
        trace=trace, index=0, name="step 0 (prefill)", phase="prefill", first_kernel_id=1, last_kernel_id=2
    )
    kernels = []
    for kernel in NULL_TOTALS_DETAIL["kernels"]:
        launch = {key: kernel[key] for key in ("ctx", "kernel_id", "name", "trace_file", "blocks", "threads")}
        for axis, size in zip("xyz", kernel["grid_dim"], strict=True):
            launch[f"grid_{axis}"] = size
        for axis, size in zip("xyz", kernel["block_dim"], strict=True):
            launch[f"block_{axis}"] = size
        launch |= {
            key: kernel[key] for key in ("total_insts", "total_reported_insts", "traced", "duration_ns")
        }
        kernels.append(launch | {"step": 0})
    store_kernels("demo", kernels)
    Trace.objects.filter(pk="demo").update(kernel_count=api_examples.DEMO_SUMMARY["kernel_count"])
    example = simulation_examples.SIMULATION_SUMMARY
    simulate(
        trace,
        SIMULATION,
        [(0, 1, "_Z6vecAddPdS_S_i", 0, 2816, 2000), (0, 2, "_Z6vecAddPdS_S_i", 0, 2000, None)],
        **{
            key: example[key]
            for key in ("simulator_build", "gpgpusim_build", "config", "core_clock_mhz", "run")
        },
    )
    simulate(
        trace,
        simulation_examples.UPLOADING_SIMULATION["name"],
        [],
        minutes=5,
        state=TraceState.UPLOADING,
        run=None,
    )
    return trace


def test_the_demo_traces_list_and_detail_are_their_examples(api, seeded):
    assert without_timestamps(api.get("/api/traces").json()) == without_timestamps(DOCS_EXAMPLES["traces"])
    detail = answer(api.get("/api/traces/demo"))
    assert without_timestamps(detail) == without_timestamps(DOCS_EXAMPLES["trace"])


@pytest.mark.parametrize("name", sorted(GETS))
def test_each_docs_example_has_the_live_answers_keys_and_types(api, openapi, seeded, name):  # noqa: F811
    path, url = GETS[name]
    response = api.get(url)
    assert response.status_code == 200, response.content
    live = answer(response)
    response_validator(openapi, path, 200).validate(live)
    if isinstance(live, list):
        assert live, f"{url} answered no row to compare"
    assert_same_shape(DOCS_EXAMPLES[name], live, name)
    assert_declared(name, live)


def test_the_upload_examples_have_the_live_answers_keys_and_types(seeded, s3, monkeypatch):
    writer = token_client("write")
    name = DOCS_EXAMPLES["upload"]["name"]
    upload = writer.post(
        f"/api/traces/demo/simulations/{name}/upload", DOCS_EXAMPLES[POSTS["upload"]], format="json"
    )
    assert upload.status_code == 200, upload.content
    example = DOCS_EXAMPLES["upload"]
    assert_same_shape(example, upload.json(), "upload")
    assert_declared("upload", upload.json())
    assert [file["name"] for file in upload.json()["files"]] == [file["name"] for file in example["files"]]
    # Completing takes the bucket's real parts: the answer's keys are checked without them, one
    # file landed and its read not started (the upload tests read a real one).
    # Its checked files moved into the folder: here a marker alone.
    monkeypatch.setattr(
        uploads,
        "move_into_place",
        lambda base, *args: s3.put_object(Bucket=TEST_BUCKET, Key=f"{base}simulation.json", Body=b"{}"),
    )
    monkeypatch.setattr(receivers, "read_soon", lambda trace_id: None)
    complete = writer.post(f"/api/traces/demo/simulations/{name}/complete", {}, format="json")
    assert complete.status_code == 202, complete.content
    assert_same_shape(DOCS_EXAMPLES["complete"], complete.json(), "complete")
    assert_declared("complete", complete.json())
