"""Characters PostgreSQL's text cannot hold, which JSON and CSV can carry: NUL, and surrogates.

JSON spells any code point (`"\\u0000"`, an unpaired `"\\ud800"`); PostgreSQL's text and jsonb
refuse NUL, and a surrogate cannot be encoded as UTF-8 at all. A value that would reach the
database is checked here first, so that the run is refused with a message naming the field,
never by the database halfway through storing it.
"""

import re

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable_character(text: str) -> str | None:
    """The first character of `text` the database cannot store, described; None if there is none."""
    found = UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "a NUL character (\\u0000)"
    return f"an unpaired surrogate (\\u{ord(found.group()):04x}), which is not a character"
