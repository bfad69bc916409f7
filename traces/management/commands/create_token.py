"""Issue an API token: `TOKEN=$(python manage.py create_token ci | tail -1)`; `--scope write`
for one that may also upload simulations (`cascade simulate`)."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from cascade.commands import require_migrated_database
from traces import audit
from traces.models import ApiToken, AuditAction, TokenScope
from traces.throttling import validate_rate


class Command(BaseCommand):
    help = "Create the API user NAME if needed and print a new Bearer token (cas_...) as the last line."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the API user the token belongs to, and the token's name")
        parser.add_argument("--expires-in", type=int, metavar="DAYS", help="refuse the token after DAYS days")
        parser.add_argument(
            "--rate",
            default="",
            help='requests it may make, like "100/minute" or "5/h" (default: CASCADE_API_RATE)',
        )
        parser.add_argument(
            "--scope",
            choices=TokenScope.values,
            default=TokenScope.READ,
            help="read: the API's reads (default); write: also uploads simulations (cascade simulate)",
        )

    def handle(self, *args, name, expires_in, rate, scope, **options):
        require_migrated_database()
        if expires_in is not None and expires_in <= 0:
            raise CommandError("--expires-in must be a positive number of days")
        if rate:
            try:
                validate_rate(rate)
            except ValueError as problem:
                raise CommandError(str(problem)) from None
        expires_at = timezone.now() + timedelta(days=expires_in) if expires_in else None
        with transaction.atomic():
            user, created = get_user_model().objects.get_or_create(username=name)
            if created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            record, token = ApiToken.issue(user, name=name, expires_at=expires_at, rate=rate, scope=scope)
            audit.record(AuditAction.TOKEN_CREATE, token=record, detail=audit.token_detail(record))
        until = f", expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else ""
        self.stderr.write(
            f"{'Created' if created else 'Found'} API user {name!r}; new {scope} token {record.prefix}…{until}:"
        )
        self.stdout.write(token)
