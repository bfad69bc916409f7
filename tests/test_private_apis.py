"""Private or internal APIs of dependencies: at most two in the product, each named here.

A reach into a dependency's private parts breaks without warning on an upgrade. The few kept
each live in one small function whose comment says what the public way fails, with a test that
breaks when an upgrade takes the private part away; this test keeps a new one from slipping in.

The product's source (cascade/, traces/, ingest/, tools/, client/, gunicorn.conf.py; migrations
aside) is read, not imported, for:

- `thing._name`, or getattr/setattr/hasattr with "_name", where `_name` is none of the
  project's own names (a function, class, variable, argument or `self.`/`cls.` attribute
  defined anywhere in the product). `_meta` and `_default_manager` (Django's model options and
  its documented manager of any model) and namedtuple's
  `_replace`, `_asdict`, `_fields`, `_make` are public APIs with an underscore.
- any attribute of a queryset's `.query`: Django documents the query object as opaque.
- an attribute of a dependency's module assigned at run time (`gunicorn.util.write_error = ...`).
- `.__get__`: a method bound by hand, past the class that overrides it.
- a `_method` of a class that nothing in the project calls: an override of a dependency's
  private hook (drf-spectacular's `_get_schema_response`, say), called by the dependency only.
"""

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("cascade", "traces", "simulations", "ingest", "tools", "client", "gunicorn.conf.py")
OWN_PACKAGES = {"cascade", "traces", "simulations", "ingest", "tools", "cascade_client", "bench", "tests"}
PUBLIC_UNDERSCORED = {
    "_meta",
    "_default_manager",
    "_replace",
    "_asdict",
    "_fields",
    "_make",
    "_field_defaults",
}

# (file, expression) -> where it lives and why it stays. Two at most.
ALLOWED = {
    ("traces/admin/__init__.py", "site._registry"): (
        "register_listed_only: Django's AdminSite.register refuses a composite primary key; "
        "tests/traces/test_admin.py fails when Django accepts them or `_registry` goes"
    ),
    ("traces/selectors.py", "rows.query.sql_with_params"): (
        "_fetched: the traces list's rows straight from psycopg, skipping Django's converters "
        "(a third of the list's time); every PostgreSQL test of the list fails if it goes"
    ),
}


def product_files() -> dict[str, str]:
    """Path relative to the repository → source, for every Python file of the product."""
    files = {}
    for entry in PRODUCT:
        path = ROOT / entry
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            relative = file.relative_to(ROOT).as_posix()
            if "/migrations/" not in relative:
                files[relative] = file.read_text()
    return files


def own_names(trees) -> set[str]:
    """Every name the project defines: what its own `._name` accesses may reach."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
    return names


def is_module(dotted: str) -> bool:
    """Whether `dotted` names a module, found on disk without importing (nor running) any."""
    top, *parts = dotted.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name is looked up, not imported
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    folders = [Path(folder) for folder in spec.submodule_search_locations or []]
    for n, part in enumerate(parts, start=1):
        if n == len(parts) and any((folder / f"{part}.py").is_file() for folder in folders):
            return True
        folders = [folder / part for folder in folders if (folder / part / "__init__.py").is_file()]
        if not folders:
            return False
    return True


def module_bindings(tree) -> dict[str, str]:
    """Local name → dotted name, for every dependency's module the source imports."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in OWN_PACKAGES:
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in OWN_PACKAGES:
                for alias in node.names:
                    if is_module(f"{node.module}.{alias.name}"):
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def dotted(node, bound: dict[str, str]) -> str | None:
    """The dotted name an expression such as `gunicorn.util` stands for, if it is a module's."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, bound)
        return f"{base}.{node.attr}" if base else None
    return None


def findings(source: str, own: set[str]) -> list[str]:
    """The reaches into dependencies' private parts in `source`, as written."""
    tree = ast.parse(source)
    bound = module_bindings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            dunder = name.startswith("__") and name.endswith("__")
            if name.startswith("_") and not dunder and name not in own | PUBLIC_UNDERSCORED:
                found.append(ast.unparse(node))
            elif name == "__get__":
                found.append(ast.unparse(node))
            elif isinstance(node.value, ast.Attribute) and node.value.attr == "query":
                found.append(ast.unparse(node))
            elif isinstance(node.ctx, ast.Store) and is_module(dotted(node.value, bound) or ""):
                found.append(ast.unparse(node))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not node.args[1].value.startswith("__")
            and node.args[1].value not in own | PUBLIC_UNDERSCORED
        ):
            found.append(ast.unparse(node))
    return found


def private_overrides(trees: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """(file, "Class._method") for each `_method` defined in a class and named nowhere else."""
    named = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
                named.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                named.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                named.add(node.value)  # getattr(self, "_name"), a method named in a setting
    found = set()
    for path, tree in trees.items():
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            for method in cls.body:
                if (
                    isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef)
                    and method.name.startswith("_")
                    and not method.name.startswith("__")
                    and method.name not in named
                ):
                    found.add((path, f"{cls.name}.{method.name}"))
    return found


def test_the_product_reaches_into_no_dependency_but_where_allowed():
    files = product_files()
    trees = {path: ast.parse(source) for path, source in files.items()}
    own = own_names(trees.values())
    found = {(path, expression) for path, source in files.items() for expression in findings(source, own)}
    found |= private_overrides(trees)
    assert found - set(ALLOWED) == set(), "a private API of a dependency: use the public way"
    assert set(ALLOWED) - found == set(), "allowed but no longer used: take it off ALLOWED"


def test_at_most_two_private_apis_are_allowed():
    assert len(ALLOWED) <= 2


def test_the_scan_sees_each_kind_of_reach():
    source = """
import gunicorn.util
from django.contrib import admin
from gunicorn.workers.base import Worker

def handle(request, site, queryset, model, worker):
    user = request._request.user
    marked = getattr(request, "_request", request)
    site._registry[model] = admin
    unfiltered = not queryset.query.where
    gunicorn.util.write_error = handle
    return Worker.handle_quit.__get__(worker)
"""
    assert sorted(
        findings(source, own={"handle", "request", "site", "queryset", "model", "worker"})
    ) == sorted(
        [
            "request._request",
            "getattr(request, '_request', request)",
            "site._registry",
            "queryset.query.where",
            "gunicorn.util.write_error",
            "Worker.handle_quit.__get__",
        ]
    )


def test_the_scan_sees_an_override_of_a_dependency_s_private_hook():
    source = """
from drf_spectacular.views import SpectacularAPIView

class CachedSchemaView(SpectacularAPIView):
    def _get_schema_response(self, request):
        return self._cached(request)

    def _cached(self, request):
        return None
"""
    found = private_overrides({"traces/openapi.py": ast.parse(source)})
    assert found == {("traces/openapi.py", "CachedSchemaView._get_schema_response")}


def test_the_scan_leaves_the_project_s_own_and_documented_names_alone():
    source = """
import os
from django.contrib import admin
from django.conf import settings

class Client:
    def __init__(self):
        self._http = None

    def stream(self, client, row, model):
        admin.site.site_url = "/api/traces"
        os.environ["CASCADE_X"] = "1"
        return client._http, model._meta.db_table, row._replace(kernel_id=1), settings.DEBUG
"""
    files = {"cascade_client/api.py": source}
    own = own_names(ast.parse(text) for text in files.values())
    assert findings(source, own) == []
