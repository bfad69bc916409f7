"""The old name of traces.storable_text, kept only for the modules the simulations app is taking
over (views, simulations, simlog, uploads, simulation_marker, ingest.simulations): once they
import traces.storable_text, this module goes."""

from traces.storable_text import (  # noqa: F401
    first_unstorable,
    is_storable,
    replace_unstorable,
    unstorable_character,
)
