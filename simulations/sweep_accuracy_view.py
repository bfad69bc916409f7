"""`GET /api/sweeps/{id}/accuracy[?against=OTHER]`: what a sweep answers (the reads are
`simulations.sweep_accuracy`'s). Its own URL, before the router's sweep routes."""

from rest_framework.exceptions import NotFound, ParseError
from rest_framework.views import APIView

from simulations.models import Sweep
from simulations.openapi import sweep_accuracy_schema
from simulations.sweep_accuracy import sweep_accuracy
from traces.params import shown
from traces.permissions import CanViewTraces
from traces.views import OperatorDescribed, json_or_browsable

# A sweep id that fits a 64-bit key: longer digit strings name no sweep.
MAX_ID_DIGITS = 18


def existing_sweep(pk: int) -> Sweep:
    sweep = Sweep.objects.filter(pk=pk).first()
    if sweep is None:
        raise NotFound(f"sweep {pk} not found")
    return sweep


class SweepAccuracyView(OperatorDescribed, APIView):
    """A sweep's accuracy per config and build, each job's cell, and optionally another sweep
    set beside it kernel by kernel."""

    operator_description = (
        "A sweep's accuracy per config and simulator build, its jobs' cells; ?against=ID sets "
        "another sweep beside it kernel by kernel."
    )
    permission_classes = [CanViewTraces]

    @sweep_accuracy_schema
    def get(self, request, id: str):  # noqa: A002 (the route's {id})
        if len(id) > MAX_ID_DIGITS:
            raise NotFound(f"sweep {id} not found")
        sweep = existing_sweep(int(id))
        against = None
        raw = request.query_params.get("against")
        if raw is not None:
            if not (raw.isascii() and raw.isdigit()):
                raise ParseError(f"against must be a sweep's id (an integer), not {shown(raw)}")
            if len(raw) > MAX_ID_DIGITS:
                raise NotFound(f"sweep {raw} not found")
            against = existing_sweep(int(raw))
        return json_or_browsable(request, sweep_accuracy(sweep, against))
