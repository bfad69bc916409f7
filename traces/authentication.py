"""`Authorization: Bearer <token>`, as the API reference documents it."""

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.authentication import get_authorization_header

from traces.models import ApiToken, token_digest
from traces.throttling import AnonAddressThrottle

# A token's last use is written at most this often: a busy client costs no write per request.
LAST_USED_EVERY = timedelta(minutes=1)


USE_BEARER = "use `Authorization: Bearer <token>`"


class BearerTokenAuthentication(authentication.TokenAuthentication):
    """DRF's token scheme with the "Bearer" keyword and hashed tokens.

    The keyword matches in any case, and spaces around the header's value or between its two
    words are trimmed (`Bearer  cas_x `: the token is `cas_x`). Every refusal of the header says
    what to send instead: another scheme (`Token`, `Basic`), a bare `Bearer`, a token with
    spaces. The token is looked up by its digest; expired tokens are refused.

    A request that will not be authenticated (a refused header, or none and no login) is
    counted here against its address's CASCADE_ANON_RATE, and a 429 once past it: DRF's
    throttles run after the permission check that would answer it 401.
    """

    keyword = "Bearer"

    def authenticate(self, request):
        try:
            return self.read_header(request)
        except exceptions.AuthenticationFailed:
            self.count_anonymous(request)
            raise

    @staticmethod
    def count_anonymous(request) -> None:
        throttle = AnonAddressThrottle()
        if not throttle.allow_anonymous(request):
            raise exceptions.Throttled(throttle.wait())

    def read_header(self, request):
        words = get_authorization_header(request).split()
        if words and words[0].lower() != self.keyword.lower().encode():
            scheme = words[0].decode("latin-1")[:20]
            raise exceptions.AuthenticationFailed(
                f"the Authorization header's scheme is {scheme!r}, which Cascade does not read; {USE_BEARER}"
            )
        if len(words) == 1:
            raise exceptions.AuthenticationFailed(f"the Authorization header has no token; {USE_BEARER}")
        if len(words) > 2:
            raise exceptions.AuthenticationFailed(
                f"the Authorization header has {len(words) - 1} words after Bearer (a token has no spaces); "
                f"{USE_BEARER}"
            )
        if not words:
            # The login's session, read as SessionAuthentication (next in line) reads it.
            if authentication.SessionAuthentication().authenticate(request) is None:
                self.count_anonymous(request)
            return None
        return super().authenticate(request)

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
