"""Cascade's client: `Cascade` for Python, `cascade` on the command line (cli.py)."""

from cascade_client.errors import (
    BadAnswer,
    BadToken,
    CascadeError,
    DestinationInUse,
    FileChanged,
    MissingTraceFiles,
    NotFound,
    NoToken,
    NotReady,
    SweepFailed,
    Unreachable,
)


def __getattr__(name: str):
    """`Cascade` on first use: the server imports this package for its path rule alone
    (ingest/paths.py), and the API client's httpx brings click, rich and pygments with it."""
    if name == "Cascade":
        from cascade_client.api import Cascade

        return Cascade
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BadAnswer",
    "BadToken",
    "Cascade",
    "CascadeError",
    "DestinationInUse",
    "FileChanged",
    "MissingTraceFiles",
    "NoToken",
    "NotFound",
    "NotReady",
    "SweepFailed",
    "Unreachable",
]
