"""The simulations moved into an app of their own (and SweepCursor into ingest) with every row:
what a database held before the move (traces 0019) is there after it, under the new models,
with the operators' permissions and admin history still attached."""

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType

from ingest.models import SweepCursor
from simulations.models import Simulation
from tests.traces.support import migrate
from traces.models import Trace, TraceState, next_trace_keys

BEFORE = [("traces", "0019_trace_warnings"), ("contenttypes", "0002_remove_content_type_name")]


@pytest.mark.django_db(transaction=True)
def test_a_database_from_before_the_move_keeps_every_row():
    try:
        old = migrate(*BEFORE).loader.project_state(BEFORE).apps
        OldTrace, OldSimulation = old.get_model("traces", "Trace"), old.get_model("traces", "Simulation")
        OldSweepCursor = old.get_model("traces", "SweepCursor")
        trace = OldTrace.objects.create(id="opt-h100", key=next_trace_keys(1)[0], state=TraceState.READY)
        OldSimulation.objects.create(
            trace=trace, name="build-a", state=TraceState.READY, config="SM90_H100", kernels_compared=7
        )
        OldSweepCursor.objects.create(bucket="traces", prefix="runs/", after="runs/b/", laps=3)
        # What an operator was granted and did, on the old app's content type.
        simulation_type, _ = ContentType.objects.get_or_create(app_label="traces", model="simulation")
        permission, _ = Permission.objects.get_or_create(
            content_type=simulation_type, codename="view_simulation", defaults={"name": "Can view simulation"}
        )
        viewer = get_user_model().objects.create_user("viewer", is_staff=True)
        viewer.user_permissions.add(permission)
        LogEntry.objects.create(
            user=viewer,
            content_type=simulation_type,
            object_id="1",
            object_repr="build-a",
            action_flag=CHANGE,
        )

        migrate()

        simulation = Simulation.objects.get(trace_id="opt-h100", name="build-a")
        assert (simulation.config, simulation.kernels_compared, simulation.trace.state) == (
            "SM90_H100",
            7,
            TraceState.READY,
        )
        cursor = SweepCursor.objects.get(bucket="traces", prefix="runs/")
        assert (cursor.after, cursor.laps) == ("runs/b/", 3)
        assert Simulation._meta.db_table == "simulations_simulation"
        ContentType.objects.clear_cache()
        moved = ContentType.objects.get_for_model(Simulation)
        assert moved.pk == simulation_type.pk
        viewer = get_user_model().objects.get(username="viewer")
        assert viewer.has_perm("simulations.view_simulation")
        assert LogEntry.objects.get(object_repr="build-a").content_type_id == moved.pk
    finally:
        migrate()  # the next tests need the current schema, whatever happened
    assert Trace.objects.filter(pk="opt-h100").exists()
