"""API tokens in the admin: listed with their use, revoked by deleting, never shown.

A token is shown once, by `manage.py create_token`, and only its digest is stored, so the
admin cannot create one it could display; it lists them (name, user, first characters, scope,
created, last used, expiry, rate), lets an operator change a token's expiry or rate, and
revokes a token by deleting it. A token's scope is shown, never changed: a read token does not
become a write one later; `create_token NAME --scope write` issues one.
"""

from django import forms
from django.contrib import admin
from django.db import transaction
from django.utils.html import format_html

from traces import audit
from traces.admin.filters import StorableLookups
from traces.models import ApiToken, AuditAction
from traces.throttling import validate_rate


@admin.display(description="state")
def token_state(token: ApiToken):
    if token.expired:
        return format_html("<strong>expired</strong>")
    return "active"


class ApiTokenForm(forms.ModelForm):
    """The token's rate checked as the throttle reads it: a typo is an error here, not later."""

    def clean_rate(self) -> str:
        rate = self.cleaned_data["rate"].strip()
        if rate:
            try:
                validate_rate(rate)
            except ValueError as problem:
                raise forms.ValidationError(str(problem).capitalize()) from None
        return rate


class ApiTokenAdmin(StorableLookups, admin.ModelAdmin):
    form = ApiTokenForm
    list_display = (
        "name",
        "user",
        "token",
        "scope",
        "created_at",
        "last_used_at",
        "expires_at",
        "rate",
        token_state,
    )
    list_filter = ("scope", "expires_at")
    search_fields = ("name", "user__username", "prefix")
    ordering = ("name", "-created_at")
    fields = ("name", "user", "token", "scope", "created_at", "last_used_at", "expires_at", "rate")
    readonly_fields = ("user", "token", "scope", "created_at", "last_used_at")
    actions = ("revoke",)

    @admin.display(description="token")
    def token(self, obj: ApiToken) -> str:
        return f"{obj.prefix}…"

    def has_add_permission(self, request) -> bool:
        return False  # `manage.py create_token NAME` shows the new token once

    @admin.action(description="Revoke selected tokens", permissions=("delete",))
    def revoke(self, request, queryset):
        names = sorted(queryset.values_list("name", flat=True))
        self.delete_queryset(request, queryset)
        self.message_user(
            request, f"Revoked {len(names)} token(s): {', '.join(names)}; they stop working at once."
        )

    # Every way the admin revokes or changes a token is in the audit log.

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            tokens = list(queryset.select_related("user"))
            for token in tokens:
                audit.record(
                    AuditAction.TOKEN_REVOKE, request=request, token=token, detail=audit.token_detail(token)
                )
            ApiToken.objects.filter(pk__in=[token.pk for token in tokens]).delete()

    def delete_model(self, request, obj):
        self.delete_queryset(request, ApiToken.objects.filter(pk=obj.pk))

    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            detail = {**audit.token_detail(obj), "changed": sorted(form.changed_data)}
            audit.record(AuditAction.TOKEN_CHANGE, request=request, token=obj, detail=detail)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("user")
