"""Revoke API tokens by name (or by their first characters): they stop working at once."""

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from cascade.commands import require_migrated_database
from traces.models import ApiToken


class Command(BaseCommand):
    help = "Revoke every API token named NAME, or the one whose first characters are NAME (cas_...)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="a token's name (list_tokens) or its first characters")

    def handle(self, *args, name, **options):
        require_migrated_database()
        matches = ApiToken.objects.filter(Q(name=name) | Q(prefix=name.rstrip("…")))
        count = matches.count()
        if not count:
            raise CommandError(f"no API token is named {name!r} (see manage.py list_tokens)")
        matches.delete()
        self.stdout.write(f"revoked {count} token{'s' if count != 1 else ''} named {name!r}")
