"""What every management command checks before it starts: a clear line, not a traceback."""

from django.core.management.base import CommandError
from django.db import DatabaseError, connection

from traces.models import Trace


def require_migrated_database() -> None:
    """Fail with the fix when the database is unreachable or has no tables yet."""
    try:
        tables = connection.introspection.table_names()
    except DatabaseError as error:
        raise CommandError(f"cannot reach the database ({connection.vendor}): {error}".strip()) from None
    if Trace._meta.db_table not in tables:
        name = connection.settings_dict["NAME"]
        raise CommandError(f"the database {name} has no tables yet: run `python manage.py migrate` first")
