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

from ingest import bucket, presigning
from ingest.metadata import METADATA_NAME, MetadataError, listed_files, listed_keys
from ingest.owners import OWNER_NAME
from ingest.paths import path_problem


# Names Windows reserves for devices in any folder, whatever their extension (`nul.txt` too).
def run_downloads(*, trace_id: str, files: list[dict], metadata_json: str | None, seconds: int, **kwargs):
    """`{"files": [{"path", "key", "bytes", "etag", "url"}], "refused": [{"key", "reason"}]}`:
    the files metadata.json lists and metadata.json itself (a client rebuilds the folder
    Accel-Sim runs, and the list says what the upload is complete with), or every file of the
    listing for a run without a list (or whose list cannot be read), in path order. Never the
    run's `simulations/` folder nor its owner record (Cascade's: ingest.owners); a trace still
    uploading answers with the listed files that have landed. A key whose path fails
    `path_problem` is left out of `files` and named in `refused`.

    Each URL is signed with the listed ETag as `If-Match`: S3 answers only a GET that sends it
    (the header is signed), and answers 412 once the object is replaced, before any byte."""
    run_prefix = bucket.run_prefix(trace_id)
    in_folder = [
        item
        for item in files
        if item["key"].startswith(run_prefix)
        and not item["key"][len(run_prefix) :].startswith(bucket.SIMULATIONS_FOLDER)
        and item["key"][len(run_prefix) :] != OWNER_NAME  # Cascade's record, not the run's
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
    urls = presigning.presigned_gets(
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
