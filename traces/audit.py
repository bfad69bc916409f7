"""`record`: the one way an audit entry is written (`traces.models.AuditEntry`).

Every write through the API, every operator's action in the admin and every command that
changes data calls it once, with what it knows: the request (whose user, token and address it
reads), or for a command line nothing (the login that ran it is the one named). The address is
the client's as `cascade.addresses.client_address` finds it behind the proxy, as the throttles
and the login lockouts key on it.

It never stores a token or a secret: a token is kept by its prefix, and a `detail` string that
holds a whole token, or a presigned URL's signature, is cut before it is written.
"""

import getpass
import re

from cascade.addresses import client_address
from traces.models import ApiToken, AuditAction, AuditEntry, AuditSource

# A whole token (TOKEN_PREFIX and its 43 characters), anywhere in a string.
TOKEN_TEXT = re.compile(r"cas_[A-Za-z0-9_-]{20,}")
SIGNED_URL = re.compile(r"(?i)x-amz-(signature|credential|security-token)|[?&]signature=")
DETAIL_TEXT_MAX = 500  # a detail names files and reasons; longer text is cut


def record(
    action: AuditAction | str,
    *,
    request=None,
    user=None,
    token=None,
    trace_id: str | None = None,
    simulation=None,
    detail: dict | None = None,
) -> AuditEntry:
    """Write one audit entry for `action` (an `AuditAction`).

    `request`: an API or admin request, from which the user, the token (an API request's
    `request.auth`) and the client's address are read unless `user` or `token` are given.
    `token`: an `ApiToken`, or a token's prefix (only its first characters are kept).
    `simulation`: a simulation's name, or a simulation (its name and trace are taken).
    `detail`: a small JSON object of what else says what happened (names, counts, a reason).
    """
    action = AuditAction(action)
    if request is not None:
        if user is None and getattr(request, "user", None) is not None and request.user.is_authenticated:
            user = request.user
        if token is None and isinstance(getattr(request, "auth", None), ApiToken):
            token = request.auth
    if simulation is not None and not isinstance(simulation, str):
        trace_id = trace_id or simulation.trace_id
        simulation = simulation.name
    if request is None:
        source = AuditSource.COMMAND
    elif isinstance(getattr(request, "auth", None), ApiToken):
        source = AuditSource.API
    else:
        source = AuditSource.ADMIN
    return AuditEntry.objects.create(
        action=action,
        source=source,
        user=user,
        username=user.get_username() if user is not None else _login() if request is None else "",
        token_prefix=_prefix(token),
        trace_id=trace_id or "",
        simulation=simulation or "",
        address=client_address(request) if request is not None else None,
        detail=_scrubbed(detail or {}),
    )


def token_detail(token: ApiToken) -> dict:
    """What an entry says of a token created, changed or revoked: whose, what for, what it may
    do; never the token."""
    return {
        "name": token.name,
        "user": token.user.get_username(),
        "scope": token.scope,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
        "rate": token.rate,
    }


def _prefix(token) -> str:
    if token is None:
        return ""
    prefix = token.prefix if isinstance(token, ApiToken) else str(token)
    return prefix[:12]


def _login() -> str:
    """Who ran the command, as the system names them (empty where it cannot say)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no password entry (a container's uid)
        return ""


def _scrubbed(value):
    """`value` with no whole token and no signed URL in any of its strings."""
    if isinstance(value, dict):
        return {str(key): _scrubbed(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrubbed(item) for item in value]
    if isinstance(value, str):
        if SIGNED_URL.search(value):
            return "(a signed URL, left out)"
        value = TOKEN_TEXT.sub(lambda match: match.group()[:12] + "…", value)
        return value[:DETAIL_TEXT_MAX]
    return value
