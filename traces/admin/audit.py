"""The audit log in the admin: who did what to which trace or simulation, when, from where.

Read-only: no add, change or delete, not even for a superuser (the model refuses them too).
Filtered by action, where it came from, user and trace, and browsed by date.
"""

from django.contrib import admin

from traces.admin.filters import StorableLookups
from traces.models import AuditEntry

TRACES_OFFERED = 20  # the trace filter offers the traces of the latest entries, not every trace


class AuditTraceFilter(admin.SimpleListFilter):
    """Entries of one trace: the traces the latest entries name, and the one selected (a trace
    reached from elsewhere: `?trace=<id>`)."""

    title = "trace"
    parameter_name = "trace"

    def lookups(self, request, model_admin):
        recent = (
            AuditEntry.objects.exclude(trace_id="")
            .order_by("-at")
            .values_list("trace_id", flat=True)[: TRACES_OFFERED * 5]
        )
        offered = list(dict.fromkeys(recent))[:TRACES_OFFERED]
        if self.value() and self.value() not in offered:
            offered.insert(0, self.value())
        return [(trace_id, trace_id) for trace_id in offered]

    def queryset(self, request, queryset):
        return queryset.filter(trace_id=self.value()) if self.value() else queryset


class AuditEntryAdmin(StorableLookups, admin.ModelAdmin):
    list_display = (
        "at",
        "action",
        "username",
        "token_display",
        "trace_id",
        "simulation",
        "address",
        "source",
    )
    list_filter = ("action", "source", ("user", admin.RelatedOnlyFieldListFilter), AuditTraceFilter)
    search_fields = ("username", "token_prefix", "trace_id", "simulation")
    date_hierarchy = "at"
    ordering = ("-at", "-id")
    list_select_related = ("user",)
    fields = (
        "at",
        "action",
        "source",
        "user",
        "username",
        "token_prefix",
        "trace_id",
        "simulation",
        "address",
        "detail",
    )
    readonly_fields = fields

    @admin.display(description="token", ordering="token_prefix")
    def token_display(self, obj: AuditEntry) -> str:
        return f"{obj.token_prefix}…" if obj.token_prefix else ""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
