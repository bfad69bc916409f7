"""Revoke API tokens by name (or by their first characters): they stop working at once."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.db.models import Q

from cascade.commands import require_migrated_database
from traces import audit
from traces.models import ApiToken, AuditAction


class Command(BaseCommand):
    help = "Revoke every API token named NAME, or the one whose first characters are NAME (cas_...)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="a token's name (list_tokens) or its first characters")

    def handle(self, *args, name, **options):
        require_migrated_database()
        with transaction.atomic():
            matches = list(
                ApiToken.objects.select_related("user").filter(Q(name=name) | Q(prefix=name.rstrip("…")))
            )
            count = len(matches)
            if not count:
                raise CommandError(f"no API token is named {name!r} (see manage.py list_tokens)")
            for token in matches:
                audit.record(AuditAction.TOKEN_REVOKE, token=token, detail=audit.token_detail(token))
            ApiToken.objects.filter(pk__in=[token.pk for token in matches]).delete()
        self.stdout.write(f"revoked {count} token{'s' if count != 1 else ''} named {name!r}")
