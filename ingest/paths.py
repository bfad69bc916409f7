"""A run's relative paths: which a client may write under the folder it pulls into, and how an
unsafe one is shown. One rule for the listing a trace records (`listing.inventory`), the files a
client is offered (`downloads`) and the client itself (`cascade_client.paths`, its copy: the
client installs alone)."""

import re
import unicodedata
from pathlib import PurePosixPath, PureWindowsPath

WINDOWS_DEVICES = re.compile(r"^(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³]|conin\$|conout\$)(\.|$)", re.I)


def path_problem(path: str) -> str | None:
    """Why `path` is not a plain relative POSIX path that stays in its folder under POSIX and
    Windows rules alike (None: it is). The client (cascade_client.paths) applies the same rule."""
    if not path:
        return "an empty path"
    if any(unicodedata.category(char) == "Cc" for char in path):
        return "a control character"
    if "\\" in path:
        return "a backslash (a folder separator on Windows)"
    if ":" in path:
        return "a colon (a drive letter or an NTFS stream on Windows)"
    if path.startswith("/"):
        return "an absolute path"
    windows = PureWindowsPath(path)
    if windows.drive or windows.root:
        return "a Windows drive or UNC prefix"
    parts = path.split("/")
    if ".." in parts:
        return "a `..` component"
    if any(part in ("", ".") for part in parts):
        return "an empty or `.` component"
    if any(part.endswith((".", " ")) for part in parts):
        return "a component ending in a dot or a space (Windows drops them)"
    if any(WINDOWS_DEVICES.match(part) for part in parts):
        return "a Windows device name"
    if PurePosixPath(path).parts != tuple(parts) or windows.parts != tuple(parts):
        return "a path read differently on POSIX and Windows"
    return None


def shown_path(path: str) -> str:
    """`path` with its control characters escaped (`\\x1b`), to be shown."""
    return "".join(
        c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}" for c in path
    )
