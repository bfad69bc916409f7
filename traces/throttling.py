"""How many requests an API token may make: CASCADE_API_RATE, or the token's own rate; and
how many requests without valid credentials one address may make: CASCADE_ANON_RATE.

A rate is DRF's grammar, `<requests>/<period>`, with the periods DRF documents (s, sec, m,
min, h, hour, d, day) and the words our help texts use (second, minute). It is checked where
it is entered (`create_token --rate`, the admin's token form, `check` for CASCADE_API_RATE);
a rate stored before that check existed never fails a request: its token gets
CASCADE_API_RATE, and the log says which token to fix.
"""

import logging
import re

from django.conf import settings
from django.core import checks
from rest_framework.throttling import SimpleRateThrottle

from cascade.addresses import client_address
from traces.models import ApiToken
from traces.params import shown

logger = logging.getLogger(__name__)

RATE = re.compile(r"[0-9]+/(?:s|sec|second|m|min|minute|h|hour|d|day)")
RATE_FORM = (
    "a rate reads like 100/minute: a whole number of requests from 1, a slash, and second, minute, "
    "hour or day (or s, sec, m, min, h, d)"
)


def validate_rate(rate: str) -> None:
    """A ValueError that says what a rate looks like, for anything DRF's throttle cannot read."""
    if not RATE.fullmatch(rate) or int(rate.partition("/")[0]) < 1:
        raise ValueError(f"{RATE_FORM}; not {shown(rate, 40)}")


class TokenRateThrottle(SimpleRateThrottle):
    """Per token, not per user or address: each script's token gets its own allowance.

    Counts live in Django's cache (CASCADE_CACHE_URL: Redis, so that every web worker shares
    them). Browser sessions (operators in the browsable API) are not throttled here.
    """

    scope = "token"
    # (token, rate) pairs already logged as unreadable: one warning per process, not per request.
    warned: set[tuple[int, str]] = set()

    def get_rate(self) -> str | None:
        """The default allowance; empty: unlimited (DRF's None)."""
        return settings.CASCADE_API_RATE or None

    def parse_rate(self, rate: str | None) -> tuple[int | None, int | None]:
        if rate is not None:
            validate_rate(rate)
        return super().parse_rate(rate)

    def token_rate(self, token: ApiToken) -> str | None:
        """The token's own rate, or the default when it has none or one that cannot be read."""
        if not token.rate:
            return self.rate
        try:
            validate_rate(token.rate)
        except ValueError as problem:
            if (token.pk, token.rate) not in self.warned:
                self.warned.add((token.pk, token.rate))
                logger.warning(
                    "API token %r (%s…) has an unreadable rate, so it gets CASCADE_API_RATE (%s) until "
                    "an operator fixes it in the admin: %s",
                    token.name,
                    token.prefix,
                    self.rate or "unlimited",
                    problem,
                )
            return self.rate
        return token.rate

    def allow_request(self, request, view):
        if not isinstance(request.auth, ApiToken):
            return True
        self.rate = self.token_rate(request.auth)
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class AnonAddressThrottle(SimpleRateThrottle):
    """Requests without valid credentials, per client address (`cascade.addresses`: the
    real client behind CASCADE_TRUSTED_PROXIES, never a forged X-Forwarded-For): DRF's
    AnonRateThrottle keyed on that address, at CASCADE_ANON_RATE.

    A request is counted once, by whichever asks first: the authentication step, for a request
    that will be a 401 (DRF checks permissions, which refuse it, before throttles: a guessed
    token would never be counted), or DRF's throttles, for the public routes (the index, the
    schema). Token holders and logged-in operators are not counted here.
    """

    scope = "anon"

    def get_rate(self) -> str | None:
        return settings.CASCADE_ANON_RATE or None

    def parse_rate(self, rate: str | None) -> tuple[int | None, int | None]:
        if rate is not None:
            validate_rate(rate)
        return super().parse_rate(rate)

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": client_address(request) or "-"}

    def allow_request(self, request, view):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return True
        return self.allow_anonymous(request, view)

    def allow_anonymous(self, request, view=None) -> bool:
        """The check for a request known to carry no valid credentials (reads no `request.user`)."""
        # The authentication step and the throttles are handed the same DRF request.
        if getattr(request, "cascade_anonymous_counted", False):
            return True
        request.cascade_anonymous_counted = True
        return super().allow_request(request, view)


@checks.register(checks.Tags.security)
def check_api_rate(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """A CASCADE_API_RATE or CASCADE_ANON_RATE the throttle cannot read would fail every
    request it counts: refuse to start."""
    errors = []
    for name in ("CASCADE_API_RATE", "CASCADE_ANON_RATE"):
        if not getattr(settings, name):
            continue
        try:
            validate_rate(getattr(settings, name))
        except ValueError as problem:
            errors.append(checks.Error(f"{name}: {problem}", id="cascade.E001"))
    return errors
