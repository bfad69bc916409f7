"""`Authorization: Bearer <token>`, as the API reference documents it."""

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from traces.models import ApiToken, token_digest

# A token's last use is written at most this often: a busy client costs no write per request.
LAST_USED_EVERY = timedelta(minutes=1)


class BearerTokenAuthentication(authentication.TokenAuthentication):
    """DRF's token scheme with the "Bearer" keyword and hashed tokens.

    DRF already matches the keyword case-insensitively and answers a bare `Bearer` or a
    token with spaces with 401; this class only changes where the token is looked up, and
    refuses expired tokens.
    """

    keyword = "Bearer"

    def authenticate_credentials(self, key):
        try:
            token = ApiToken.objects.select_related("user").get(digest=token_digest(key))
        except ApiToken.DoesNotExist:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        if token.expired:
            raise exceptions.AuthenticationFailed("Token expired.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return token.user, token
