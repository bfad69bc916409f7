"""Settings that protect an installation: the embedded secret key."""

import os
import stat
import threading
from pathlib import Path

from cascade import settings as cascade_settings


def test_the_embedded_secret_key_is_never_readable_by_others(tmp_path, monkeypatch):
    monkeypatch.setattr(cascade_settings, "VAR_DIR", tmp_path)
    modes_before_chmod = []
    monkeypatch.setattr(Path, "chmod", lambda path, mode: modes_before_chmod.append(path.stat().st_mode))
    old_umask = os.umask(0o022)
    try:
        key = cascade_settings.embedded_secret_key()
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600
    assert all(stat.S_IMODE(mode) & 0o077 == 0 for mode in modes_before_chmod)
    assert len(key) >= 50
    assert cascade_settings.embedded_secret_key() == key, "made once, then read"


def test_processes_starting_at_once_agree_on_one_key(tmp_path, monkeypatch):
    monkeypatch.setattr(cascade_settings, "VAR_DIR", tmp_path)
    keys = []
    threads = [
        threading.Thread(target=lambda: keys.append(cascade_settings.embedded_secret_key())) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(keys)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret_key"]


def test_a_replica_url_adds_the_replica_its_router_and_middleware(monkeypatch):
    """DATABASE_REPLICA_URL (dj_database_url's format): empty, nothing changes."""
    import importlib

    import pytest
    from django.core.exceptions import ImproperlyConfigured

    import cascade.settings

    try:
        monkeypatch.setenv("DATABASE_URL", "postgres://cascade@primary.internal:5432/cascade")
        monkeypatch.setenv("DATABASE_REPLICA_URL", "")
        plain = importlib.reload(cascade.settings)
        assert set(plain.DATABASES) == {"default"}
        assert "cascade.db_routers.ReplicaReadsMiddleware" not in plain.MIDDLEWARE
        assert not hasattr(plain, "DATABASE_ROUTERS")

        monkeypatch.setenv("DATABASE_REPLICA_URL", "postgres://reader:secret@standby.internal:6432/cascade")
        replicated = importlib.reload(cascade.settings)
        replica = replicated.DATABASES["replica"]
        assert (replica["HOST"], replica["PORT"], replica["USER"], replica["NAME"]) == (
            "standby.internal",
            6432,
            "reader",
            "cascade",
        )
        assert replica["ENGINE"] == "django.db.backends.postgresql"
        assert replica["TEST"] == {"MIRROR": "default"}
        assert replicated.DATABASE_ROUTERS == ["cascade.db_routers.ReplicaRouter"]
        # Decided after the probes (answered first, on their own) and before anything reads.
        middleware = replicated.MIDDLEWARE
        position = middleware.index("cascade.db_routers.ReplicaReadsMiddleware")
        assert middleware[position - 1] == "cascade.health.OperatorEndpointsMiddleware"
        assert position < middleware.index("django.contrib.sessions.middleware.SessionMiddleware")

        monkeypatch.delenv("DATABASE_URL")
        with pytest.raises(ImproperlyConfigured, match="DATABASE_REPLICA_URL"):
            importlib.reload(cascade.settings)
    finally:
        monkeypatch.undo()
        importlib.reload(cascade.settings)


def test_the_broker_url_names_the_demos_file_broker_as_cascade_worker_takes_it(monkeypatch, tmp_path):
    """CELERY_BROKER_URL=filesystem:///FOLDER (cascade_client.broker): kombu's file transport with
    its folders (kombu's option names) beside the visibility timeout; other URLs pass through."""
    import importlib

    import pytest
    from django.core.exceptions import ImproperlyConfigured

    import cascade.settings

    folder = tmp_path / "broker"
    try:
        monkeypatch.setenv("CASCADE_VISIBILITY_TIMEOUT", "86400")
        monkeypatch.setenv("CELERY_BROKER_URL", f"filesystem://{folder}")
        demo = importlib.reload(cascade.settings)
        assert demo.CELERY_BROKER_URL == "filesystem://"
        assert demo.CASCADE_BROKER_URL == f"filesystem://{folder}"
        assert demo.CELERY_BROKER_TRANSPORT_OPTIONS == {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
            "store_processed": False,
            "visibility_timeout": 86400,
        }
        assert (folder / "queue").is_dir() and (folder / "control").is_dir()
        # The demo runs no `celery -A cascade worker`: its re-ingests stay in the web process.
        assert not demo.CASCADE_CELERY_CONFIGURED

        monkeypatch.setenv("CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
        rabbit = importlib.reload(cascade.settings)
        assert rabbit.CELERY_BROKER_URL == "amqp://guest:guest@127.0.0.1:5672//"
        assert rabbit.CELERY_BROKER_TRANSPORT_OPTIONS == {"visibility_timeout": 86400}
        assert rabbit.CASCADE_CELERY_CONFIGURED

        monkeypatch.setenv("CELERY_BROKER_URL", "filesystem://var/broker")
        with pytest.raises(ImproperlyConfigured, match="CELERY_BROKER_URL: .*ABSOLUTE"):
            importlib.reload(cascade.settings)
    finally:
        monkeypatch.undo()
        importlib.reload(cascade.settings)
