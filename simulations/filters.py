"""The query parameters that narrow `GET /api/simulations` and `/accuracy`, read as the traces'
(`traces.filters`): a parameter the list does not know, or a value a filter cannot read, is a
400 naming it."""

import django_filters
from django.http import QueryDict

from simulations.models import Simulation
from traces.models import TraceState
from traces.params import InvalidFilter, check_known, shown

# What each parameter of `GET /api/simulations` (and `/accuracy`) accepts.
SIMULATION_ACCEPTS = {
    "trace": "a trace's exact id (text without NUL characters)",
    "simulator_build": "the exact Accel-Sim build, such as accelsim-commit-2260456e_modified_0.0 (text without NUL characters)",
    "config": "the exact simulator config, such as SM90_H100 (text without NUL characters)",
    "state": f"one of {', '.join(TraceState.values)}",
}


class SimulationFilter(django_filters.FilterSet):
    """The simulations viewset's `filterset_class`, as TraceFilter is the traces'."""

    trace = django_filters.CharFilter(
        field_name="trace_id", help_text=f"Exact match: {SIMULATION_ACCEPTS['trace']}."
    )
    simulator_build = django_filters.CharFilter(
        help_text=f"Exact match: {SIMULATION_ACCEPTS['simulator_build']}."
    )
    config = django_filters.CharFilter(help_text=f"Exact match: {SIMULATION_ACCEPTS['config']}.")
    state = django_filters.ChoiceFilter(
        choices=TraceState.choices, help_text=f"{SIMULATION_ACCEPTS['state'].capitalize()}."
    )


def simulation_filters(params: QueryDict, also: tuple[str, ...] = ()) -> SimulationFilter:
    """The filters `params` asks for, validated as `trace_filters` does (a 400 names every bad
    one); `also`: the other parameters the route reads (`accuracy`'s `by`)."""
    check_known(params, [*SimulationFilter.base_filters, *also])
    filters = SimulationFilter(params, queryset=Simulation.objects.none())
    if not filters.is_valid():
        raise InvalidFilter(
            " ".join(
                f"{name} accepts {SIMULATION_ACCEPTS[name]}; got {shown(params.get(name))}."
                for name in filters.errors
            )
        )
    return filters
