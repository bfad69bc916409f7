"""A run's files as clients download them (`GET /api/traces/{trace_id}/files`): which files,
their paths in the run's folder, and a presigned GET for each.

`traces` asks for them through a signal (`traces.signals.files_requested`), as it asks for a
re-ingest: what the keys mean (the run's folder under CASCADE_S3_PREFIX, metadata.json's
`files`, full keys or relative ones) and how to sign a URL are this app's knowledge. The
answer is built from the trace's last listing (`Trace.files`), never from a request to S3.

A path a client would write outside its folder, or could not write on Windows, is never listed
or signed (`path_problem`): an uploader can write any key under the prefix, and the client
that honours a listing is on someone's laptop.
"""

import json
import re
import unicodedata
from pathlib import PurePosixPath, PureWindowsPath

from ingest import bucket
from ingest.metadata import METADATA_NAME, MetadataError, listed_files, listed_keys

# Names Windows reserves for devices in any folder, whatever their extension (`nul.txt` too).
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


def run_downloads(*, trace_id: str, files: list[dict], metadata_json: str | None, seconds: int, **kwargs):
    """`{"files": [{"path", "key", "bytes", "etag", "url"}], "refused": [{"key", "reason"}]}`:
    the files metadata.json lists and metadata.json itself (a client rebuilds the folder
    Accel-Sim runs, and the list says what the upload is complete with), or every file of the
    listing for a run without a list (or whose list cannot be read), in path order. Never the
    run's `simulations/` folder; a trace still uploading answers with the listed files that have
    landed. A key whose path fails `path_problem` is left out of `files` and named in `refused`.

    Each URL is signed with the listed ETag as `If-Match`: S3 answers only a GET that sends it
    (the header is signed), and answers 412 once the object is replaced, before any byte."""
    run_prefix = bucket.run_prefix(trace_id)
    in_folder = [
        item
        for item in files
        if item["key"].startswith(run_prefix)
        and not item["key"][len(run_prefix) :].startswith(bucket.SIMULATIONS_FOLDER)
    ]
    listed = _listed(metadata_json)
    if listed:
        keys = listed_keys(listed, in_folder, run_prefix) | {run_prefix + METADATA_NAME}
        in_folder = [item for item in in_folder if item["key"] in keys]
    chosen, refused = [], []
    for item in sorted(in_folder, key=lambda item: item["key"][len(run_prefix) :]):
        problem = path_problem(item["key"][len(run_prefix) :])
        if problem is None:
            chosen.append(item)
        else:
            refused.append({"key": item["key"], "reason": f"not listed: its path has {problem}"})
    urls = bucket.presigned_gets(
        [item["key"] for item in chosen], seconds, etags=[item["etag"] for item in chosen]
    )
    return {
        "files": [
            {
                "path": item["key"][len(run_prefix) :],
                "key": item["key"],
                "bytes": item["bytes"],
                "etag": item["etag"],
                "url": url,
            }
            for item, url in zip(chosen, urls, strict=True)
        ],
        "refused": refused,
    }


def _listed(metadata_json: str | None) -> list[dict]:
    if metadata_json is None:
        return []
    try:
        return listed_files(json.loads(metadata_json))
    except (MetadataError, ValueError, AttributeError):
        return []
