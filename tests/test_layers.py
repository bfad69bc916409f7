"""The layers hold: no import circle, no arrow back up, the size rules a maintainer relies on.

Imports are read from the source (function-level ones too, since a lazy import is still an
arrow), so a circle hidden inside a function fails here rather than in a reader's head. The
layers, bottom up: `traces` (the data and the API) ← `simulations` (a simulator's runs of a
trace: their data, reading, API and admin) ← `ingest` (S3 and the formats) ← `tools` (the
generator, the samples, the demo) ← `bench`; `cascade` is the project around them; the
client (`client/cascade_client`) is a separate package that imports none of the server.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cascade", "traces", "simulations", "ingest", "tools", "bench", "client/cascade_client")

# What each top-level package may not import, directly or lazily.
FORBIDDEN = {
    "traces": {"simulations", "ingest", "tools", "bench", "boto3", "botocore", "storages"},
    "simulations": {"ingest", "tools", "bench", "boto3", "botocore", "storages"},
    "ingest": {"tools", "bench"},
    "tools": {"bench"},
    "cascade": {"tools", "bench"},
    "cascade_client": {
        "cascade",
        "traces",
        "simulations",
        "ingest",
        "tools",
        "bench",
        "django",
        "rest_framework",
    },
}
FUNCTION_LINES_MAX = 80
MODULE_LINES_MAX = 500


def product_modules() -> dict[str, Path]:
    """Dotted module name → file, for every module of the product (migrations aside)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if "/migrations/" in relative:
                continue
            name = relative.removeprefix("client/").removesuffix(".py").replace("/", ".")
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = product_modules()


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name the module imports, relative imports resolved; `from a import b` names
    `a.b` when that is a module (importing a submodule is not an arrow to its package's body)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                names.add(full if full in MODULES else base)
    return names


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        arrows = set()
        for target in imported_names(name, path):
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                arrows.add(target)
        graph[name] = arrows
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_a_circle_is_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_arrow_back_up_the_layers(package):
    wrong = sorted(
        f"{name} imports {target}"
        for name, path in MODULES.items()
        if name.split(".")[0] == package
        for target in imported_names(name, path)
        if target.split(".")[0] in FORBIDDEN[package]
    )
    assert wrong == []


def long_functions() -> list[str]:
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES_MAX:
                    found.append(f"{name}.{node.name}")
    return sorted(found)


def test_no_function_is_over_80_lines():
    assert long_functions() == []


def test_a_long_module_says_why_at_its_top():
    """A module over 500 lines is a choice, and its docstring says why ("one module", "500 lines")."""
    unexplained = []
    for name, path in MODULES.items():
        text = path.read_text()
        if text.count("\n") > MODULE_LINES_MAX:
            docstring = ast.get_docstring(ast.parse(text)) or ""
            if "one module" not in docstring.lower() and "500 lines" not in docstring:
                unexplained.append(name)
    assert unexplained == []
