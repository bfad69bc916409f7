"""Fixtures the tools tests share: the demo's environment."""

import os

import pytest


@pytest.fixture
def demo_env(tmp_path) -> dict:
    """A fresh machine's environment: no database, bucket, endpoint or broker configured."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("CASCADE_", "DATABASE_URL", "DJANGO_", "AWS_", "CELERY_"))
    }
    env["CASCADE_VAR_DIR"] = str(tmp_path / "demo")
    return env
