"""Cascade's client: `Cascade` for Python, `cascade` on the command line (cli.py)."""

from cascade_client.api import Cascade
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
    Unreachable,
)

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
    "Unreachable",
]
