"""A run's relative paths: which a client may write under the folder it pulls into, and how an
unsafe one is shown. One rule for the listing a trace records (`listing.inventory`), the files a
client is offered (`downloads`) and the client itself: the client's own (`cascade_client.paths`,
installed with the server by requirements.txt), so that what the server lists and what a pull
writes cannot differ."""

from cascade_client.paths import path_problem

__all__ = ["path_problem", "shown_path"]


def shown_path(path: str) -> str:
    """`path` with its control characters escaped (`\\x1b`), to be shown."""
    return "".join(
        c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}" for c in path
    )
