"""One path rule, the server's and the client's: every name that could leave a pull's folder, or
show as another name (bidi controls, invisible characters), is refused by both alike.

The server lists, signs and reads only what `ingest.paths.path_problem` passes; a pull writes
only what `cascade_client.paths.path_problem` passes. The names are the issue's and the Unicode
standard's (UAX #9's explicit directional formatting characters, the zero-width ones).
"""

import pytest

HOSTILE = [
    "../x",
    "a/../../y",
    "/tmp/z",
    "C:\\Windows\\x.dll",
    "a:b",
    "q\tr",
    "./s",
    "t/..",
    "configs/NUL.txt",
    "configs/a.",
    "configs/a ",
    "",
    # The explicit directional formatting characters (UAX #9, 2.1-2.4) and marks.
    *(f"configs/{chr(code)}gifnoc.exe" for code in (0x202A, 0x202B, 0x202C, 0x202D, 0x202E)),
    *(f"traces/{chr(code)}kernel-1.traceg.xz" for code in (0x2066, 0x2067, 0x2068, 0x2069)),
    *(f"traces/kernel-1{chr(code)}.traceg.xz" for code in (0x200E, 0x200F, 0x061C)),
    # Zero-width and invisible: a name that shows as another.
    "traces/kernel\u200b-1.traceg.xz",
    "traces/kernel\u200d-1.traceg.xz",
    "traces/\ufeffkernel-1.traceg.xz",
    "configs/a\u2028b",
    "configs/a\u2029b",
    "configs/\ud800",  # a lone surrogate: JSON can carry one, no file system can hold it
]
PLAIN = [
    "traces/kernel-1-ctx_0x6165bdd7ec90.trace.xz",
    "configs/my config+v2 (copy).txt",
    "traces/ü.txt",
    "a..b/c",
]


@pytest.mark.parametrize("path", HOSTILE, ids=[ascii(p) for p in HOSTILE])
def test_the_server_and_the_client_refuse_the_same_hostile_names(path):
    from cascade_client.paths import path_problem as client_rule

    from ingest.paths import path_problem as server_rule

    assert client_rule(path) is not None
    assert server_rule(path) == client_rule(path)


@pytest.mark.parametrize("path", PLAIN)
def test_plain_names_pass_both(path):
    from cascade_client.paths import path_problem as client_rule

    from ingest.paths import path_problem as server_rule

    assert client_rule(path) is None and server_rule(path) is None


def test_a_bidi_override_is_named_by_its_code_point():
    from cascade_client.paths import path_problem

    assert path_problem("configs/\u202egifnoc.exe") == (
        "an invisible or bidirectional formatting character (U+202E)"
    )
