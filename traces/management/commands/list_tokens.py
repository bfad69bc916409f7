"""List the API tokens: name, user, prefix, scope, created, last used, expiry. Never the tokens."""

from django.core.management.base import BaseCommand

from cascade.commands import require_migrated_database
from traces.models import ApiToken


def when(value) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M}"


class Command(BaseCommand):
    help = "List the API tokens (their first characters, never the tokens)."

    def handle(self, *args, **options):
        require_migrated_database()
        rows = [("NAME", "USER", "TOKEN", "SCOPE", "CREATED", "LAST USED", "EXPIRES", "RATE")]
        for token in ApiToken.objects.select_related("user").order_by("name", "created_at"):
            expires = when(token.expires_at) + (" (expired)" if token.expired else "")
            rows.append(
                (
                    token.name,
                    token.user.get_username(),
                    f"{token.prefix}…",
                    token.scope,
                    when(token.created_at),
                    when(token.last_used_at),
                    expires,
                    token.rate or "default",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            )
