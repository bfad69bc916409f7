"""botocore's data files (the S3 service model, its endpoint rules, endpoints.json) read lean.

Every process that talks to S3 holds them for as long as it lives: as botocore reads them, in
an OrderedDict per JSON object, with every operation's and member's documentation, they are
15 MB of an `ingest_traces` pass's RSS (issue 22). Read into plain dicts, the documentation
left empty (botocore reads it only to write docstrings, but expects the key), they are about
half.

endpoints.json (some 400 services) is kept whole: cut to the services Cascade calls it held
2.6 MB less, but the whole file is decoded before it can be cut, so a process's peak (VmHWM)
was no lower, only what it held afterwards.

`LeanJSONFileLoader` is botocore's public extension point for this: the file loader a
session's data loader is given (`Loader.file_loader`).
"""

import gzip
import json
import os

from botocore.loaders import JSONFileLoader

# botocore's own order: a model shipped compressed is read as such (botocore.loaders).
OPENERS = ((".json", open), (".json.gz", gzip.open))


def _without_documentation(pairs: list[tuple]) -> dict:
    """A JSON object as a dict, its documentation left empty (the key is read, the text never)."""
    return {key: "" if key == "documentation" else value for key, value in pairs}


class LeanJSONFileLoader(JSONFileLoader):
    """botocore's JSON file loader, keeping less of what it reads (see the module)."""

    def load_file(self, file_path: str):
        for extension, opener in OPENERS:
            path = file_path + extension
            if os.path.isfile(path):
                with opener(path, "rb") as file:
                    return json.loads(file.read(), object_pairs_hook=_without_documentation)
        return None


def use_lean_models(botocore_session) -> None:
    """Have `botocore_session` read its data files with LeanJSONFileLoader, before any is read."""
    botocore_session.get_component("data_loader").file_loader = LeanJSONFileLoader()
