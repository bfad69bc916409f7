"""What the client reads from a server, bounded and checked before anything uses it.

A server is whoever answers at CASCADE_URL, and a listing is whatever an uploader's keys made
it: an answer is read only up to a stated bound, parsed only as JSON of the shape the API
publishes, and a file is pulled only if its listed size is one a pull takes. Anything else is a
`BadAnswer` (exit status 11), one line naming what was wrong, before a byte lands on disk.

The bounds (docs/client.md):

- `ANSWER_MAX`: any JSON answer (a list of traces, a summary, `/files`, `/selection`, an
  upload's URLs), 128 MiB decompressed: a registry's list of 100,000 traces is a fifth of it;
- `LAUNCHES_ANSWER_MAX`: a trace's detail and `kernels.csv`, which hold every launch, 2 GiB;
- `ERROR_MAX`: an error's body, of which one sentence is shown, 1 MiB;
- `FILE_MAX`: one file of a run, as listed, 64 GiB; and a pull needs the listed bytes free on
  the destination's disk (pull.py).
"""

import json

import httpx

from cascade_client.errors import BadAnswer
from cascade_client.progress import size

ANSWER_MAX = 128 * 1024**2
LAUNCHES_ANSWER_MAX = 2 * 1024**3
ERROR_MAX = 1024**2
FILE_MAX = 64 * 1024**3
PARTS_MAX = 10_000  # S3's most parts of one upload
PART_SIZE_MAX = 5 * 1024**3  # S3's largest part


def read_capped(response: httpx.Response, limit: int, what: str, *, truncate: bool = False) -> bytes:
    """The body of a streamed `response`, decompressed, refused past `limit` bytes (or with
    `truncate`, an error's body of which a sentence is shown, its first `limit` bytes): an
    endless or huge answer is cut off there, never held."""
    body = bytearray()
    try:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit and truncate:
                return bytes(body[:limit])
            if len(body) > limit:
                raise BadAnswer(
                    f"{what}: the answer is larger than the {size(limit)} the client reads; cut off there"
                )
    except httpx.DecodingError as error:
        raise BadAnswer(f"{what}: the answer's compression is broken ({error})") from None
    return bytes(body)


def parse_json(body: bytes, what: str, expect: type = dict):
    """`body` as JSON whose top level is an `expect` (dict or list)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise BadAnswer(
            f"{what}: the answer is not JSON{': ' + shown(body) if body.strip() else ' (empty)'}"
        ) from None
    if not isinstance(value, expect):
        raise BadAnswer(f"{what}: the answer is {kind(value)}, where the API sends {kind(expect())}")
    return value


def listing(value: dict, what: str) -> dict:
    """`/files`: its `files` a list of objects, `refused` a list, `state` a string."""
    files = value.get("files")
    if not isinstance(files, list) or not all(isinstance(entry, dict) for entry in files):
        raise BadAnswer(f"{what}: `files` is {kind(files)}, where the API sends a list of files")
    if not isinstance(value.get("refused", []), list):
        raise BadAnswer(f"{what}: `refused` is {kind(value['refused'])}, where the API sends a list")
    if not isinstance(value.get("state", "ready"), str):
        raise BadAnswer(f"{what}: `state` is {kind(value['state'])}, where the API sends a string")
    return value


def listed_size(entry: dict, path: str, limit: int = FILE_MAX) -> int:
    """A listed file's `bytes`: a whole number from 0 to `limit`."""
    listed = entry.get("bytes")
    if not isinstance(listed, int) or isinstance(listed, bool) or listed < 0:
        raise BadAnswer(f"the server listed {path} without a size; nothing more pulled")
    if listed > limit:
        raise BadAnswer(
            f"the server listed {path} at {listed:,} bytes, past the {size(limit)} a file of a run may "
            "have; nothing pulled"
        )
    return listed


def http_url(value, what: str) -> str:
    """A link the client may fetch: an absolute http(s) URL."""
    try:
        url = httpx.URL(value) if isinstance(value, str) else None
    except httpx.InvalidURL:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise BadAnswer(f"{what}: the server's link is not an http(s) URL: {shown(str(value))}")
    return value


def selection(value: dict, what: str) -> dict:
    """`/selection`: `groups`, a list of objects, each with a `representative` object."""
    groups = value.get("groups")
    if not isinstance(groups, list) or not all(
        isinstance(group, dict) and isinstance(group.get("representative"), dict) for group in groups
    ):
        raise BadAnswer(f"{what}: `groups` is not a list of groups with their representatives")
    for group in groups:
        representative = group["representative"]
        for field, name, types in (
            (group.get("name"), "a group's `name`", (str,)),
            (group.get("count"), "a group's `count`", (int,)),
            (representative.get("trace_file"), "a representative's `trace_file`", (str, type(None))),
            (representative.get("ctx"), "a representative's `ctx`", (str, type(None))),
            (representative.get("kernel_id"), "a representative's `kernel_id`", (int,)),
        ):
            if not isinstance(field, types):
                raise BadAnswer(f"{what}: {name} is {kind(field)}")
    return value


def upload_files(value: dict, asked: dict[str, int], what: str) -> list[dict]:
    """An upload's answer: exactly the files asked for (`asked`: name to size), each once, with
    a PUT's URL and headers, or a multipart upload whose parts cover the file in `part_size`
    pieces."""
    files = value.get("files")
    if not isinstance(files, list) or not all(isinstance(entry, dict) for entry in files):
        raise BadAnswer(f"{what}: `files` is not a list of files")
    names = [entry.get("name") for entry in files]
    for name in names:
        if name not in asked:
            raise BadAnswer(f"{what}: the server answered for {shown(str(name))}, a file not asked for")
    if len(set(names)) != len(names):
        raise BadAnswer(f"{what}: the server answered for a file twice")
    if missing := sorted(set(asked) - set(names)):
        raise BadAnswer(f"{what}: the server's answer leaves out {', '.join(missing)}")
    for entry in files:
        name = entry["name"]
        if "multipart" in entry:
            _multipart(entry["multipart"], asked[name], f"{what}: {name}")
        else:
            http_url(entry.get("url"), f"{what}: {name}")
            headers = entry.get("headers") or {}
            if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
            ):
                raise BadAnswer(f"{what}: {name}'s headers are not a map of strings")
    return files


def _multipart(multipart, file_size: int, what: str) -> None:
    if not isinstance(multipart, dict):
        raise BadAnswer(f"{what}: `multipart` is {kind(multipart)}")
    part_size, parts = multipart.get("part_size"), multipart.get("parts")
    if not isinstance(part_size, int) or isinstance(part_size, bool) or not 0 < part_size <= PART_SIZE_MAX:
        raise BadAnswer(
            f"{what}: `part_size` is {shown(str(part_size))}, not a size from 1 byte to {size(PART_SIZE_MAX)}"
        )
    if not isinstance(multipart.get("upload_id"), str):
        raise BadAnswer(f"{what}: `upload_id` is {kind(multipart.get('upload_id'))}")
    if not isinstance(parts, list) or not parts or len(parts) > PARTS_MAX:
        raise BadAnswer(f"{what}: `parts` is not a list of 1 to {PARTS_MAX:,} parts")
    numbers = []
    for part in parts:
        number = part.get("part_number") if isinstance(part, dict) else None
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= PARTS_MAX:
            raise BadAnswer(f"{what}: a part's `part_number` is {shown(str(number))}")
        http_url(part.get("url"), what)
        numbers.append(number)
    # Each part a piece of the file, together the whole file, none twice.
    needed = max(1, -(-file_size // part_size))
    if sorted(numbers) != list(range(1, needed + 1)):
        raise BadAnswer(
            f"{what}: the parts ({len(numbers)}) do not cover the file's {file_size:,} bytes in "
            f"pieces of {part_size:,}"
        )


def kind(value) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def shown(text, limit: int = 80) -> str:
    """At most `limit` characters of an answer, as a Python literal (control characters escaped)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text.strip()
    return repr(text[:limit]) + ("…" if len(text) > limit else "")
