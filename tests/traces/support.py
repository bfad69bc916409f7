"""Helpers the traces tests share (kernel rows, hostile and real kernel names, c++filt): not tests themselves."""

from __future__ import annotations  # the page helpers name Element, defined below them

import copy
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import jsonschema
import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.helpers import content, kernel_dict, store_kernels
from traces import shapes
from traces.models import Kernel, Step, Trace

FLASH = (
    "_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi256ELi4ELb0ELb0EN7cutlass"
    "6half_tE19Flash_kernel_traitsILi64ELi64ELi256ELi4ES3_EELb1ELb0ELb0ELb0ELb1ELb0ELb0ELb0EEEv"
    "NS_16Flash_fwd_paramsE"
)


def launch(kernel_id: int, name: str, insts: int | None, **fields) -> dict:
    return kernel_dict(
        kernel_id,
        ctx="0x1",
        name=name,
        trace_file=f"kernel-{kernel_id}.trace",
        grid=(1, 1, 1),
        block=(128, 1, 1),
        insts=insts,
        **fields,
    )


def substitution(index: int) -> str:
    """The Itanium ABI's reference to substitution `index`: S_, S0_, ... S9_, SA_, ... SZ_, S10_."""
    if index == 0:
        return "S_"
    number, digits = index - 1, ""
    while True:
        number, digit = divmod(number, 36)
        digits = BASE36[digit] + digits
        if not number:
            return f"S{digits}_"


def hostile(levels: int, function: str = "f") -> str:
    """f(A, B<A, A>, B<B<A, A>, B<A, A> >, ...): each parameter is B of the one before, twice.

    Substitutions: S_ is A, S0_ the template B, S1_ B<A, A>; each `S0_I<last><last>E` is B of
    the last parameter, twice, and the next substitution. About 11 bytes a level, and each
    level doubles the demangled text.
    """
    return f"_Z{len(function)}{function}1A1BIS_S_E" + "".join(
        f"S0_I{substitution(level + 1)}{substitution(level + 1)}E" for level in range(1, levels)
    )


def cxx_filt(names: list[str]) -> list[str]:
    if shutil.which("c++filt") is None:
        pytest.skip("needs binutils' c++filt, the outside truth")
    # Without --no-recursion-limit c++filt, like libstdc++, refuses a symbol past 1,024
    # characters: CUTLASS's kernels; a demangler can read them, so the page must.
    answer = subprocess.run(
        ["c++filt", "--no-recursion-limit"],
        input="".join(f"{name}\n" for name in names),
        capture_output=True,
        text=True,
    )
    return answer.stdout.splitlines()


BASE36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def change_url(trace_id: str) -> str:
    return reverse("admin:traces_trace_change", args=[quote(trace_id)])


def query_count(client, path: str, params=None) -> int:
    """The queries a page of the admin costs."""
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path, params or {}).status_code == 200
    return len(captured)


def read(response) -> Element:
    """The page a response holds."""
    assert response.status_code == 200, response.status_code
    builder = PageBuilder()
    builder.feed(response.content.decode())
    builder.close()
    return builder.root


def table_rows(table: Element) -> list[dict[str, Element]]:
    """The table's body rows, each cell under its column's header."""
    headers = [header_label(cell) for cell in table.find("thead").find_all("th")]
    return [
        dict(zip(headers, [cell for cell in row.find_all() if cell.tag in ("td", "th")], strict=True))
        for row in table.find("tbody").find_all("tr")
    ]


def result_rows(page: Element) -> list[dict[str, Element]]:
    """The rows of a change list, as the list shows them."""
    return table_rows(page.find("table", id="result_list"))


def field(page: Element, label: str) -> Element:
    """The value a change page shows beside `label`."""
    for element in page.find_all("label"):
        if element.text == f"{label}:":
            siblings = [child for child in element.parent.children if isinstance(child, Element)]
            return siblings[siblings.index(element) + 1]
    raise AssertionError(f"no field labelled {label!r}")


def upload_minimal_run(s3, run_id: str) -> None:
    from django.conf import settings

    bucket = settings.CASCADE_S3_BUCKET
    prefix = f"{settings.CASCADE_S3_PREFIX}{run_id}/"
    stats = (
        b"kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, "
        b"block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
        b"kernel-1-ctx_0x1.trace.xz, _Z6vecAddPdS_S_i, 98, 1, 1, 98, 1024, 1, 1, 1024, 50066,50066\n"
    )
    s3.put_object(Bucket=bucket, Key=f"{prefix}traces/stats_ctx_0x1", Body=stats)
    s3.put_object(Bucket=bucket, Key=f"{prefix}metadata.json", Body=b'{"status": "ok"}')


def reingest(client, *trace_ids):
    response = client.post(
        CHANGELIST, {"action": "reingest", "_selected_action": list(trace_ids)}, follow=True
    )
    assert response.status_code == 200
    return [str(message) for message in response.context["messages"]]


GEMM = "_Z10gemm_tiledPKfS0_Pfi"


ADD = "_ZN2at6native6kernelIiEEvT_"


CUBLAS = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64"


def add_run(trace: Trace, launches: list[tuple], *, ctx: str = "0xa") -> None:
    """`launches`: (name, total_insts, duration_ns, step) in launch order; odd ids traced."""
    store_kernels(
        trace.pk,
        (
            kernel_dict(
                n,
                ctx=ctx,
                name=name,
                trace_file=f"kernel-{n}.trace.xz",
                grid=(1, 1, 1),
                block=(32, 1, 1),
                insts=insts,
                traced=n % 2 == 1,
                step=step,
                duration_ns=ns,
            )
            for n, (name, insts, ns, step) in enumerate(launches, start=1)
        ),
    )
    Trace.objects.filter(pk=trace.pk).update(kernel_count=Kernel.objects.filter(trace=trace).count())


def add_steps(trace: Trace, names: list[tuple[str, str]]) -> None:
    Step.objects.bulk_create(
        Step(trace=trace, index=index, name=name, phase=phase, first_kernel_id=1, last_kernel_id=1)
        for index, (name, phase) in enumerate(names)
    )


def nullable_to_json_schema(node):
    """OpenAPI 3.0's `nullable: true` as JSON Schema's `type: [..., "null"]`."""
    if isinstance(node, list):
        return [nullable_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: nullable_to_json_schema(value) for key, value in node.items()}
    if node.pop("nullable", False):
        if "type" in node:
            node["type"] = [node["type"], "null"]
        if "enum" in node:
            node["enum"] = [*node["enum"], None]
        if "allOf" in node:  # a nullable object of a named shape (SimulationSummary's metrics)
            node["anyOf"] = [{"allOf": node.pop("allOf")}, {"type": "null"}]
    return node


def response_validator(openapi: dict, path: str, status: int) -> jsonschema.Draft4Validator:
    """A validator for the body the schema documents for GET `path` answering `status`."""
    described = openapi["paths"][path]["get"]["responses"][str(status)]["content"]
    schema = copy.deepcopy(described["application/json"]["schema"])
    schema["components"] = nullable_to_json_schema(openapi["components"])
    return jsonschema.Draft4Validator(nullable_to_json_schema(schema))


def assert_conforms(openapi: dict, path: str, response) -> object:
    assert str(response.status_code) in openapi["paths"][path]["get"]["responses"], response.status_code
    assert response["Content-Type"] == "application/json"
    body = json.loads(content(response))
    response_validator(openapi, path, response.status_code).validate(body)
    return body


BEFORE = ("traces", "0006_steps_and_measured_time")


def migrate(*targets: tuple[str, str]) -> MigrationExecutor:
    """To `targets` (app, migration), or to every app's last migration (the schema the other
    tests need)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(list(targets) or executor.loader.graph.leaf_nodes())
    return executor


def old_launch(kernel_id: int, **fields) -> dict:
    return {
        "ctx": "0x7f3a",
        "kernel_id": kernel_id,
        "name": "_Z6vecAddPdS_S_i",
        "trace_file": f"kernel-{kernel_id}-ctx_0x7f3a.trace.xz",
        "grid_x": 98,
        "grid_y": 1,
        "grid_z": 1,
        "block_x": 1024,
        "block_y": 1,
        "block_z": 1,
        "blocks": 98,
        "threads": 1024,
        "total_insts": 50066,
        "total_reported_insts": 50066,
        "traced": kernel_id % 2 == 1,
        **fields,
    }


CHANGELIST = "/admin/traces/trace/"


class Element:
    def __init__(self, tag: str, attrs: list[tuple[str, str | None]], parent: Element | None = None):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.children: list[Element | str] = []

    def raw_text(self) -> str:
        """The text as written, line breaks and indentation kept (what a <pre> shows)."""
        return "".join(
            child if isinstance(child, str) else child.raw_text()
            for child in self.children
            if isinstance(child, str) or child.tag not in ("script", "style")
        )

    @property
    def text(self) -> str:
        return " ".join(self.raw_text().split())

    def descendants(self):
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.descendants()

    def find_all(self, tag: str | None = None, **attrs) -> list[Element]:
        return [
            element
            for element in self.descendants()
            if (tag is None or element.tag == tag)
            and all(element.attrs.get(name) == value for name, value in attrs.items())
        ]

    def find(self, tag: str | None = None, **attrs) -> Element | None:
        found = self.find_all(tag, **attrs)
        return found[0] if found else None

    def links(self) -> list[tuple[str, str]]:
        """(text, href) of every link, in page order."""
        return [(a.text, a.attrs["href"]) for a in self.find_all("a") if "href" in a.attrs]

    def tooltips(self) -> list[str]:
        return [
            element.attrs["title"] for element in [self, *self.descendants()] if element.attrs.get("title")
        ]


class PageBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.current = Element("document", [])

    def handle_starttag(self, tag, attrs):
        element = Element(tag, attrs, self.current)
        self.current.children.append(element)
        if tag not in VOID_TAGS:
            self.current = element

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Element(tag, attrs, self.current))

    def handle_endtag(self, tag):
        open_element = self.current
        while open_element is not self.root and open_element.tag != tag:
            open_element = open_element.parent
        if open_element is not self.root:
            self.current = open_element.parent

    def handle_data(self, data):
        self.current.children.append(data)


def header_label(cell: Element) -> str:
    # A sorted column's header also shows its sorting priority, a number.
    return re.sub(r"^\d+\s*", "", cell.text)


VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


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


# The published reference's keys, in its order: what a client of the reference reads.
REFERENCE_KEYS = [
    "id",
    "state",
    "error",
    "created_at",
    "updated_at",
    "model",
    "layers",
    "source_gpu",
    "trace_gpu_arch",
    "suggested_sim_config",
    "kernel_count",
    "bytes",
    "has_real_timing",
    "has_step_timeline",
    "sample",
]
# After the reference's keys (after the detail's `kernels`), those added since, from their
# declaration; those released so far lead them, in this order: what an uploading trace waits
# for, what a reader must know (a file cut short, a killed run, a file left out), launches with
# their trace file.
RELEASED_ADDED_KEYS = ["waiting_for", "warnings", "traced_launches"]
ADDED_KEYS = [field.name for field in shapes.TRACE_ADDED]
SUMMARY_KEYS = [*REFERENCE_KEYS, *ADDED_KEYS]
DETAIL_KEYS = [*REFERENCE_KEYS, "metadata", "kernels", *ADDED_KEYS]
KERNEL_KEYS = [
    "ctx",
    "kernel_id",
    "name",
    "trace_file",
    "grid_dim",
    "block_dim",
    "blocks",
    "threads",
    "total_insts",
    "total_reported_insts",
    "traced",
    # After the reference's keys, the launch's step and measured time (null without
    # timeline.json / timing.csv).
    "step",
    "duration_ns",
]
