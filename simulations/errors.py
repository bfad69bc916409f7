"""What a simulation's own upload gets wrong."""


class SimulationInputError(Exception):
    """A simulation's upload is wrong (its marker, its log, its pairing): it fails with this message."""


class SweepRefused(Exception):
    """A sweep's request is wrong (a 400): the message says what, in one sentence."""


class SweepMissing(SweepRefused):
    """No such sweep, or no such job in it (a 404)."""


class SweepForbidden(SweepRefused):
    """Someone other than its owner or staff asks to cancel it (a 403 naming the owner)."""


class SweepConflict(SweepRefused):
    """The request is fine but the data is not in a state for it (a 409): a trace not ready, a
    worker's report for an attempt that is no longer the job's."""
