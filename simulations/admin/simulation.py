"""The simulation list, a simulation's page, two simulations compared, and a trace's
simulations on its page.

Simulations come from the bucket like traces, so nothing here adds or edits one. Deleting
is allowed, under the lock ingestion reads the simulation with (one being read is left, with
a message): the simulation and its simulated kernels go in one transaction, the kernels in
one statement (counted, never listed, on the confirmation page). Its trace is not touched and
its folder stays in the bucket, so the next poll registers it anew and reads it again: a
delete is a fresh read, and a simulation is gone for good once its folder is. The numbers are `simulations.accuracy`'s; `pages` reads and lays them out,
`charts` draws them.
"""

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import F, FloatField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from simulations.admin.pages import compare_page, compare_problem, show, simulation_page
from simulations.models import SimulatedKernel, Simulation
from traces import audit
from traces.admin.bucket_records import FromTheBucket
from traces.admin.display import size_text, state_badge, truncated
from traces.admin.filters import OwnerFilter, StorableLookups
from traces.locks import trace_lock
from traces.models import AuditAction, TraceState

# A simulation's lock is its folder's path under its run: ingest.simulations.decide_simulation's.
SIMULATIONS_FOLDER = "simulations/"
# The interrupted launches a page lists (a cycle limit stops one kernel, or a few running
# concurrently; the list is the log's, so it is cut all the same).
INTERRUPTED_SHOWN = 100


def simulation_url(simulation: Simulation) -> str:
    return reverse("admin:simulations_simulation_change", args=[quote(simulation.pk)])


def trace_url(trace_id: str) -> str:
    return reverse("admin:traces_trace_change", args=[quote(trace_id)])


def compare_url(a_pk: int, b_pk: int) -> str:
    return f"{reverse('admin:simulations_simulation_compare')}?{urlencode({'a': a_pk, 'b': b_pk})}"


def metric_ordering(key: str):
    """A list's ordering by one key of `metrics`, as a number (JSON's own order is not)."""
    return Cast(KeyTextTransform(key, "metrics"), FloatField())


class SimulationColumns:
    """The columns the list and a trace's inline share."""

    @admin.display(description="name", ordering="name")
    def name_link(self, obj: Simulation):
        return format_html('<a href="{}">{}</a>', simulation_url(obj), obj.name)

    @admin.display(description="state", ordering="state")
    def state_display(self, obj: Simulation):
        return state_badge(obj.state)

    # "-" here, not empty_value: an inline's read-only field shows None as "None".
    @admin.display(description="build", ordering="simulator_build")
    def build_column(self, obj: Simulation):
        return truncated(obj.simulator_build, 20) or "-"

    @admin.display(description="config", ordering="config")
    def config_column(self, obj: Simulation):
        return truncated(obj.config, 20) or "-"

    @admin.display(description="compared", ordering="kernels_compared")
    def compared_column(self, obj: Simulation):
        return obj.kernels_compared

    @admin.display(description="MAPE", ordering=metric_ordering("mape"))
    def mape_column(self, obj: Simulation):
        return show((obj.metrics or {}).get("mape"), "percent")

    @admin.display(description="aggregate error", ordering=metric_ordering("aggregate_error"))
    def aggregate_error_column(self, obj: Simulation):
        return show((obj.metrics or {}).get("aggregate_error"), "percent")

    @admin.display(description="why")
    def reason_column(self, obj: Simulation):
        """What its state means, in words: what it waits for, why it failed, what was left out."""
        if obj.state == TraceState.FAILED:
            return truncated(obj.error, 120) or "-"
        words = [obj.reason] if obj.reason else []
        if (obj.left_out or {}).get("kernels"):
            words.append(left_out_words(obj.left_out))
        return truncated("; ".join(words), 120) or "-"

    @admin.display(description="ended")
    def ended_column(self, obj: Simulation):
        """A normal end, the cycle limit or a killed run; "-" before the log is read."""
        if obj.complete is None and obj.stopped is None:
            return "-"
        if obj.stopped:
            words = STOPPED_WORDS.get(obj.stopped, obj.stopped)
            return format_html('<span title="{}">stopped: {}</span>', words, obj.stopped)
        return "complete" if obj.complete else "incomplete"


# How a log ended early, in words (simulations.simlog's `stopped`).
STOPPED_WORDS = {
    "deadlock": "the simulator detected a deadlock and aborted",
    "killed": "the log ends without the simulator's exit line: the run was killed, or the log cut",
    "max_cycles": "the cycle limit (-gpgpu_max_cycle) stopped the run",
    "error": "the simulator quit on an error (its fatal line below)",
}


def left_out_words(left_out: dict | None) -> str:
    count = (left_out or {}).get("kernels") or 0
    if not count:
        return "none"
    kernels = "kernel" if count == 1 else "kernels"
    return f"{count} {kernels} left out of every total: {left_out.get('why') or 'did not finish'}"


class SimulationInline(SimulationColumns, admin.TabularInline):
    """A trace's simulations on its page, each linking to its own."""

    model = Simulation
    template = "admin/simulations/simulation/inline.html"
    fields = readonly_fields = (
        "name_link",
        "state_display",
        "build_column",
        "config_column",
        "compared_column",
        "mape_column",
        "aggregate_error_column",
        "reason_column",
    )
    extra = 0
    can_delete = False
    show_change_link = False
    verbose_name_plural = "simulations"

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).defer("files", "interrupted", "notes", "run", "fatal")


class SimulationAdmin(StorableLookups, SimulationColumns, FromTheBucket):
    list_display = (
        "name_link",
        "trace_link",
        "state_display",
        "build_column",
        "gpgpusim_column",
        "config_column",
        "ended_column",
        "compared_column",
        "mape_column",
        "owner_column",
    )
    list_display_links = None
    list_filter = (
        "state",
        "simulator_build",
        "config",
        ("trace", admin.RelatedOnlyFieldListFilter),
        OwnerFilter,
    )
    search_fields = ("name", "trace__id", "owner__username")
    ordering = ("-created_at", "name")
    actions = ("compare", "delete_selected")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "name",
                    "trace_link",
                    "owner",
                    "state_display",
                    "error",
                    "reason",
                    "stopped_display",
                    "fatal_display",
                    "left_out_display",
                    "created_at",
                    "updated_at",
                )
            },
        ),
        (
            "Run",
            {
                "fields": (
                    "status",
                    "simulator",
                    "config",
                    "notes",
                    "simulator_build",
                    "gpgpusim_display",
                    "clock_display",
                    "ended_column",
                    "cycles_display",
                    "kernels_simulated",
                    "kernels_compared",
                    "run_display",
                )
            },
        ),
        ("Files", {"fields": ("files_table",)}),
        (
            "Ingestion bookkeeping",
            {
                "classes": ("collapse",),
                "fields": ("files_changed_at", "parsed_fingerprint", "reader_version", "parse_attempts"),
            },
        ),
    )
    list_defers = ("files", "interrupted", "notes", "run", "fatal")
    readonly_fields = (
        "trace_link",
        "state_display",
        "stopped_display",
        "fatal_display",
        "left_out_display",
        "run_display",
        "gpgpusim_display",
        "clock_display",
        "ended_column",
        "cycles_display",
        "files_table",
    )

    def get_queryset(self, request):
        # The owner's name joined, not the user selected: the actions narrow rows with only().
        return super().get_queryset(request).annotate(owner_name=F("owner__username"))

    # --- columns and fields -----------------------------------------------------------

    @admin.display(description="owner", ordering="owner_name", empty_value="-")
    def owner_column(self, obj: Simulation):
        return obj.owner_name

    @admin.display(description="trace", ordering="trace")
    def trace_link(self, obj: Simulation):
        return format_html('<a href="{}">{}</a>', trace_url(obj.trace_id), obj.trace_id)

    @admin.display(description="stopped", empty_value="-")
    def stopped_display(self, obj: Simulation):
        if obj.stopped is None:
            return None if obj.complete is None else "no: the log ends normally"
        return f"{obj.stopped}: {STOPPED_WORDS.get(obj.stopped, obj.stopped)}"

    @admin.display(description="the simulator's fatal line", empty_value="-")
    def fatal_display(self, obj: Simulation):
        if not obj.fatal:
            return None
        return format_html("line {}: <code>{}</code>", obj.fatal.get("line"), obj.fatal.get("text"))

    @admin.display(description="left out")
    def left_out_display(self, obj: Simulation):
        words = left_out_words(obj.left_out)
        named = [
            f"uid {kernel.get('uid')} ({kernel.get('trace_file') or kernel.get('kernel_id')}, {kernel.get('name')})"
            for kernel in (obj.interrupted or [])[:3]
        ]
        if named:
            words += ": " + "; ".join(named) + (" ..." if len(obj.interrupted) > 3 else "")
        return words

    @admin.display(description="run (simulation.json)", empty_value="-")
    def run_display(self, obj: Simulation):
        if not obj.run:
            return None
        rows = format_html_join(
            "",
            "<tr><th>{}</th><td>{}</td></tr>",
            ((key, "-" if value is None else value) for key, value in obj.run.items()),
        )
        return format_html("<table><tbody>{}</tbody></table>", rows)

    @admin.display(description="GPGPU-Sim", ordering="gpgpusim_build", empty_value="-")
    def gpgpusim_column(self, obj: Simulation):
        return truncated(obj.gpgpusim_build, 28)

    @admin.display(description="GPGPU-Sim build", empty_value="-")
    def gpgpusim_display(self, obj: Simulation):
        return obj.gpgpusim_build

    @admin.display(description="core clock", empty_value="-")
    def clock_display(self, obj: Simulation):
        return None if obj.core_clock_mhz is None else f"{obj.core_clock_mhz:g} MHz"

    @admin.display(description="simulated cycles, the finished kernels", empty_value="-")
    def cycles_display(self, obj: Simulation):
        """The gpu_tot_sim_cycle of the log's last block of a finished kernel."""
        return None if obj.sim_total_cycles is None else f"{obj.sim_total_cycles:,}"

    @admin.display(description="files")
    def files_table(self, obj: Simulation):
        if not obj.files:
            return "-"
        rows = format_html_join(
            "",
            '<tr><td><code>{}</code></td><td title="{} bytes">{}</td><td><code>{}</code></td></tr>',
            (
                (
                    entry.get("key", ""),
                    entry.get("bytes", 0),
                    size_text(entry.get("bytes", 0)),
                    entry.get("etag", ""),
                )
                for entry in obj.files
            ),
        )
        return format_html(
            "<table><thead><tr><th>key</th><th>size</th><th>ETag</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    # --- the page: summary, metrics, charts, worst kernels -----------------------------

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = extra_context or {}
        simulation = self.get_object(request, unquote(object_id))
        if simulation is not None:
            others = (
                Simulation.objects.filter(trace_id=simulation.trace_id, state=TraceState.READY)
                .exclude(pk=simulation.pk)
                .only("pk", "name", "created_at")
            )
            extra_context.update(
                simulation=simulation,
                state_badge=state_badge(simulation.state),
                trace_url=trace_url(simulation.trace_id),
                interrupted=simulation.interrupted[:INTERRUPTED_SHOWN],
                interrupted_more=max(len(simulation.interrupted) - INTERRUPTED_SHOWN, 0),
                compare_links=[
                    (other.name, compare_url(*(sim.pk for sim in ordered(simulation, other))))
                    for other in others
                    if simulation.state == TraceState.READY
                ],
                **simulation_page(simulation),
            )
        return super().change_view(request, object_id, form_url, extra_context)

    # --- two simulations of one trace ----------------------------------------------------

    def get_urls(self):
        compare = path(
            "compare/", self.admin_site.admin_view(self.compare_view), name="simulations_simulation_compare"
        )
        # Before the defaults, whose "<path:object_id>/" would take "compare/" for an id.
        return [compare, *super().get_urls()]

    def compare_view(self, request):
        """Simulation b against a (?a=&b=, their ids): metrics side by side, and the kernels
        whose error moved most each way; or why the two do not compare."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        found = {
            sim.pk: sim
            for sim in Simulation.objects.filter(
                pk__in=[value for value in (request.GET.get("a"), request.GET.get("b")) if is_id(value)]
            ).defer("files")
        }
        a, b = found.get(as_id(request.GET.get("a"))), found.get(as_id(request.GET.get("b")))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Compare {a.name} and {b.name}" if a and b else "Compare simulations",
            "a": a,
            "b": b,
        }
        if a is None or b is None:
            context["problem"] = (
                "No such simulation: pick two in the simulation list and use the compare action."
            )
        else:
            context.update(
                a_url=simulation_url(a),
                b_url=simulation_url(b),
                a_trace_url=trace_url(a.trace_id),
                b_trace_url=trace_url(b.trace_id),
                swapped_url=compare_url(b.pk, a.pk),
                problem=compare_problem(a, b),
            )
            if context["problem"] is None:
                context.update(compare_page(a, b))
        return TemplateResponse(request, "admin/simulations/simulation/compare.html", context)

    @admin.action(description="Compare two selected simulations of one trace")
    def compare(self, request, queryset):
        selected = list(queryset.only("pk", "name", "trace", "state", "error", "created_at")[:3])
        if len(selected) != 2:
            count = len(selected) if len(selected) < 3 else "more than two"
            self.message_user(
                request,
                f"Pick exactly two simulations of one trace to compare ({count} selected).",
                messages.WARNING,
            )
            return None
        a, b = ordered(*selected)
        problem = compare_problem(a, b)
        if problem:
            self.message_user(request, f"Not compared: {problem}", messages.ERROR)
            return None
        return HttpResponseRedirect(compare_url(a.pk, b.pk))

    # --- deleting: count the kernels, delete them in one statement ----------------------

    def get_deleted_objects(self, objs, request):
        simulations = list(objs)
        kernel_count = SimulatedKernel.objects.filter(simulation__in=[sim.pk for sim in simulations]).count()
        to_delete = [
            format_html(
                'Simulation: <a href="{}">{}</a> and its simulated kernels. Its trace is not touched; its '
                "folder stays in the bucket, and the next poll reads it again unless the folder is gone",
                simulation_url(sim),
                str(sim),
            )
            for sim in simulations
        ]
        model_count = {
            Simulation._meta.verbose_name_plural: len(simulations),
            SimulatedKernel._meta.verbose_name_plural: kernel_count,
        }
        perms_needed = set() if self.has_delete_permission(request) else {Simulation._meta.verbose_name}
        return to_delete, model_count, perms_needed, []

    def delete_queryset(self, request, queryset):
        """Each simulation under its lock, its kernels then itself in one transaction: never
        a simulation without its kernels, nor kernels left behind, nor a read storing pairs
        for a simulation gone meanwhile. One being read is left, with a message."""
        for simulation in queryset.only("pk", "trace", "name"):
            with trace_lock(f"{simulation.trace_id}/{SIMULATIONS_FOLDER}{simulation.name}") as acquired:
                if not acquired:
                    self.message_user(
                        request,
                        f"Simulation {simulation}: not deleted: it is being read right now; try again when "
                        "it is done",
                        messages.ERROR,
                    )
                    continue
                with transaction.atomic():
                    # No model refers to a simulated kernel: Django deletes them in one statement.
                    SimulatedKernel.objects.filter(simulation=simulation).delete()
                    Simulation.objects.filter(pk=simulation.pk).delete()
                    audit.record(AuditAction.DELETE, request=request, simulation=simulation)


def ordered(*simulations: Simulation) -> tuple[Simulation, Simulation]:
    """The older simulation first (a), the newer second (b): changes read "b against a"."""
    a, b = sorted(simulations, key=lambda sim: (sim.created_at, sim.pk))
    return a, b


def is_id(value: str | None) -> bool:
    return value is not None and value.isascii() and value.isdigit() and len(value) < 19


def as_id(value: str | None) -> int | None:
    return int(value) if is_id(value) else None
