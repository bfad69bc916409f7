"""API tokens: `ApiToken`, a Bearer token whose SHA-256 alone is stored, and its `TokenScope`."""

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOKEN_PREFIX = "cas_"  # so that secret scanners can spot a leaked Cascade token


class TokenScope(models.TextChoices):
    """What a token's holder may do: `read` everything the API serves (every token before
    scopes were), or `write`, which may also upload a trace's simulations."""

    READ = "read", "read"
    WRITE = "write", "write"


class ApiToken(models.Model):
    """A Bearer token. Only its SHA-256 is stored: a leaked database leaks no token.

    Tokens read `cas_<43 characters>`; `prefix` keeps the first twelve, enough to tell
    tokens apart in a list without revealing them.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=150, default="", help_text="What the token is for; revoke_token NAME.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=16, editable=False, help_text="The token's first characters.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Written at most once a minute."
    )
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Refused from then on; empty: never.")
    rate = models.CharField(
        max_length=32,
        blank=True,
        default="",
        help_text='Requests this token may make, like "100/minute"; empty: CASCADE_API_RATE.',
    )
    scope = models.CharField(
        max_length=8,
        choices=TokenScope.choices,
        default=TokenScope.READ,
        db_default=TokenScope.READ,
        help_text="read: the API's reads; write: also uploads simulations (create_token --scope write).",
    )

    class Meta:
        verbose_name = "API token"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name or self.user} ({self.prefix}…)"

    @classmethod
    def issue(
        cls, user, *, name: str = "", expires_at=None, rate: str = "", scope: str = TokenScope.READ
    ) -> tuple["ApiToken", str]:
        """Create a token for `user`; the plain token is returned once and never stored."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = cls.objects.create(
            user=user,
            name=name or user.get_username(),
            digest=token_digest(token),
            prefix=token[:12],
            expires_at=expires_at,
            rate=rate,
            scope=scope,
        )
        return record, token

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()
