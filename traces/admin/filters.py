"""The list filters: outdated traces, rows by owner, a trace's kernels by trace and context; and what a
filter or an id that no row can match (a NUL) is answered with."""

from django.contrib import admin
from django.http import HttpResponseBadRequest

from traces import launch_summaries
from traces.models import CURRENT_PARSER_VERSION, KernelContext, Trace
from traces.storable_text import is_storable


class ParserVersionFilter(admin.SimpleListFilter):
    """Traces an older version of the stats parser read: what `--reparse-outdated` would re-read."""

    title = "parser"
    parameter_name = "parser"

    def lookups(self, request, model_admin):
        return [("outdated", "outdated"), ("current", "current")]

    def queryset(self, request, queryset):
        if self.value() == "outdated":
            return queryset.filter(parser_version__lt=CURRENT_PARSER_VERSION)
        if self.value() == "current":
            return queryset.filter(parser_version=CURRENT_PARSER_VERSION)
        return queryset


class OwnerFilter(admin.SimpleListFilter):
    """Rows one user owns (a pushed trace, an uploaded simulation), by the usernames the model's
    own rows name: read where the model is (the replica), not from the user table's."""

    title = "owner"
    parameter_name = "owner"

    def lookups(self, request, model_admin):
        names = (
            model_admin.model.objects.exclude(owner=None)
            .values_list("owner__username", flat=True)
            .distinct()
            .order_by("owner__username")
        )
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(owner__username=value) if value else queryset


class TraceIdFilter(admin.SimpleListFilter):
    """Kernels of one trace: offered from the trace's page, not as a list of every trace."""

    title = "trace"
    parameter_name = "trace"

    def lookups(self, request, model_admin):
        value = self.value()
        return [(value, value)] if value else []

    def has_output(self) -> bool:
        return self.value() is not None

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        # By its key, not a join on the id: the planner then knows how many launches it has.
        key = Trace.objects.filter(pk=self.value()).values_list("key", flat=True).first()
        return queryset.none() if key is None else queryset.filter(trace_key=key)


class ContextFilter(admin.SimpleListFilter):
    """The contexts of the selected trace; with no trace selected, a list of every context
    would cost a scan of every kernel."""

    title = "context"
    parameter_name = "ctx"

    def lookups(self, request, model_admin):
        trace_id = request.GET.get(TraceIdFilter.parameter_name)
        if not trace_id:
            return []
        return [(ctx, ctx) for ctx in launch_summaries.trace_contexts(trace_id)]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        trace_id = request.GET.get(TraceIdFilter.parameter_name)
        if not trace_id:
            return queryset.filter(launch_context__ctx=self.value())
        # The context's numbers in the trace: the primary key's second column.
        numbers = KernelContext.objects.filter(trace__id=trace_id, ctx=self.value()).values("index")
        return queryset.filter(context__in=numbers)


class StorableLookups:
    """A ModelAdmin mixin: NUL, which PostgreSQL refuses in a query (a 500), never reaches one.

    In a list's filters or search it is a 400 that says why; in an object's id, no object
    (Django's "does not exist" answer).
    """

    def changelist_view(self, request, extra_context=None):
        if not all(is_storable(text) for key, values in request.GET.lists() for text in (key, *values)):
            return HttpResponseBadRequest(
                "A filter or search with a NUL character: no trace, kernel or token holds one.",
                content_type="text/plain; charset=utf-8",
            )
        return super().changelist_view(request, extra_context)

    def get_object(self, request, object_id, from_field=None):
        if not is_storable(object_id):
            return None
        return super().get_object(request, object_id, from_field)
