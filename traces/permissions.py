"""Who may read traces through the API: a Bearer token's holder, or whom the admin lets see traces.

A token is issued by an operator (`create_token`) for a script, so holding one is the
permission. A password login (the browsable API's form, or the admin's session) is anyone
with an account: the API lets it read only what the admin would show it, staff with the
`traces.view_trace` permission (superusers have it).
"""

from rest_framework.permissions import BasePermission

from traces.models import ApiToken


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
