"""`traces.shapes` is the one declaration of each answer: the selectors read its columns, the
encoders write its keys, the schema's components are it, and a field added to it reaches all
of them with no other edit."""

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import orjson
from django.conf import settings

from simulations import accuracy
from simulations import encoders as simulation_encoders
from simulations.models import Simulation
from tests.traces.test_openapi import openapi  # noqa: F401 (a fixture)
from traces import analysis, encoders, selection, selectors, shapes
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


def test_the_selectors_read_the_declared_columns():
    assert selectors.TRACE_SUMMARY_COLUMNS == shapes.TRACE_SUMMARY.columns()
    assert selectors.TRACE_DETAIL_COLUMNS == (*shapes.TRACE_SUMMARY.columns(), "metadata_json")
    assert accuracy.SIMULATION_SUMMARY_COLUMNS == shapes.SIMULATION_SUMMARY.columns()
    trace_columns = {field.name for field in Trace._meta.get_fields()}
    assert set(shapes.TRACE_DETAIL.columns()) <= trace_columns
    simulation_columns = {field.name for field in Simulation._meta.get_fields()}
    assert set(shapes.SIMULATION_LIST_ITEM.columns()) <= simulation_columns | {"trace_id"}
    assert set(shapes.KERNEL.columns()) <= set(KERNEL_COLUMNS)


def test_the_encoders_write_the_declared_keys():
    required = [field.name for field in shapes.KERNEL.fields if not field.optional]
    row = dict.fromkeys(KERNEL_COLUMNS, 1) | {"device": NO_DEVICE}
    assert list(encoders.kernel_row_to_dict(tuple(row.values()))) == required
    row["device"] = 0
    assert list(encoders.kernel_row_to_dict(tuple(row.values()))) == list(shapes.KERNEL.keys)
    assert simulation_encoders.SIMULATED_KERNEL_KEYS == shapes.SIMULATED_KERNEL.keys
    assert accuracy.SIMULATION_METRIC_KEYS == shapes.SIMULATION_METRICS.keys
    assert accuracy.SIMULATION_SUMMARY_KEYS == shapes.SIMULATION_SUMMARY.keys
    assert shapes.TRACE_COMPARISON.field("by").enum == analysis.COMPARE_BY
    assert shapes.STATES == tuple(TraceState.values)
    assert shapes.SELECT_BY == selection.SELECT_BY
    assert shapes.BASES == (selection.BASIS_TIME, selection.BASIS_INSTS, selection.BASIS_LAUNCHES)
    optional = {field.name for field in shapes.SIMULATION_ACCURACY.fields if field.optional}
    assert optional == set(accuracy.ACCURACY_BY)


def assert_has_the_keys(value: dict, shape: shapes.Shape, where: str) -> None:
    """`value` has `shape`'s keys in its order (an optional one only where present), and so do
    the objects it nests."""
    assert list(value) == [f.name for f in shape.fields if not f.optional or f.name in value], where
    for field in shape.fields:
        inner = value.get(field.name)
        if field.shape is not None and inner is not None:
            assert_has_the_keys(inner, field.shape, f"{where}.{field.name}")
        elif isinstance(field.items, shapes.Shape):
            for index, item in enumerate(inner or []):
                assert_has_the_keys(item, field.items, f"{where}.{field.name}[{index}]")


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


def test_the_schemas_components_are_the_declarations(openapi):  # noqa: F811
    components = openapi["components"]["schemas"]
    for name, shape in shapes.SHAPES.items():
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


# A field added to the trace list as the declaration's docstring says: one line in TRACE_ADDED.
ADDED_FIELD = '    stored("parser_version", INTEGER, "The stats parser that read it.", null=True),\n'
DERIVED = textwrap.dedent(
    """
    import importlib.abc, importlib.util, sys
    source = open(sys.argv[1]).read()
    added = source.replace("\\n)\\nTRACE_SUMMARY = Shape(", "\\n" + sys.argv[2] + ")\\nTRACE_SUMMARY = Shape(", 1)
    assert added != source

    class Edited(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name == "traces.shapes":
                return importlib.util.spec_from_loader(name, self, origin=sys.argv[1])

        def exec_module(self, module):
            exec(compile(added, sys.argv[1], "exec"), module.__dict__)

    sys.meta_path.insert(0, Edited())
    import django
    django.setup()
    from traces import encoders, selectors
    from traces.openapi import api_schema
    components = api_schema()["components"]["schemas"]
    print(selectors.TRACE_SUMMARY_COLUMNS[-1], selectors.LIST_ROW_COLUMNS[-1], encoders.SUMMARY_KEYS[-1])
    print(list(components["TraceSummary"]["properties"])[-1], list(components["TraceDetail"]["properties"])[-1])
    row = (None,) * (len(selectors.TRACE_SUMMARY_COLUMNS) - 1) + (3,)
    print(list(encoders.list_row_to_dict(row[:6] + ("[]",) + row[7:16] + ("[]",) + row[17:]))[-1])
    from traces.api_examples import DEMO_SUMMARY, NULL_TOTALS_DETAIL
    print(list(DEMO_SUMMARY)[-1], list(NULL_TOTALS_DETAIL)[-1])
    """
)


def test_a_field_added_to_the_declaration_reaches_every_derived_place():
    """The selectors' columns, the list's rows, the encoders' keys, the schema's TraceSummary and
    TraceDetail and the examples all end with the new field (run with an edited traces/shapes.py;
    docs/api.md's examples are then out of date until `python -m traces.api_examples`)."""
    assert shapes.TRACE_SUMMARY.index("layers") == 6 and shapes.TRACE_SUMMARY.index("warnings") == 16
    done = subprocess.run(
        [sys.executable, "-c", DERIVED, str(Path(shapes.__file__)), ADDED_FIELD],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=settings.BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "cascade.settings"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["parser_version"] * 8
