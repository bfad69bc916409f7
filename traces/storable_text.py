"""Characters PostgreSQL's text cannot hold, which JSON, CSV, S3 keys and URLs can carry.

PostgreSQL's text and jsonb refuse NUL (and a query that compares with one), and a surrogate
cannot be encoded as UTF-8 at all; JSON spells either (`"\\u0000"`, an unpaired `"\\ud800"`).
The one definition: ingestion refuses a value holding one with a message naming the field
(`unstorable_character`), the failure path replaces them (`replace_unstorable`) so that a
failure can always be written, and the API and admin answer an id or filter holding one
without asking the database (`is_storable`). Pure: no Django, no I/O.
"""

import re

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def first_unstorable(text: str) -> tuple[int, str] | None:
    """(position, character) of the first character of `text` the database cannot store;
    None if there is none."""
    found = UNSTORABLE.search(text)
    return None if found is None else (found.start(), found.group())


def is_storable(text: str) -> bool:
    """Can a text column hold `text` (and a query compare with it)?"""
    return UNSTORABLE.search(text) is None


def unstorable_character(text: str) -> str | None:
    """The first character of `text` the database cannot store, described for an error
    message; None if there is none."""
    first = first_unstorable(text)
    if first is None:
        return None
    character = first[1]
    if character == "\x00":
        return "a NUL character (\\u0000)"
    return f"an unpaired surrogate (\\u{ord(character):04x}), which is not a character"


def replace_unstorable(value):
    """`value` (a string, or JSON of them) with each character the database cannot store
    replaced by U+FFFD."""
    if isinstance(value, str):
        return UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, list):
        return [replace_unstorable(item) for item in value]
    if isinstance(value, dict):
        return {replace_unstorable(key): replace_unstorable(item) for key, item in value.items()}
    return value
