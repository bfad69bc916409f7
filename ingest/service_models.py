"""botocore's data files (the S3 service model, its endpoint rules, endpoints.json) read lean.

Every process that talks to S3 holds them for as long as it lives: as botocore reads them, in
an OrderedDict per JSON object, with every operation's and member's documentation, they are
15 MB of an `ingest_traces` pass's RSS (issue 22). Read into plain dicts, the documentation
left empty (botocore reads it only to write docstrings, but expects the key), they are about
half.

endpoints.json (some 400 services) is kept whole: cut to the services Cascade calls it held
2.6 MB less, but the whole file is decoded before it can be cut, so a process's peak (VmHWM)
was no lower, only what it held afterwards.

`LeanJSONFileLoader` goes through botocore's public parts only: the `file_loader` argument of
a `Loader`, registered as the session's `data_loader` component (`register_component`) before
anything is read. One such loader a process (`lean_loader`): a session made later (new
settings) finds the models it read.
"""

import gzip
import json
import os
from functools import cache

from botocore.loaders import JSONFileLoader, Loader

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


@cache
def lean_loader(data_path: str | None) -> Loader:
    """The process's data loader for `data_path` (AWS_DATA_PATH: folders searched before
    botocore's own, as botocore.loaders.create_loader reads it), reading with LeanJSONFileLoader."""
    paths = [
        os.path.expanduser(os.path.expandvars(path)) for path in (data_path or "").split(os.pathsep) if path
    ]
    return Loader(extra_search_paths=paths, file_loader=LeanJSONFileLoader())


def use_lean_models(botocore_session) -> None:
    """Have `botocore_session` read its data files with LeanJSONFileLoader, before any is read."""
    data_path = botocore_session.get_config_variable("data_path")
    botocore_session.register_component("data_loader", lean_loader(data_path))
