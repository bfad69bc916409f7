"""Untrusted text on a terminal: trace metadata, kernel names, paths and the server's error
messages are anyone's bytes, and an escape sequence in them clears a screen, sets a window's
title or hides a line. Printed with `visible`, every control character shows as its escape."""

import unicodedata

# Bidirectional overrides and isolates reorder what a terminal shows ("Trojan Source").
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def visible(text, *, keep: str = "") -> str:
    """`text` with each control character (C0, DEL, C1, bidirectional controls) written as
    `\\x1b` or `\\u202e`, and a backslash as it is; `keep` lists those left alone (`"\\n"`)."""
    text = str(text)
    if text.isprintable() and not BIDI.intersection(text):
        return text
    return "".join(_escaped(char) if char not in keep and _control(char) else char for char in text)


def _control(char: str) -> bool:
    return unicodedata.category(char) == "Cc" or char in BIDI


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def table_lines(header: list[str], rows: list[list[str]], right=frozenset()) -> list[str]:
    """Columns padded to their widest cell, two spaces apart (those in `right` right-aligned),
    each cell `visible`."""
    rows = [[visible(cell) for cell in row] for row in rows]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    return [
        "  ".join(
            str(cell).rjust(width) if i in right else str(cell).ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in [header, *rows]
    ]
