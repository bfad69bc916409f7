"""How many requests an API token may make: CASCADE_API_RATE, or the token's own rate."""

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from traces.models import ApiToken

PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """`"100/minute"` -> (100, 60); a clear ValueError for anything else."""
    count, _, period = rate.partition("/")
    if not count.isdigit() or period not in PERIODS:
        raise ValueError(f"a rate reads like 100/minute (second, minute, hour or day), not {rate!r}")
    return int(count), PERIODS[period]


class TokenRateThrottle(SimpleRateThrottle):
    """Per token, not per user or address: each script's token gets its own allowance.

    Counts live in Django's cache (CASCADE_CACHE_URL: Redis, so that every web worker shares
    them). Browser sessions (operators in the browsable API) are not throttled here.
    """

    scope = "token"

    def __init__(self):
        pass  # the rate depends on the request's token: set in allow_request

    def allow_request(self, request, view):
        token = request.auth if isinstance(request.auth, ApiToken) else None
        rate = (token.rate if token is not None else "") or settings.CASCADE_API_RATE
        if token is None or not rate:
            return True
        self.rate = rate
        self.num_requests, self.duration = parse_rate(rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
