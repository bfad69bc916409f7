"""The demo's embedded database under its writers: no "database is locked".

The poller, the web server and load_samples write one SQLite file. A busy timeout alone does not
help a transaction that read first and then writes: SQLite cannot let it wait (that could
deadlock) and answers "database is locked" at once. Here several processes' worth of such
transactions (threads, each with its own connection, as Django gives them) run together on the
settings' SQLite options, in a child process with no DATABASE_URL, as the demo runs.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONCURRENT_WRITERS = """
import json, os, sys, threading, time
import django
django.setup()
from django.conf import settings
from django.db import OperationalError, connection, transaction

if sys.argv[1] == "deferred":  # what the settings had before: a busy timeout and nothing else
    settings.DATABASES["default"]["OPTIONS"].pop("transaction_mode", None)
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE writers (n integer)")
    cursor.execute("PRAGMA journal_mode")
    journal = cursor.fetchone()[0]
connection.close()
errors = []

def read_then_write():
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM writers")
                time.sleep(0.3)  # another writer comes in between
                cursor.execute("INSERT INTO writers VALUES (1)")
    except OperationalError as error:
        errors.append(str(error))
    finally:
        connection.close()

threads = [threading.Thread(target=read_then_write) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM writers")
    rows = cursor.fetchone()[0]
print(json.dumps({"engine": settings.DATABASES["default"]["ENGINE"], "journal": journal, "errors": errors, "rows": rows}))
"""


def run_writers(tmp_path: Path, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "CASCADE_", "DJANGO_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="cascade.settings",
        CASCADE_VAR_DIR=str(tmp_path / mode),
        PYTHONPATH=str(ROOT),
    )
    result = subprocess.run(
        [sys.executable, "-c", CONCURRENT_WRITERS, mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_concurrent_writers_on_the_embedded_database_wait_their_turn(tmp_path):
    report = run_writers(tmp_path, "settings")
    assert report["engine"] == "django.db.backends.sqlite3" and report["journal"] == "wal"
    assert report["errors"] == [] and report["rows"] == 4


def test_with_a_busy_timeout_alone_they_were_locked_out(tmp_path):
    """The failure the first demo met, so that the test above is known to test something."""
    report = run_writers(tmp_path, "deferred")
    assert report["errors"] and set(report["errors"]) == {"database is locked"}
