"""The simulations in the operators' admin: their list, a simulation's page, two compared
(`simulation`), read and laid out in `pages`, drawn in `charts`; the sweeps (`sweep`); and a
trace's simulations inline on the trace's own page, added here to the trace admin the traces
app registered."""

from django.contrib import admin

from simulations.admin.simulation import SimulationAdmin, SimulationInline
from simulations.admin.sweep import SweepAdmin
from simulations.models import Simulation, Sweep
from traces.models import Trace

admin.site.register(Simulation, SimulationAdmin)
admin.site.register(Sweep, SweepAdmin)

trace_admin = admin.site.get_model_admin(Trace)
trace_admin.inlines = (*trace_admin.inlines, SimulationInline)
