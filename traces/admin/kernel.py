"""The kernel list: a million rows, read-only, a page at a time in the primary key's order."""

import threading

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import OuterRef, Subquery
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from traces.admin.display import kernel_name
from traces.admin.filters import ContextFilter, StorableLookups, TraceIdFilter
from traces.admin.paginators import EstimatedCountPaginator
from traces.demangle import REQUEST_BUDGET_SECONDS, Budget, demangle_all
from traces.models import Kernel, KernelName, Trace

# What a page of the list may spend demangling names stored before ingest demangled them:
# one budget a request, shared by its rows (a thread's own: the admin is shared by threads).
page_budget = threading.local()


class KernelPaginator(EstimatedCountPaginator):
    # A deep page's launches found in the primary key's index, then read with their joins.
    page_keys = ("trace_key", "context", "kernel_id")


class KernelAdmin(StorableLookups, admin.ModelAdmin):
    list_display = (
        "trace_display",
        "ctx_column",
        "kernel_id",
        "short_name",
        "grid",
        "block",
        "blocks",
        "threads",
        "insts_column",
        "reported_insts_column",
        "traced",
    )
    # A kernel has no page of its own: its primary key is composite (see traces.admin).
    list_display_links = None
    list_filter = (TraceIdFilter, ContextFilter, "traced")
    search_fields = ("name",)
    # The primary key's order (trace, context, kernel_id): contexts are numbered within a
    # trace in (ctx, device) order, so this is the API's launch order. Django appends "-pk",
    # the same columns, which PostgreSQL drops as redundant: the page is read from the primary
    # key with no sort (test_unfiltered_kernel_changelist_uses_the_planner_estimate_on_postgres).
    ordering = ("trace_key", "context", "kernel_id")
    list_select_related = False
    paginator = KernelPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    sortable_by = ("trace_display", "ctx_column", "kernel_id", "insts_column", "traced")
    list_per_page = 100
    list_max_show_all = 1000

    def get_queryset(self, request):
        """The stored rows with their context and name (joined for the page's rows only: a
        count drops select_related) and the trace's id (a subquery, dropped from a count too),
        rather than `Kernel.objects`' annotations, which every count would join."""
        run = Trace.objects.filter(key=OuterRef("trace_key")).values("id")[:1]
        return Kernel.stored.select_related("launch_context", "kernel_name").annotate(run=Subquery(run))

    def get_search_results(self, request, queryset, search_term):
        """A name search looks in the names table (a few thousand rows), then at the launches
        of the names found, instead of joining every launch to its name."""
        if not search_term:
            return queryset, False
        # The ids as numbers, not a subquery: the planner's statistics then know how many
        # launches these names have (the estimated count of a search across traces).
        names = list(KernelName.objects.filter(name__icontains=search_term).values_list("id", flat=True))
        return queryset.filter(kernel_name__in=names), False

    def changelist_view(self, request, extra_context=None):
        page_budget.budget = Budget(REQUEST_BUDGET_SECONDS)
        try:
            response = super().changelist_view(request, extra_context)
            if hasattr(response, "render"):  # the rows are drawn as the template renders
                response.render()
            return response
        finally:
            page_budget.budget = None

    def get_list_display(self, request):
        # One trace's kernels (the trace page links here): its id on every row would only take
        # the room the names need; the filter shows it.
        if request.GET.get(TraceIdFilter.parameter_name):
            return tuple(name for name in self.list_display if name != "trace_display")
        return self.list_display

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        # Kernels go with their trace: deleting some would make the trace lie.
        return False

    # Cut values and short headers: grid, block, totals and traced must fit beside the names.
    @admin.display(description="ctx", ordering="context")
    def ctx_column(self, obj: Kernel):
        return obj.launch_context.ctx

    @admin.display(description="trace", ordering="trace_key")
    def trace_display(self, obj: Kernel):
        return format_html(
            '<a href="{}" title="{}">{}</a>',
            reverse("admin:traces_trace_change", args=[quote(obj.run)]),
            obj.run,
            Truncator(obj.run).chars(14),
        )

    @admin.display(description="name", ordering="kernel_name")
    def short_name(self, obj: Kernel):
        """The name whole, demangled as ingest stored it (a name stored before that is
        demangled here, within the page's budget), the symbol on hover."""
        name = obj.kernel_name
        demangled = name.demangled
        if demangled is None:
            budget = getattr(page_budget, "budget", None) or Budget(0)
            demangled = demangle_all((name.name,), budget=budget)[name.name]
        return kernel_name(name.name, demangled)

    @admin.display(description="insts", ordering="total_insts", empty_value="-")
    def insts_column(self, obj: Kernel):
        return None if obj.total_insts is None else f"{obj.total_insts:,}"

    @admin.display(description="reported", ordering="total_reported_insts", empty_value="-")
    def reported_insts_column(self, obj: Kernel):
        return None if obj.total_reported_insts is None else f"{obj.total_reported_insts:,}"

    @admin.display(description="grid")
    def grid(self, obj: Kernel) -> str:
        return f"{obj.grid_x}×{obj.grid_y}×{obj.grid_z}"

    @admin.display(description="block")
    def block(self, obj: Kernel) -> str:
        return f"{obj.block_x}×{obj.block_y}×{obj.block_z}"
