"""botocore's data files (the S3 service model, its endpoint rules, endpoints.json) read lean.

Every process that talks to S3 holds them for as long as it lives: as botocore reads them, in
an OrderedDict per JSON object, with every operation's and member's documentation, and the
endpoints of some 400 services, they are 15 MB of an `ingest_traces` pass's RSS (issue 22).
Read into plain dicts, the documentation left empty (botocore reads it only to write
docstrings, but expects the key) and endpoints.json cut to the services Cascade's clients
and botocore's credential providers call, they are about half.

`LeanJSONFileLoader` is botocore's public extension point for this: the file loader a
session's data loader is given (`Loader.file_loader`).
"""

import gzip
import json
import os

from botocore.loaders import JSONFileLoader

# The services whose clients Cascade makes (bucket.py: S3, and SQS for S3's events), and those
# botocore's credential providers make (assume-role and web identity: STS; IAM Identity
# Center: SSO and its OIDC), by their endpoint prefix, as endpoints.json names them.
# endpoints.json's other services are dropped: a client of one would still work, from
# botocore's defaults for a service it has no endpoint data for.
SERVICES_KEPT = frozenset({"s3", "sqs", "sts", "portal.sso", "oidc"})
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
                    data = json.loads(file.read(), object_pairs_hook=_without_documentation)
                if os.path.basename(file_path) == "endpoints" and isinstance(data, dict):
                    for partition in data.get("partitions", ()):
                        services = partition.get("services", {})
                        partition["services"] = {
                            name: service for name, service in services.items() if name in SERVICES_KEPT
                        }
                return data
        return None


def use_lean_models(botocore_session) -> None:
    """Have `botocore_session` read its data files with LeanJSONFileLoader, before any is read."""
    botocore_session.get_component("data_loader").file_loader = LeanJSONFileLoader()
