"""What a deployment installs, what the demo adds and what the tests add: requirements.txt holds
what the web, poller and Celery processes run; requirements-demo.txt adds the demo's embedded S3
(moto's server), and `python3 run.py demo` installs it; requirements-dev.txt adds the tools that
test, lint and measure them, and `python3 run.py test` and `bench` install it."""

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

import run

ROOT = Path(__file__).resolve().parent.parent
OWN_PACKAGES = {
    "cascade",
    "ingest",
    "simulations",
    "traces",
    "tools",
    "tests",
    "bench",
    "run",
    "cascade_client",
}
# Imported by the tests, the bench or CI, never by what a deployment runs.
DEV_TOOLS = {"pytest", "pytest-django", "pytest-xdist", "hypothesis", "schemathesis", "selenium", "ruff"}
# The demo's embedded S3 endpoint, and what only it brings.
DEMO_ONLY = {"moto", "flask", "werkzeug"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path: Path) -> dict[str, str]:
    """{distribution: version} of a requirements file, following its `-r` includes."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found |= pinned(path.parent / line[3:].strip())
        elif line.startswith("./"):
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
    assert DEV_TOOLS.isdisjoint(pinned(ROOT / "requirements-demo.txt"))
    assert DEV_TOOLS <= set(pinned(ROOT / "requirements-dev.txt"))


def test_a_deployment_installs_no_s3_server_the_demo_and_the_tests_do():
    assert DEMO_ONLY.isdisjoint(installed_by(pinned(ROOT / "requirements.txt")))
    assert set(pinned(ROOT / "requirements-demo.txt")) - set(pinned(ROOT / "requirements.txt")) == {"moto"}
    assert DEMO_ONLY <= installed_by(pinned(ROOT / "requirements-demo.txt"))
    assert DEMO_ONLY <= installed_by(pinned(ROOT / "requirements-dev.txt"))


def test_a_deployment_runs_without_the_tools_app_the_demo_and_the_tests_with_it():
    from django.conf import settings as running

    import cascade.settings
    import cascade.settings_demo

    assert "tools" not in cascade.settings.INSTALLED_APPS
    assert cascade.settings_demo.INSTALLED_APPS == [*cascade.settings.INSTALLED_APPS, "tools"]
    assert "tools" in running.INSTALLED_APPS  # the tests call load_samples and generate_trace


def local_projects(path: Path) -> list[str]:
    """The path lines of a requirements file (`./NAME`): projects installed from the checkout."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line.startswith("./")]


def test_the_one_unpinned_line_is_the_client_of_this_repository():
    """The server installs the client from its folder (its path rule is the server's too), as a
    package (not editable: a deployment runs no checkout's sources but its own), and run.py
    installs it again when its sources change."""
    assert local_projects(ROOT / "requirements.txt") == ["./client"]
    assert (ROOT / "client" / "pyproject.toml").is_file()
    assert local_projects(ROOT / "requirements-demo.txt") == []
    assert local_projects(ROOT / "requirements-dev.txt") == []
    assert not any(
        line.startswith(("-e", "--editable"))
        for name in ("requirements.txt", "requirements-demo.txt", "requirements-dev.txt")
        for line in (ROOT / name).read_text().splitlines()
    )
    assert metadata.distribution("cascade-client").version


def test_every_file_pins_every_line():
    for name in ("requirements.txt", "requirements-demo.txt", "requirements-dev.txt"):
        assert all(pinned(ROOT / name).values()), name


def test_what_a_deployment_runs_imports_only_what_requirements_txt_installs():
    deployment = installed_by(pinned(ROOT / "requirements.txt"))
    modules = distributions_of(third_party_imports("cascade", "ingest", "simulations", "traces"))
    assert {module for module, names in modules.items() if not names & deployment} == set()


def test_the_demo_and_its_tools_import_only_what_requirements_demo_txt_installs():
    demo = installed_by(pinned(ROOT / "requirements-demo.txt"))
    modules = distributions_of(third_party_imports("tools"))
    assert {module for module, names in modules.items() if not names & demo} == set()


def test_the_tests_and_the_bench_import_only_what_requirements_dev_txt_installs():
    dev = installed_by(pinned(ROOT / "requirements-dev.txt"))
    modules = distributions_of(third_party_imports("tests", "bench"))
    assert {module for module, names in modules.items() if not names & dev} == set()


@pytest.fixture
def fake_venv(tmp_path, monkeypatch):
    """run.py's setup pointed at a venv that exists and at requirement files and a client in
    tmp_path; the files pip is asked to install are recorded, not installed."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    (tmp_path / "requirements.txt").write_text("./client\ndjango==1\n")
    (tmp_path / "requirements-demo.txt").write_text("-r requirements.txt\nmoto==1\n")
    (tmp_path / "requirements-dev.txt").write_text("-r requirements-demo.txt\npytest==1\n")
    (tmp_path / "client" / "cascade_client").mkdir(parents=True)
    (tmp_path / "client" / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "client" / "cascade_client" / "cli.py").write_text("def main(): pass\n")
    monkeypatch.setattr(run, "VENV", tmp_path / "venv")
    monkeypatch.setattr(run, "REQUIREMENTS", tmp_path / "requirements.txt")
    monkeypatch.setattr(run, "DEMO_REQUIREMENTS", tmp_path / "requirements-demo.txt")
    monkeypatch.setattr(run, "DEV_REQUIREMENTS", tmp_path / "requirements-dev.txt")
    monkeypatch.setattr(run, "CLIENT", tmp_path / "client")
    installed = []
    monkeypatch.setattr(
        run.subprocess, "run", lambda command, check, cwd: installed.append(Path(command[-1]).name)
    )
    return tmp_path, installed


def test_run_py_installs_requirements_dev_for_the_tests_and_requirements_demo_for_the_demo(fake_venv):
    _, installed = fake_venv
    run.setup(dev=False)
    assert installed == ["requirements-demo.txt"]
    run.setup(dev=True)
    assert installed == ["requirements-demo.txt", "requirements-dev.txt"]
    run.setup(dev=False)
    run.setup(dev=True)
    assert installed == ["requirements-demo.txt", "requirements-dev.txt"], (
        "nothing changed: nothing installed"
    )


def test_run_py_reinstalls_when_any_file_changes(fake_venv):
    folder, installed = fake_venv
    run.setup(dev=True)
    (folder / "requirements-dev.txt").write_text("-r requirements-demo.txt\npytest==2\n")
    run.setup(dev=False)  # the demo needs nothing requirements-dev.txt lists
    run.setup(dev=True)
    (folder / "requirements.txt").write_text("./client\ndjango==2\n")
    run.setup(dev=True)
    (folder / "requirements-demo.txt").write_text("-r requirements.txt\nmoto==2\n")
    run.setup(dev=True)
    assert installed == ["requirements-dev.txt"] * 4
    (folder / "requirements.txt").write_text("./client\ndjango==3\n")
    run.setup(dev=False)
    assert installed[-1] == "requirements-demo.txt"


def test_run_py_reinstalls_when_the_client_changes_and_not_for_what_building_it_leaves(fake_venv):
    folder, installed = fake_venv
    run.setup(dev=False)
    (folder / "client" / "build" / "lib").mkdir(parents=True)
    (folder / "client" / "build" / "lib" / "cli.py").write_text("built\n")
    (folder / "client" / "cascade_client.egg-info").mkdir()
    (folder / "client" / "cascade_client.egg-info" / "PKG-INFO").write_text("built\n")
    (folder / "client" / "cascade_client" / "__pycache__").mkdir()
    (folder / "client" / "cascade_client" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0")
    run.setup(dev=False)
    assert installed == ["requirements-demo.txt"], "only build outputs appeared"
    (folder / "client" / "cascade_client" / "cli.py").write_text("def main(): return 1\n")
    run.setup(dev=False)
    (folder / "client" / "cascade_client" / "pull.py").write_text("")
    run.setup(dev=False)
    assert installed == ["requirements-demo.txt"] * 3
