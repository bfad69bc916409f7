"""What a simulation's own upload gets wrong."""


class SimulationInputError(Exception):
    """A simulation's upload is wrong (its marker, its log, its pairing): it fails with this message."""
