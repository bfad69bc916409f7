"""`Authorization: Bearer <token>`, as the API reference documents it."""

from rest_framework import authentication, exceptions

from traces.models import ApiToken, token_digest


class BearerTokenAuthentication(authentication.TokenAuthentication):
    """DRF's token scheme with the "Bearer" keyword and hashed tokens.

    DRF already matches the keyword case-insensitively and answers a bare `Bearer` or a
    token with spaces with 401; this class only changes where the token is looked up.
    """

    keyword = "Bearer"

    def authenticate_credentials(self, key):
        try:
            token = ApiToken.objects.select_related("user").get(digest=token_digest(key))
        except ApiToken.DoesNotExist:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return token.user, token
