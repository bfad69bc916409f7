"""docs/architecture.md's module table matches the folders: a newcomer's map is only as good as
it is true. Every Python module of cascade/, ingest/, simulations/ and traces/ has a row (a folder of
management commands may be one row), and every path the tables name exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
APPS = ("cascade", "ingest", "simulations", "traces")


def table_paths() -> set[str]:
    """The backquoted path in the first column of every table row."""
    paths = set()
    for line in DOC.read_text().splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|", line)
        if match:
            paths.add(match.group(1))
    return paths


def modules() -> list[str]:
    found = []
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if "migrations" in relative.parts or path.name == "__init__.py":
                continue
            found.append(relative.as_posix())
    return sorted(found)


def test_every_module_has_a_row():
    paths = table_paths()
    folders = {path for path in paths if path.endswith("/")}
    missing = [
        module
        for module in modules()
        if module not in paths
        and not any(
            module.startswith(folder) and module.count("/") == folder.count("/") for folder in folders
        )
    ]
    assert missing == [], f"modules without a row in docs/architecture.md: {missing}"


def test_every_row_names_a_path_that_exists():
    gone = sorted(path for path in table_paths() if not (ROOT / path).exists())
    assert gone == [], f"rows of docs/architecture.md for paths that do not exist: {gone}"


def test_the_table_has_rows():
    # A table the regex stopped reading would pass both tests above with nothing checked.
    assert {"ingest/bucket.py", "traces/models/trace.py", "cascade/settings.py"} <= table_paths()
