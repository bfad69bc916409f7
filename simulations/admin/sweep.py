"""The sweeps in the operators' admin: their list, and a sweep's page, read-only (a sweep is
created and cancelled through the API): its accuracy per config and build
(`simulations.sweep_accuracy`, as `GET /api/sweeps/{id}/accuracy`), its jobs, and its
simulated against measured time per kernel, one colour per config, as Accel-Sim's
correlation plots draw it (`charts.accuracy_scatter`).
"""

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.db.models import F, Value
from django.template.loader import render_to_string
from django.utils.html import format_html

from simulations import metrics
from simulations.admin.charts import ScatterInput, accuracy_scatter
from simulations.admin.pages import hashed_sample, show, signed
from simulations.admin.simulation import simulation_url, trace_url
from simulations.models import SimulatedKernel, Sweep, SweepJob
from simulations.sweep_accuracy import by_config, cells, sweep_simulations
from simulations.sweeps import counts, sweep_state, with_counts
from traces.admin.analysis_charts import PALETTE, duration, short_name
from traces.admin.display import state_badge, truncated
from traces.models import TraceState

# The chart draws at most this many launches of the sweep: past it, a hashed sample of
# (simulation, uid), the same on every visit; the page says how many of how many.
SWEEP_SCATTER_POINTS = 5000
# Spreads one simulation's uids away from another's in the sample's hash.
_SIMULATION_STRIDE = 65537
# The jobs the page lists (a sweep can have thousands): the first ones, in the sweep's order.
JOBS_SHOWN = 500
NO_CONFIG = "no config"


# --- the page's parts ----------------------------------------------------------------------


def config_colours(configs: list[str]) -> dict[str, str]:
    """A colour per config, in `configs`' order (the palette's, again past its end)."""
    return {config: PALETTE[index % len(PALETTE)] for index, config in enumerate(dict.fromkeys(configs))}


def sweep_scatter_sample(sweep: Sweep, *, limit: int | None = None) -> tuple[list[ScatterInput], int]:
    """Up to `limit` (SWEEP_SCATTER_POINTS) compared launches of the sweep's ready simulations
    with both times above zero, grouped by their simulation's config, and how many there are:
    two queries."""
    limit = SWEEP_SCATTER_POINTS if limit is None else limit
    rows = SimulatedKernel.objects.filter(
        metrics.COMPARED,
        simulation__in=sweep_simulations(sweep).filter(state=TraceState.READY).values("id"),
        measured_ns__gt=0,
        sim_ns__gt=0,
    ).order_by()
    rows, total = hashed_sample(rows, limit, F("uid") + F("simulation_id") * Value(_SIMULATION_STRIDE))
    sample = [
        ScatterInput(
            measured_ns=measured,
            sim_ns=sim,
            group=config or NO_CONFIG,
            title=f"{trace_id} on {config or NO_CONFIG}: {ctx or 'no context'} kernel {kernel_id} "
            f"{short_name(name)}: measured {duration(measured)}, simulated {duration(sim)} "
            f"({signed(metrics.signed_error(sim, measured))})",
        )
        for config, trace_id, ctx, kernel_id, name, measured, sim in rows.values_list(
            "simulation__config",
            "simulation__trace_id",
            "launch_context__ctx",
            "kernel_id",
            "kernel_name__name",
            "measured_ns",
            "sim_ns",
        )
    ]
    return sample, total


def accuracy_rows(sweep: Sweep) -> list[dict]:
    """by_config's rows as the page shows them."""
    return [
        {
            "config": row["config"] or "-",
            "simulator_build": row["simulator_build"] or "-",
            "simulations": row["simulations"],
            "traces": row["traces"],
            "kernels_compared": row["kernels_compared"],
            "mape": show(row["mape"], "percent"),
            "aggregate_error": show(row["aggregate_error"], "percent"),
            "pearson_r": show(row["pearson_r"], "ratio"),
            "worst": row["worst"][0] if row["worst"] else None,
            "worst_error": signed(row["worst"][0]["error"]) if row["worst"] else "-",
            "left_out": row["left_out"]["simulations"],
        }
        for row in by_config(sweep)
    ]


def job_rows(sweep: Sweep) -> list[dict]:
    """The first JOBS_SHOWN jobs, each with its simulation's figures once ready."""
    jobs = {job.pk: job for job in SweepJob.objects.filter(sweep=sweep).order_by("id")[:JOBS_SHOWN]}
    rows = []
    for cell in cells(sweep, limit=JOBS_SHOWN):
        job = jobs[cell.job_id]
        simulation = cell.simulation
        rows.append(
            {
                "job": job,
                "state": state_badge(cell.state),
                "trace_url": trace_url(cell.trace_id),
                "simulation_url": simulation_url(simulation) if simulation is not None else None,
                "worker": (job.worker or {}).get("host") or "-",
                "kernels_compared": "-" if simulation is None else f"{simulation.kernels_compared:,}",
                "mape": "-"
                if simulation is None
                else show((simulation.metrics or {}).get("mape"), "percent"),
                "why": truncated(job.error or job.reason, 160) or "-",
            }
        )
    return rows


def sweep_page(sweep: Sweep) -> dict:
    """The page's context below the sweep's fields: the table, the chart, the jobs."""
    sample, total = sweep_scatter_sample(sweep)
    chart = accuracy_scatter(sample, config_colours([*sweep.configs, *sorted({row.group for row in sample})]))
    job_count = SweepJob.objects.filter(sweep=sweep).count()
    return {
        "accuracy_rows": accuracy_rows(sweep),
        "scatter_svg": render_to_string("admin/simulations/simulation/scatter.svg", {"chart": chart}),
        "scatter_drawn": len(chart.points),
        "scatter_total": total,
        "scatter_limit": SWEEP_SCATTER_POINTS,
        "scatter_legend": chart.legend,
        "job_rows": job_rows(sweep),
        "jobs_more": max(job_count - JOBS_SHOWN, 0),
    }


class SweepAdmin(admin.ModelAdmin):
    """Sweeps, newest first; a sweep's page shows what it answers. Nothing here adds, edits or
    cancels one: the API does (its owner's or staff's token)."""

    list_display = ("name", "owner_column", "state_column", "counts_column", "created_at")
    list_display_links = ("name",)
    search_fields = ("name", "owner__username")
    ordering = ("-created_at", "-id")
    fields = (
        "name",
        "owner",
        "state_column",
        "counts_column",
        "created_at",
        "configs",
        "request",
        "select",
        "cover",
        "rerun",
        "cancelled_at",
    )
    readonly_fields = fields
    change_form_template = "admin/simulations/sweep/change_form.html"

    def get_queryset(self, request):
        return with_counts(super().get_queryset(request))

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="owner", ordering="owner__username", empty_value="-")
    def owner_column(self, obj: Sweep):
        return obj.owner.username if obj.owner else None

    @admin.display(description="state")
    def state_column(self, obj: Sweep):
        return state_badge(sweep_state(obj))

    @admin.display(description="jobs")
    def counts_column(self, obj: Sweep):
        by_state = counts(obj)
        return format_html(
            "<span title='{}'>{}</span>",
            f"{sum(by_state.values())} jobs",
            ", ".join(f"{count} {state}" for state, count in by_state.items() if count) or "none",
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = extra_context or {}
        sweep = self.get_object(request, unquote(object_id))
        if sweep is not None:
            extra_context.update(sweep=sweep, **sweep_page(sweep))
        return super().change_view(request, object_id, form_url, extra_context)
