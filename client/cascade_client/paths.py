"""Which paths a pull writes: a file's path comes from the server's listing, which an uploader
who can write any key under the bucket's prefix controls. A path is written only if it is a
plain relative POSIX path that stays in its folder under POSIX and Windows rules alike. The
server installs the client and applies this rule (ingest/paths.py) before it lists or signs a key.
"""

import re
import unicodedata
from pathlib import PurePosixPath, PureWindowsPath

# Format (bidi controls, zero-width), line and paragraph separators, surrogates.
INVISIBLE = frozenset({"Cf", "Zl", "Zp", "Cs"})
# Names Windows reserves for devices in any folder, whatever their extension (`nul.txt` too).
WINDOWS_DEVICES = re.compile(r"^(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³]|conin\$|conout\$)(\.|$)", re.I)


def path_problem(path: str) -> str | None:
    """Why `path` would not stay a plain file in the destination folder (None: it would)."""
    if not isinstance(path, str) or not path:
        return "an empty path"
    if any(unicodedata.category(char) == "Cc" for char in path):
        return "a control character"
    # Bidi controls (U+202E shows `gifnoc.exe` as `exe.config`), zero-width and other
    # invisible formatting characters, line and paragraph separators, lone surrogates: a name
    # that displays as another, or that no file system can hold.
    hidden = next((char for char in path if unicodedata.category(char) in INVISIBLE), None)
    if hidden is not None:
        return f"an invisible or bidirectional formatting character (U+{ord(hidden):04X})"
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


def name_problem(name: str) -> str | None:
    """Why `name` would not stay one plain folder (or file) name of its own: the path rule, as
    one component (None: it would). A simulation's name is a folder in the bucket and on disk."""
    if isinstance(name, str) and "/" in name:
        return "a `/` (a folder separator)"
    return path_problem(name)
