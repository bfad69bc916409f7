"""`traces.shapes` is the one declaration of each answer: the answers hold its keys, in its order,
of its kinds; the schema's components are it; and a field added to the trace list as its
docstring says (the model's field, its migration, one `stored(...)` line, the docs rewritten)
reaches the answers, the schema, the docs and every test that lists keys or columns."""

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import orjson
import pytest
from django.conf import settings
from django.db import connection, transaction

from simulations import accuracy
from simulations import encoders as simulation_encoders
from simulations import shapes as simulation_shapes
from simulations.models import Simulation
from tests.helpers import SHARED_FIXTURES, content, kernel_row
from tests.traces.support import assert_has_the_keys
from traces import analysis, encoders, kernel_store, selection, shapes
from traces.models import KERNEL_COLUMNS, NO_DEVICE, Trace, TraceState

OPENAPI_TYPES = {
    shapes.STRING: "string",
    shapes.DATETIME: "string",
    shapes.URI: "string",
    shapes.INTEGER: "integer",
    shapes.INT64: "integer",
    shapes.NUMBER: "number",
    shapes.BOOLEAN: "boolean",
    shapes.ARRAY: "array",
    shapes.OBJECT: "object",
}


def test_the_stored_fields_are_the_models_columns():
    assert accuracy.SIMULATION_SUMMARY_COLUMNS == simulation_shapes.SIMULATION_SUMMARY.columns()
    trace_columns = {field.name for field in Trace._meta.get_fields()}
    assert set(shapes.TRACE_DETAIL.columns()) <= trace_columns
    simulation_columns = {field.name for field in Simulation._meta.get_fields()}
    # A column through a relation (`owner__username`) names a field of the related model.
    joined = {column for column in simulation_shapes.SIMULATION_LIST_ITEM.columns() if "__" in column}
    for column in joined:
        relation, field = column.split("__")
        Simulation._meta.get_field(relation).related_model._meta.get_field(field)
    assert set(simulation_shapes.SIMULATION_LIST_ITEM.columns()) - joined <= simulation_columns | {"trace_id"}
    assert set(shapes.KERNEL.columns()) <= set(KERNEL_COLUMNS)


def test_the_encoders_write_the_declared_keys():
    required = [field.name for field in shapes.KERNEL.fields if not field.optional]
    row = dict.fromkeys(KERNEL_COLUMNS, 1) | {"device": NO_DEVICE}
    assert list(encoders.kernel_row_to_dict(tuple(row.values()))) == required
    row["device"] = 0
    assert list(encoders.kernel_row_to_dict(tuple(row.values()))) == list(shapes.KERNEL.keys)
    assert simulation_encoders.SIMULATED_KERNEL_KEYS == simulation_shapes.SIMULATED_KERNEL.keys
    assert accuracy.SIMULATION_METRIC_KEYS == simulation_shapes.SIMULATION_METRICS.keys
    assert accuracy.SIMULATION_SUMMARY_KEYS == simulation_shapes.SIMULATION_SUMMARY.keys
    assert shapes.TRACE_COMPARISON.field("by").enum == analysis.COMPARE_BY
    assert shapes.STATES == tuple(TraceState.values)
    assert shapes.SELECT_BY == selection.SELECT_BY
    assert shapes.BASES == (selection.BASIS_TIME, selection.BASIS_INSTS, selection.BASIS_LAUNCHES)
    optional = {field.name for field in simulation_shapes.SIMULATION_ACCURACY.fields if field.optional}
    assert optional == set(accuracy.ACCURACY_BY)


# What each kind is in JSON (a bool is no integer).
JSON_TYPES = {
    shapes.STRING: str,
    shapes.DATETIME: str,
    shapes.URI: str,
    shapes.INTEGER: int,
    shapes.INT64: int,
    shapes.NUMBER: (int, float),
    shapes.BOOLEAN: bool,
    shapes.ARRAY: list,
    shapes.OBJECT: dict,
}
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def assert_of_the_kind(value, kind: "str | shapes.Shape", where: str) -> None:
    if isinstance(kind, shapes.Shape):
        assert_of_the_declared_kinds(value, kind, where)
        return
    assert isinstance(value, JSON_TYPES[kind]), where
    assert kind == shapes.BOOLEAN or not isinstance(value, bool), where
    if kind == shapes.DATETIME:
        assert TIMESTAMP.match(value), where


def assert_of_the_declared_kinds(value: dict, shape: shapes.Shape, where: str) -> None:
    """`value` has `shape`'s keys (`assert_has_the_keys`), each value of its field's kind: null
    only where the field may be, one of its enum, of its length; and so do the objects it nests."""
    assert_has_the_keys(value, shape, where)
    for field in shape.fields:
        item, at = value.get(field.name), f"{where}.{field.name}"
        if item is None:
            assert field.null or field.name not in value, at
            continue
        assert_of_the_kind(item, field.shape or field.kind, at)
        if field.enum:
            assert item in field.enum, at
        if field.length is not None:
            assert len(item) == field.length, at
        if field.kind == shapes.ARRAY:
            for index, element in enumerate(item):
                assert_of_the_kind(element, field.items, f"{at}[{index}]")


def test_the_list_and_the_detail_answer_the_declared_kinds(api, make_trace, make_kernels):
    make_trace("uploading")  # waiting for its metadata.json
    ready = make_trace(
        "ready",
        state=TraceState.READY,
        model="facebook/opt-125m",
        layers=["step 0 (prefill)"],
        trace_gpu_arch="sm_90",
        warnings=[{"file": "traces/stats.csv", "offset": None, "what": "the file is empty"}],
        traced_launches=1,
    )
    ready.metadata = {"status": "ok", "files": []}
    ready.save()
    make_kernels(ready, [50066, None])
    with transaction.atomic():  # a launch of the device-id fork: its keys too
        kernel_store.kernels_append(ready.pk, [kernel_row(1, ctx="0x2", device=0, stream=7)])
    listed = api.get("/api/traces").json()
    assert [summary["id"] for summary in listed] == ["ready", "uploading"]
    for summary in listed:
        assert_of_the_declared_kinds(summary, shapes.TRACE_SUMMARY, summary["id"])
        detail = json.loads(content(api.get(f"/api/traces/{summary['id']}")))
        assert_of_the_declared_kinds(detail, shapes.TRACE_DETAIL, f"{summary['id']} detail")
        if summary["id"] == "ready":  # with and without the fork's keys
            assert {"device_id" in kernel for kernel in detail["kernels"]} == {True, False}


def test_the_selections_answer_has_the_declared_keys():
    launch = selection.Launch(ctx="0x1", kernel_id=1, device=3, trace_file="kernel-1.trace", traced=True)
    group = selection.Group(
        name_id=1,
        grid=(1, 1, 1),
        block=(32, 1, 1),
        low=10,
        high=10,
        count=2,
        total_insts=20,
        duration_ns=None,
        representative_key=(0, 1),
        name="k",
        representative=launch,
    )
    answer = selection.Selection(
        trace_id="t",
        by="unique",
        step=None,
        cover=Fraction(1),
        launches=2,
        basis="insts",
        covered=1.0,
        groups=[group],
        members=iter([(0, 0, 1), (0, 0, 2)]),
        contexts={0: ("0x1", 3)},
    )
    encoded = orjson.loads(b"".join(selection.encode_selection(answer)))
    assert_has_the_keys(encoded, shapes.SELECTION, "selection")
    assert "device_id" in encoded["groups"][0]["representative"]
    assert "device_id" in encoded["groups"][0]["members"][0]
    answer.members, answer.groups[0].representative = None, replace(launch, device=NO_DEVICE)
    encoded = orjson.loads(b"".join(selection.encode_selection(answer)))
    assert_has_the_keys(encoded, shapes.SELECTION, "selection without members")
    assert "members" not in encoded["groups"][0]


def test_the_schemas_components_are_the_declarations(openapi):
    components = openapi["components"]["schemas"]
    for name, shape in {**shapes.SHAPES, **simulation_shapes.SHAPES}.items():
        schema = components[name]
        assert list(schema["properties"]) == list(shape.keys), name
        assert sorted(schema["required"]) == sorted(f.name for f in shape.fields if not f.optional), name
        assert schema["additionalProperties"] is False, name
        for field in shape.fields:
            described = schema["properties"][field.name]
            where = f"{name}.{field.name}"
            assert described.get("nullable", False) is field.null, where
            assert described.get("description", "").split("\n\n")[0] == field.doc, where
            if field.shape is not None:
                assert described["allOf" if field.null or field.doc else "$ref"], where
            elif field.enum:
                (ref,) = described.get("allOf", [described])
                assert components[ref["$ref"].rsplit("/", 1)[1]]["enum"] == list(field.enum), where
            else:
                assert described["type"] == OPENAPI_TYPES[field.kind], where
                assert (described.get("format") == "int64") is (field.kind == shapes.INT64), where


# --- adding a field, as traces/shapes.py's docstring says, in a scratch copy of the repository ----

ADDED_DOC = "The GPUs the run was traced on."
# The model's field, after the published ones (help text from the declaration, defaults in Python
# and in the database), and its declaration, last of TRACE_ADDED.
ADDED_MODEL_FIELD = '    gpu_count = models.PositiveSmallIntegerField(default=1, db_default=1, help_text=TRACE_DETAIL.field("gpu_count").doc)\n'
ADDED_DECLARATION = f'    stored("gpu_count", INTEGER, "{ADDED_DOC}"),\n'
# What the new key must reach, checked in the copy with its own suite's fixtures.
PROBE = f"""
import json

from tests.helpers import content
from traces.models import Trace


def test_the_added_field_is_answered_and_described(api, make_trace, openapi):
    make_trace("probe", gpu_count=4)
    (summary,) = api.get("/api/traces").json()
    detail = json.loads(content(api.get("/api/traces/probe")))
    schemas = openapi["components"]["schemas"]
    for keys in (list(summary), list(detail), list(schemas["TraceSummary"]["properties"]),
                 list(schemas["TraceDetail"]["properties"])):
        assert keys[-1] == "gpu_count"
    assert summary["gpu_count"] == detail["gpu_count"] == 4
    assert schemas["TraceSummary"]["properties"]["gpu_count"]["description"] == {ADDED_DOC!r}
    assert Trace._meta.get_field("gpu_count").help_text == {ADDED_DOC!r}
"""
# The tests whose lists of keys, columns or queries a new field would touch, and the probe.
SUITE = [
    "tests/traces/test_added_field_probe.py",
    "tests/traces/test_api.py",
    "tests/traces/test_shapes.py",
    "tests/traces/test_openapi.py",
    "tests/traces/test_api_docs_examples.py",
    "tests/traces/test_kernel_storage.py",
    "tests/ingest/test_parallel_passes.py",
    "tests/test_bench_reference.py",
]
COPIED_NOT = shutil.ignore_patterns(".git", ".venv", "var", "__pycache__", ".pytest_cache", ".ruff_cache")


def inserted(text: str, after: str, line: str) -> str:
    """`text` with `line` inserted after the first occurrence of `after`."""
    at = text.index(after) + len(after)
    return text[:at] + line + text[at:]


def run(copy: Path, *args: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow  # copies the repository, migrates, and runs part of its suite: a minute or two
def test_a_field_added_as_the_docstring_says_reaches_every_derived_place(tmp_path):
    copy = tmp_path / "cascade"
    shutil.copytree(settings.BASE_DIR, copy, ignore=COPIED_NOT)
    models_py, shapes_py = copy / "traces" / "models" / "trace.py", copy / "traces" / "shapes.py"
    models_py.write_text(
        inserted(
            models_py.read_text(), "    sample = models.BooleanField(default=False)\n", ADDED_MODEL_FIELD
        )
    )
    source = shapes_py.read_text()
    end_of_added = source.index("\n)\n", source.index("\nTRACE_ADDED = (")) + 1
    shapes_py.write_text(source[:end_of_added] + ADDED_DECLARATION + source[end_of_added:])
    (copy / "tests" / "traces" / "test_added_field_probe.py").write_text(PROBE)

    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    env |= {
        "DJANGO_SETTINGS_MODULE": "cascade.settings",
        "CASCADE_VAR_DIR": str(copy / "var"),
        "CASCADE_SHARED_FIXTURES": str(SHARED_FIXTURES),
    }
    if connection.vendor == "postgresql":  # a database of its own: this run holds the suite's
        url = urlsplit(os.environ["DATABASE_URL"])
        env["DATABASE_URL"] = urlunsplit(url._replace(path=f"{url.path}_added_field"))
    run(copy, "manage.py", "makemigrations", "traces", "--name", "trace_gpu_count", env=env, timeout=300)
    run(copy, "-m", "cascade.api_docs", env=env, timeout=120)
    done = run(
        copy,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-n",
        "0",
        "-m",
        "not slow",
        "-rA",
        *SUITE,
        env=env,
        timeout=1800,
    )
    assert "PASSED tests/traces/test_added_field_probe.py::" in done.stdout
    assert "gpu_count" in (copy / "docs" / "api.md").read_text()
