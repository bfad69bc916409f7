"""Who owns a run pushed through the API or a simulation uploaded through it, written beside its
files in the bucket: `cascade-owner.json` in the run's folder or the simulation's.

The bucket is the source of truth, so ownership lives there too: a database rebuilt from the
bucket (`ingest_traces --reparse`) finds every owner again. The record holds the owner's
username only, never a token; a run or simulation put into the bucket directly has none.
"""

import json
import logging

from django.contrib.auth import get_user_model

from ingest import bucket

logger = logging.getLogger(__name__)

OWNER_NAME = "cascade-owner.json"
MAX_OWNER_BYTES = 4096


def owner_key(folder: str) -> str:
    """The owner record of `folder` (a key ending in "/": a run's or a simulation's folder)."""
    return f"{folder}{OWNER_NAME}"


def owner_record(username: str) -> bytes:
    return json.dumps({"owner": username}).encode()


def claim_owner(folder: str, username: str) -> bool:
    """Write `folder`'s owner record unless one is there: whether this call wrote it. Two
    claims at once: one wins (a conditional PUT, `bucket.put_object_if_absent`)."""
    return bucket.put_object_if_absent(owner_key(folder), owner_record(username))


def read_owner(folder: str) -> str | None:
    """The username `folder`'s owner record names; None where there is none or it is unreadable
    (logged: an owner record is Cascade's own file, so a bad one is an operator's matter)."""
    key = owner_key(folder)
    if bucket.head_etag(key) is None:
        return None
    try:
        data = json.loads(bucket.read_object(key, MAX_OWNER_BYTES))
        username = data["owner"]
    except (ValueError, KeyError, TypeError):
        logger.warning("%s is not an owner record Cascade wrote; the owner is left unknown", key)
        return None
    return username if isinstance(username, str) and username else None


def owner_named(username: str | None):
    """The user of that username, or None (no record, or a user since removed)."""
    if not username:
        return None
    return get_user_model().objects.filter(username=username).first()
