"""The trace list and a trace's page, and what an operator can do to a trace.

Nothing is edited here: the bucket is the source of truth. The actions re-ingest a trace
(the poller's own code path), mark it failed, or delete it; "Compare" puts two traces side by
side, kernel by kernel. The page summarises the kernels from two queries
(`traces.launch_summaries.kernel_summary`) and shows their mix, steps and calibration from five more
(`analysis_pages`), in one snapshot, kept for a big trace until it changes
(`analysis_pages.trace_page_reads`); deleting counts them instead of collecting a million
kernels one by one for Django's confirmation page.
"""

import json

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import CASCADE
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from traces import analysis, audit
from traces.admin.analysis_pages import compare_context, trace_page_reads
from traces.admin.bucket_records import FromTheBucket
from traces.admin.chart import instruction_chart
from traces.admin.display import (
    compact_datetime,
    kernel_changelist_url,
    kernel_name,
    nothing_to_parse,
    size_html,
    state_badge,
    upload_notice,
)
from traces.admin.filters import OwnerFilter, ParserVersionFilter, StorableLookups
from traces.admin.paginators import EstimatedCountPaginator
from traces.demangle import demangle_all
from traces.models import CURRENT_PARSER_VERSION, AuditAction, Kernel, Trace, TraceState
from traces.services import TraceBusy, trace_delete, trace_mark_failed, traces_mark_sample
from traces.signals import reingest_requested
from traces.storable_text import is_storable


def compare_url(a: str, b: str, by: str) -> str:
    query = {"a": a, "b": b, **({"by": by} if by != analysis.BY_NAME else {})}
    return f"{reverse('admin:traces_trace_compare')}?{urlencode(query)}"


class TraceAdmin(StorableLookups, FromTheBucket):
    list_display = (
        "id",
        "state_display",
        "model_column",
        "source_gpu_column",
        "arch_column",
        "config_column",
        "kernels_column",
        "size",
        "created_column",
        "updated_column",
    )
    list_filter = (
        "state",
        OwnerFilter,
        "sample",
        "trace_gpu_arch",
        "has_real_timing",
        "has_step_timeline",
        ParserVersionFilter,
    )
    search_fields = ("id", "model", "source_gpu", "owner__username")
    ordering = ("-created_at", "id")
    # Past 100,000 traces a list is counted from the planner's statistics ("about N traces"),
    # and a filtered or searched one is not counted twice (its total: the unfiltered list's).
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    actions = ("compare", "reingest", "mark_failed", "mark_sample", "unmark_sample")
    # Other apps add theirs (a trace's simulations: simulations.admin).
    inlines = ()
    fieldsets = (
        (None, {"fields": ("id", "state_display", "error", "owner", "created_at", "updated_at")}),
        (
            "Run",
            {
                "fields": (
                    "model",
                    "layers",
                    "source_gpu",
                    "trace_gpu_arch",
                    "suggested_sim_config",
                    "sample",
                    "has_real_timing",
                    "has_step_timeline",
                    "timing_error",
                )
            },
        ),
        (
            "Contents",
            {
                "fields": (
                    "kernel_count",
                    "without_totals",
                    "traced_launches",
                    "warnings_display",
                    "parser_version_display",
                    "size",
                    "kernels_link",
                )
            },
        ),
        ("metadata.json", {"fields": ("metadata_pretty",)}),
        ("Files", {"fields": ("files_table",)}),
        (
            "Ingestion bookkeeping",
            {
                "classes": ("collapse",),
                "fields": ("files_changed_at", "parsed_fingerprint", "parse_attempts"),
            },
        ),
    )
    list_defers = ("metadata_json", "files", "layers")
    readonly_fields = (
        "state_display",
        "without_totals",
        "warnings_display",
        "parser_version_display",
        "size",
        "kernels_link",
        "metadata_pretty",
        "files_table",
    )

    def has_operate_permission(self, request) -> bool:
        """Who may run the actions: whoever holds "change trace", though nothing is edited here."""
        return request.user.has_perm("traces.change_trace")

    # --- columns and fields -----------------------------------------------------------

    @admin.display(description="state", ordering="state")
    def state_display(self, obj: Trace):
        return state_badge(obj.state)

    # Short headers and cut values: the list has ten columns and must fit a laptop's screen.
    # Models and GPUs whole: they wrap at their spaces and dashes (the list's stylesheet).
    @admin.display(description="model", ordering="model", empty_value="-")
    def model_column(self, obj: Trace):
        return obj.model

    @admin.display(description="source GPU", ordering="source_gpu", empty_value="-")
    def source_gpu_column(self, obj: Trace):
        return obj.source_gpu

    @admin.display(description="arch", ordering="trace_gpu_arch", empty_value="-")
    def arch_column(self, obj: Trace):
        return obj.trace_gpu_arch

    @admin.display(description="sim config", ordering="suggested_sim_config", empty_value="-")
    def config_column(self, obj: Trace):
        return obj.suggested_sim_config

    @admin.display(description="kernels", ordering="kernel_count")
    def kernels_column(self, obj: Trace):
        return obj.kernel_count

    @admin.display(description="created", ordering="created_at")
    def created_column(self, obj: Trace):
        return compact_datetime(obj.created_at)

    @admin.display(description="updated", ordering="updated_at")
    def updated_column(self, obj: Trace):
        return compact_datetime(obj.updated_at)

    @admin.display(description="size", ordering="bytes")
    def size(self, obj: Trace):
        return size_html(obj.bytes)

    @admin.display(description="launches without totals")
    def without_totals(self, obj: Trace):
        if not obj.kernels_without_totals:
            return "0"
        return format_html(
            "{} of {}: the tracer writes a launch's totals when the kernel exits, and these never "
            "exited in its view. Launches captured into a CUDA graph (stream capture, as vLLM and "
            "PyTorch run decode steps; cuGraphAddKernelNode) get no totals, and a killed run's last "
            "launch has none. Their total_insts and total_reported_insts are null.",
            obj.kernels_without_totals,
            obj.kernel_count,
        )

    @admin.display(description="warnings")
    def warnings_display(self, obj: Trace):
        """Trace.warnings: the file, the byte, what was kept or dropped (a file cut short, a
        killed run, a file left out for its path)."""
        if not obj.warnings:
            return "none"
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                "<li><code>{}</code>{}: {}</li>",
                (
                    (
                        warning.get("file", ""),
                        "" if warning.get("offset") is None else f" at byte {warning['offset']}",
                        warning.get("what", ""),
                    )
                    for warning in obj.warnings
                ),
            ),
        )

    @admin.display(description="parser version")
    def parser_version_display(self, obj: Trace):
        if obj.parser_version is None:
            return "-"
        if obj.parser_version < CURRENT_PARSER_VERSION:
            return format_html(
                "{} (outdated: this Cascade reads stats files with version {}; "
                "<code>manage.py ingest_traces --reparse-outdated</code> or Re-ingest reads it again)",
                obj.parser_version,
                CURRENT_PARSER_VERSION,
            )
        return f"{obj.parser_version} (current)"

    @admin.display(description="kernels")
    def kernels_link(self, obj: Trace):
        return format_html(
            '<a href="{}">{} kernel{} in the kernel list</a>',
            kernel_changelist_url(obj.id),
            obj.kernel_count,
            "" if obj.kernel_count == 1 else "s",
        )

    @admin.display(description="metadata.json")
    def metadata_pretty(self, obj: Trace):
        if obj.metadata_json is None:
            return "-"
        # Re-indented as written: keys in metadata.json's order, integers of any size.
        pretty = json.dumps(obj.metadata, indent=2, ensure_ascii=False)
        # A box of its own with scrollbars (the page's stylesheet): metadata.json can be long.
        return format_html('<div class="trace-scroll"><pre class="trace-metadata">{}</pre></div>', pretty)

    @admin.display(description="files")
    def files_table(self, obj: Trace):
        if not obj.files:
            return "-"
        rows = format_html_join(
            "",
            '<tr><td><code>{}</code></td><td style="text-align:right">{}</td><td><code>{}</code></td></tr>',
            (
                (
                    entry.get("key", ""),
                    size_html(entry.get("bytes", 0)),
                    entry.get("etag", ""),
                )
                for entry in obj.files
            ),
        )
        return format_html(
            '<div class="trace-scroll"><table class="trace-files">'
            "<thead><tr><th>key</th><th>size</th><th>ETag</th></tr></thead><tbody>{}</tbody></table></div>",
            rows,
        )

    # --- the change page: error first, the kernels summarised -------------------------

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = extra_context or {}
        trace = self.get_object(request, unquote(object_id))
        if trace is not None:
            summary, analysed = trace_page_reads(trace)
            chart = instruction_chart(summary.runs)
            # The top kernels' names as the mix shows them (the summary's, no query of its own).
            mix = {row.kernel.name: row.kernel.demangled for row in analysed.get("mix_rows", ())}
            shown = demangle_all((kernel.name for kernel in summary.top_kernels), stored=mix)
            extra_context.update(
                trace=trace,
                state_badge=state_badge(trace.state),
                upload_notice=upload_notice(trace),
                # The summary goes above metadata.json and the file list, which can be long.
                kernels_before_fieldset="metadata.json",
                kernel_summary=summary,
                top_kernels=[
                    (kernel, kernel_name(kernel.name, shown[kernel.name])) for kernel in summary.top_kernels
                ],
                kernel_chart_svg=render_to_string("admin/traces/trace/kernel_chart.svg", {"chart": chart}),
                kernel_chart=chart,
                **analysed,
                kernels_url=kernel_changelist_url(trace.id),
                context_rows=[
                    (
                        context,
                        kernel_changelist_url(trace.id, **({"ctx": context.ctx} if context.ctx else {})),
                    )
                    for context in summary.contexts
                ],
                can_operate=self.has_operate_permission(request),
                changelist_action_url=(
                    f"{reverse('admin:traces_trace_changelist')}?{urlencode({'id__exact': trace.id})}"
                ),
            )
        return super().change_view(request, object_id, form_url, extra_context)

    # --- two traces side by side -------------------------------------------------------

    def get_urls(self):
        compare = path("compare/", self.admin_site.admin_view(self.compare_view), name="traces_trace_compare")
        # Before the defaults, whose "<path:object_id>/" would take "compare/" for a trace id.
        return [compare, *super().get_urls()]

    def compare_view(self, request):
        """Trace b against trace a, kernel by kernel (?a=&b=, &by=demangled to match
        instantiations that demangle alike)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        by = request.GET.get("by", analysis.BY_NAME)
        if by not in analysis.COMPARE_BY:
            by = analysis.BY_NAME
        # What the page shows of each; metadata.json and the file list can be long.
        traces = Trace.objects.only("id", "state", "model", "source_gpu")
        a_id, b_id = request.GET.get("a", ""), request.GET.get("b", "")
        if not (is_storable(a_id) and is_storable(b_id)):
            raise Http404("No trace has an id with a NUL character.")
        a = get_object_or_404(traces, pk=a_id)
        b = get_object_or_404(traces, pk=b_id)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Compare {a.id} and {b.id}",
            "a": a,
            "b": b,
            "by": by,
            "a_url": reverse("admin:traces_trace_change", args=[quote(a.pk)]),
            "b_url": reverse("admin:traces_trace_change", args=[quote(b.pk)]),
            "by_name_url": compare_url(a.id, b.id, analysis.BY_NAME),
            "by_demangled_url": compare_url(a.id, b.id, analysis.BY_DEMANGLED),
            "swapped_url": compare_url(b.id, a.id, by),
            **compare_context(a, b, by),
        }
        return TemplateResponse(request, "admin/traces/trace/compare.html", context)

    # --- actions ----------------------------------------------------------------------

    @admin.action(description="Compare two selected traces")
    def compare(self, request, queryset):
        ids = list(queryset.order_by("created_at", "id").values_list("pk", flat=True)[:3])
        if len(ids) != 2:
            self.message_user(
                request,
                f"Pick exactly two traces to compare ({len(ids) if len(ids) < 3 else 'more than two'} selected).",
                messages.WARNING,
            )
            return None
        # The older trace is a, the newer b: ratios read "b per a".
        return HttpResponseRedirect(compare_url(*ids, analysis.BY_NAME))

    @admin.action(description="Re-ingest selected traces", permissions=("operate",))
    def reingest(self, request, queryset):
        """Asks ingestion to read the traces again, in one request: queued or in the
        background (how many started, wait, were refused), never here."""
        trace_ids = []
        for trace in queryset.only("id", "state", "metadata_json", "waiting_for"):
            if trace.state == TraceState.UPLOADING:
                self.message_user(
                    request, f"Trace {trace.id}: not re-ingested: {nothing_to_parse(trace)}", messages.WARNING
                )
            else:
                trace_ids.append(trace.id)
        if not trace_ids:
            return
        # "Trace <id>: ...": Django capitalises a message's first letter, not an id's.
        which = f"Trace {trace_ids[0]}" if len(trace_ids) == 1 else f"{len(trace_ids)} traces"
        try:
            answers = reingest_requested.send(sender=type(self), trace_ids=trace_ids)
        except Exception as exc:  # the broker away: say so, the next poll still comes
            self.message_user(request, f"{which}: not re-ingested: {exc}", messages.ERROR)
            return
        said = "; ".join(answer for _, answer in answers if answer)
        for trace_id in trace_ids:
            audit.record(AuditAction.REINGEST, request=request, trace_id=trace_id, detail={"answer": said})
        self.message_user(
            request,
            f"{which}: {said or 'not re-ingested: no ingestion is installed'}",
            messages.SUCCESS if said else messages.ERROR,
        )

    @admin.action(description="Mark failed", permissions=("operate",))
    def mark_failed(self, request, queryset):
        error = f"marked failed by {request.user.get_username()} in the admin"
        marked = 0
        for trace_id in queryset.values_list("pk", flat=True):
            try:
                trace_mark_failed(trace_id, error)
                audit.record(AuditAction.MARK_FAILED, request=request, trace_id=trace_id)
                marked += 1
            except TraceBusy as busy:
                self.message_user(request, f"Trace {trace_id}: not marked failed: {busy}", messages.WARNING)
        if marked:
            self.message_user(request, f"Marked {marked} trace(s) failed.", messages.SUCCESS)

    @admin.action(description="Mark as samples", permissions=("operate",))
    def mark_sample(self, request, queryset):
        """`sample` is an operator's word (no run's name or file sets it): shown in the API."""
        marked = self.mark_samples(request, queryset, sample=True)
        self.message_user(request, f"Marked {marked} trace(s) as samples.", messages.SUCCESS)

    @admin.action(description="Unmark samples", permissions=("operate",))
    def unmark_sample(self, request, queryset):
        unmarked = self.mark_samples(request, queryset, sample=False)
        self.message_user(request, f"{unmarked} trace(s) are no longer samples.", messages.SUCCESS)

    def mark_samples(self, request, queryset, *, sample: bool) -> int:
        """Mark or unmark the traces, an audit entry for each one that changed."""
        action = AuditAction.MARK_SAMPLE if sample else AuditAction.UNMARK_SAMPLE
        with transaction.atomic():
            changing = list(queryset.exclude(sample=sample).values_list("pk", flat=True))
            for trace_id in changing:
                audit.record(action, request=request, trace_id=trace_id)
            return traces_mark_sample(changing, sample=sample)

    # --- deleting: count the kernels, never collect them -------------------------------

    def get_deleted_objects(self, objs, request):
        traces = list(objs)
        ids = [trace.pk for trace in traces]
        model_count = {
            Trace._meta.verbose_name_plural: len(traces),
            Kernel._meta.verbose_name_plural: Kernel.stored.filter(trace__id__in=ids).count(),
        }
        # What other apps keep of a trace and delete with it, where operators see it in the
        # admin (a trace's simulations): counted, never collected.
        for relation in Trace._meta.related_objects:
            if relation.on_delete is CASCADE and self.admin_site.is_registered(relation.related_model):
                related = relation.related_model
                count = related._default_manager.filter(**{f"{relation.field.name}__in": ids}).count()
                model_count[related._meta.verbose_name_plural] = count
        kinds = " and its ".join(str(name) for name in list(model_count)[1:])
        to_delete = [
            format_html(
                'Trace: <a href="{}">{}</a>, its {}. Its folder stays in the '
                "bucket: the trace does not come back unless the folder's files change",
                reverse("admin:traces_trace_change", args=[quote(trace.pk)]),
                trace.pk,
                kinds,
            )
            for trace in traces
        ]
        perms_needed = set() if self.has_delete_permission(request) else {Trace._meta.verbose_name}
        return to_delete, model_count, perms_needed, []

    def delete_queryset(self, request, queryset):
        """Each trace under its lock; one that a pass is ingesting is left, with a message."""
        for trace_id in queryset.values_list("pk", flat=True):
            try:
                trace_delete(trace_id, deleted_by=request.user.get_username())
                audit.record(AuditAction.DELETE, request=request, trace_id=trace_id)
            except TraceBusy as busy:
                self.message_user(request, f"Trace {trace_id}: not deleted: {busy}", messages.ERROR)
