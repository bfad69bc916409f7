"""traces.storable_text: the one definition of what PostgreSQL's text cannot store, checked against it."""

import pytest
from django.db import DatabaseError, connection, transaction

from traces.storable_text import first_unstorable, is_storable, replace_unstorable, unstorable_character

# Each side of each boundary: NUL and U+0001, the surrogate block's edges, the last code point.
EDGES = ["\x00", "\x01", "\ud7ff", "\ud800", "\udbff", "\udc00", "\udfff", "\ue000", "\ufffd", "\U0010ffff"]


def database_stores(text: str) -> bool:
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT %s::text", [text])
            return cursor.fetchone()[0] == text
    except (DatabaseError, UnicodeEncodeError, ValueError):
        return False


@pytest.mark.django_db
@pytest.mark.postgres("the outside truth is PostgreSQL's text type")
@pytest.mark.parametrize("character", EDGES, ids=[f"U+{ord(c):04X}" for c in EDGES])
def test_is_storable_agrees_with_postgresql(character):
    assert is_storable(f"a{character}b") is database_stores(f"a{character}b")


def test_first_unstorable_names_the_first_position_and_character():
    assert first_unstorable("plain text, é and 🙂") is None
    assert first_unstorable("ab\udc00c\x00") == (2, "\udc00")
    assert first_unstorable("\x00") == (0, "\x00")


def test_unstorable_character_describes_it_for_a_message():
    assert unstorable_character("fine") is None
    assert unstorable_character("a\x00") == "a NUL character (\\u0000)"
    assert unstorable_character("a\ud83d") == "an unpaired surrogate (\\ud83d), which is not a character"


def test_replace_unstorable_reaches_strings_keys_and_items_and_leaves_the_rest():
    value = {"mo\x00del": ["a\ud800", 3, None, {"k": "\x00"}], "n": 1.5}
    assert replace_unstorable(value) == {"mo\ufffddel": ["a\ufffd", 3, None, {"k": "\ufffd"}], "n": 1.5}
    assert replace_unstorable("clean") == "clean"
