"""What a deployment installs and what the tests install: requirements.txt holds what
the web, poller and Celery processes and the demo run; requirements-dev.txt adds the tools that
test, lint and measure them, and `python3 run.py test` and `bench` install it."""

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

import run

ROOT = Path(__file__).resolve().parent.parent
OWN_PACKAGES = {"cascade", "ingest", "traces", "tools", "tests", "bench", "run", "cascade_client"}
# Imported by the tests, the bench or CI, never by what a deployment runs.
DEV_TOOLS = {"pytest", "pytest-django", "pytest-xdist", "hypothesis", "schemathesis", "selenium", "ruff"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path: Path) -> dict[str, str]:
    """{distribution: version} of a requirements file, following its `-r` includes."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found |= pinned(path.parent / line[3:].strip())
        elif line.startswith("-e "):
            continue  # a project of this repository's (local_projects), not a download
        elif line:
            name, _, version = line.partition("==")
            found[normalized(name.split("[")[0])] = version
    return found


def third_party_imports(*folders: str) -> set[str]:
    """The top-level modules the Python files under `folders` import, other than the standard
    library's and Cascade's own."""
    modules = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_bytes())):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - OWN_PACKAGES


def installed_by(requirements: dict[str, str]) -> set[str]:
    """The distributions pinned in `requirements` and those they depend on, as installed here."""
    names, queue = set(), list(requirements)
    while queue:
        name = queue.pop()
        if name in names:
            continue
        names.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            if "extra ==" not in requirement or name == "moto":  # moto[server]'s extras are installed
                queue.append(normalized(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0]))
    return names


def distributions_of(modules: set[str]) -> dict[str, set[str]]:
    by_module = metadata.packages_distributions()
    return {module: {normalized(name) for name in by_module.get(module, [])} for module in modules}


def test_requirements_txt_holds_no_test_lint_or_browser_tool():
    assert DEV_TOOLS.isdisjoint(pinned(ROOT / "requirements.txt"))
    assert DEV_TOOLS <= set(pinned(ROOT / "requirements-dev.txt"))


def local_projects(path: Path) -> list[str]:
    """The `-e PATH` lines of a requirements file: projects installed from the checkout."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line[3:].strip() for line in lines if line.startswith("-e ")]


def test_the_one_unpinned_line_is_the_client_of_this_repository():
    """The server installs the client from its folder (its path rule and size text are the
    server's too), editable, so that it is always the checkout's."""
    assert local_projects(ROOT / "requirements.txt") == ["./client"]
    assert (ROOT / "client" / "pyproject.toml").is_file()
    assert local_projects(ROOT / "requirements-dev.txt") == []
    assert metadata.distribution("cascade-client").version


def test_both_files_pin_every_line():
    for name in ("requirements.txt", "requirements-dev.txt"):
        assert all(pinned(ROOT / name).values()), name


def test_what_a_deployment_runs_imports_only_what_requirements_txt_installs():
    deployment = installed_by(pinned(ROOT / "requirements.txt"))
    modules = distributions_of(third_party_imports("cascade", "ingest", "traces", "tools"))
    assert {module for module, names in modules.items() if not names & deployment} == set()


def test_the_tests_and_the_bench_import_only_what_requirements_dev_txt_installs():
    dev = installed_by(pinned(ROOT / "requirements-dev.txt"))
    modules = distributions_of(third_party_imports("tests", "bench"))
    assert {module for module, names in modules.items() if not names & dev} == set()


@pytest.fixture
def fake_venv(tmp_path, monkeypatch):
    """run.py's setup pointed at a venv that exists and at requirement files in tmp_path; the
    files pip is asked to install are recorded, not installed."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    (tmp_path / "requirements.txt").write_text("django==1\n")
    (tmp_path / "requirements-dev.txt").write_text("-r requirements.txt\npytest==1\n")
    monkeypatch.setattr(run, "VENV", tmp_path / "venv")
    monkeypatch.setattr(run, "REQUIREMENTS", tmp_path / "requirements.txt")
    monkeypatch.setattr(run, "DEV_REQUIREMENTS", tmp_path / "requirements-dev.txt")
    installed = []
    monkeypatch.setattr(
        run.subprocess, "run", lambda command, check, cwd: installed.append(Path(command[-1]).name)
    )
    return tmp_path, installed


def test_run_py_installs_requirements_dev_for_the_tests_and_requirements_alone_for_the_demo(fake_venv):
    _, installed = fake_venv
    run.setup(dev=False)
    assert installed == ["requirements.txt"]
    run.setup(dev=True)
    assert installed == ["requirements.txt", "requirements-dev.txt"]
    run.setup(dev=False)
    run.setup(dev=True)
    assert installed == ["requirements.txt", "requirements-dev.txt"], "nothing changed: nothing installed"


def test_run_py_reinstalls_when_either_file_changes(fake_venv):
    folder, installed = fake_venv
    run.setup(dev=True)
    (folder / "requirements-dev.txt").write_text("-r requirements.txt\npytest==2\n")
    run.setup(dev=False)  # the demo needs nothing requirements-dev.txt lists
    run.setup(dev=True)
    (folder / "requirements.txt").write_text("django==2\n")
    run.setup(dev=True)
    assert installed == ["requirements-dev.txt", "requirements-dev.txt", "requirements-dev.txt"]
    (folder / "requirements.txt").write_text("django==3\n")
    run.setup(dev=False)
    assert installed[-1] == "requirements.txt"
