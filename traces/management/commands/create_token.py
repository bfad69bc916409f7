"""Issue an API token: `TOKEN=$(python manage.py create_token ci | tail -1)`."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from cascade.commands import require_migrated_database
from traces.models import ApiToken


class Command(BaseCommand):
    help = "Create the API user NAME if needed and print a new Bearer token as the last line."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the API user the token belongs to")

    def handle(self, *args, name, **options):
        require_migrated_database()
        user, created = get_user_model().objects.get_or_create(username=name)
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        _, token = ApiToken.issue(user)
        self.stderr.write(f"{'Created' if created else 'Found'} API user {name!r}; new token:")
        self.stdout.write(token)
