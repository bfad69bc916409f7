"""Who may read traces through the API: a Bearer token's holder, or whom the admin lets see traces;
who may upload or delete a simulation, or push a run: the holder of a `write` token (whose
simulation or run it is, ingestion checks: the owner is recorded in the bucket).

A token is issued by an operator (`create_token`) for a script, so holding one is the
permission. A password login (the browsable API's form, or the admin's session) is anyone
with an account: the API lets it read only what the admin would show it, staff with the
`traces.view_trace` permission (superusers have it).

Writing into the bucket (a simulation's upload URLs, its completion) is a script's job
(`cascade simulate`), so it takes a token issued for it: `create_token NAME --scope write`.
"""

from rest_framework.permissions import BasePermission

from traces.models import ApiToken, TokenScope


class CanViewTraces(BasePermission):
    message = (
        "reading traces with a login needs staff status and the view trace permission, as in the "
        "admin; scripts use a Bearer token"
    )

    def has_permission(self, request, view) -> bool:
        user = request.user
        if user is None or not user.is_authenticated:
            return False
        if isinstance(request.auth, ApiToken):
            return True
        return user.is_active and user.is_staff and user.has_perm("traces.view_trace")


class CanUploadSimulations(BasePermission):
    """A `write` token. A read token is a 403 that says its scope and how to get a write one."""

    doing = "uploading a simulation"
    message = (
        "uploading a simulation needs a write token (manage.py create_token NAME --scope write); "
        "a login cannot upload"
    )

    def has_permission(self, request, view) -> bool:
        user = request.user
        if user is None or not user.is_authenticated or not user.is_active:
            return False
        token = request.auth
        if not isinstance(token, ApiToken):
            return False
        if token.scope != TokenScope.WRITE:
            self.message = (
                f"this token's scope is {token.scope}: {self.doing} needs a write token "
                "(manage.py create_token NAME --scope write)"
            )
            return False
        return True


class CanDeleteSimulations(CanUploadSimulations):
    doing = "deleting a simulation"
    message = (
        "deleting a simulation needs a write token (manage.py create_token NAME --scope write); "
        "a login cannot delete"
    )


class CanPushTraces(CanUploadSimulations):
    """A `write` token, as for a simulation: pushing a run (`cascade push`) is a script's job too.
    Whose run it is, ingestion checks (the owner record in the bucket)."""

    doing = "pushing a trace"
    message = (
        "pushing a trace needs a write token (manage.py create_token NAME --scope write); a login cannot push"
    )


class CanWriteSweeps(CanUploadSimulations):
    """A `write` token: creating or cancelling a sweep (its owner or staff, the sweeps' own
    check), and a worker's reports of the jobs it runs (any write token)."""

    doing = "a sweep's writes"
    message = (
        "creating or cancelling a sweep, or reporting a job, needs a write token "
        "(manage.py create_token NAME --scope write); a login cannot"
    )
