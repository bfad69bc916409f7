"""What the process of a pass loads: every module imported stays for the process's
life, so what a pass never uses is not imported by it. Each check starts a new interpreter, as
`manage.py ingest_traces` does."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

# What `manage.py ingest_traces` imports before its pass, then the modules the pass runs.
A_PASS = """
import sys
import django
django.setup()
from ingest.management.commands import ingest_traces
from ingest import bucket, decision, parse, passes, read_ahead, scan, stats, timing
from traces import kernel_store, services
print(" ".join(sorted(sys.modules)))
"""


@pytest.fixture(scope="module")
def modules_of_a_pass() -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CASCADE_", "DJANGO_"))}
    done = subprocess.run(
        [sys.executable, "-c", A_PASS],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "cascade.settings", "DJANGO_SECRET_KEY": "test"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(done.stdout.split())


def test_a_pass_does_not_load_celery(modules_of_a_pass):
    # Celery and kombu were 4 MB of every pass, for a soft time limit only a worker raises.
    assert "ingest.passes" in modules_of_a_pass
    assert not {name for name in modules_of_a_pass if name.split(".")[0] in {"celery", "kombu"}}
