"""Helpers the suite's modules share: manage.py in a child process (not tests themselves)."""

import os
import subprocess
import sys
from pathlib import Path


def manage(var_dir: Path, *args, **env) -> subprocess.CompletedProcess:
    """manage.py on embedded defaults, keeping its SQLite database (and key) in `var_dir`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CASCADE_", "DATABASE_URL", "DJANGO_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, "CASCADE_VAR_DIR": str(var_dir), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


ROOT = Path(__file__).resolve().parents[1]
