"""Uploads through presigned URLs, as Cascade answers them for a simulation (`cascade simulate`)
and a pushed run (`cascade push`): a POST to Cascade for the URLs, then each file PUT to the
bucket, in one piece (`url`, `headers`) or in parts (`multipart`), never with the token.

`send` PUTs one file of an answer; `done_parts` and `on_part` let a caller skip the parts it
already sent and record each as it lands (push.py's resumable state).
"""

from collections.abc import Callable
from pathlib import Path

import httpx

from cascade_client import answers
from cascade_client.errors import CascadeError

PUT_TIMEOUT = 300.0  # a part of 64 MiB over a slow link


def post_json(client, path: str, body: dict) -> dict:
    """POST `body` to Cascade with the token; its answer (capped and checked as every answer is,
    cascade_client.answers), or the error it stands for (a 403 says who refused and why, in the
    server's words)."""
    return client._post_json(path, body, refused="the server refused the upload")


def bucket_client(client) -> httpx.Client:
    """The client that PUTs to the bucket: no token, the Cascade client's transport (tests')."""
    return httpx.Client(timeout=httpx.Timeout(PUT_TIMEOUT), transport=client.transport)


def put(http: httpx.Client, url: str, body: bytes, headers: dict, name: str) -> httpx.Response:
    """One PUT to the bucket; its answer's body read no further than an error's bound."""
    try:
        with http.stream("PUT", url, content=body, headers=headers) as response:
            answers.read_capped(response, answers.ERROR_MAX, f"{name}: the bucket's answer", truncate=True)
    except httpx.TransportError as error:
        raise CascadeError(f"{name}: cannot reach the bucket: {error or type(error).__name__}") from None
    if response.status_code >= 300:
        raise CascadeError(f"{name}: the bucket answered {response.status_code} to its upload")
    return response


def send(
    http: httpx.Client,
    entry: dict,
    path: Path,
    *,
    done_parts: dict[int, str] | None = None,
    on_part: Callable[[int, str, int], None] | None = None,
) -> dict | None:
    """PUT the file `entry` answers for: one PUT, or each multipart part not in `done_parts`
    (part number: ETag); `on_part(number, etag, bytes)` after each part that lands. The
    completion's item for a multipart upload (`{"name", "upload_id", "parts"}`), else None."""
    name = entry.get("name", "?")
    if "multipart" not in entry:
        body = path.read_bytes()
        put(http, entry["url"], body, entry.get("headers") or {}, name)
        if on_part is not None:
            on_part(0, "", len(body))
        return None
    multipart = entry["multipart"]
    part_size = multipart["part_size"]
    if not isinstance(part_size, int) or part_size < 1:
        raise CascadeError(f"{name}: the server's part size {part_size!r} is not a number of bytes")
    etags = dict(done_parts or {})
    with path.open("rb") as f:
        for part in multipart["parts"]:
            number = part["part_number"]
            if number in etags:
                continue
            f.seek((number - 1) * part_size)
            body = f.read(part_size)
            etag = put(http, part["url"], body, {}, name).headers.get("ETag")
            if not etag:
                raise CascadeError(f"{name}: the bucket's answer to part {number} has no ETag")
            etags[number] = etag
            if on_part is not None:
                on_part(number, etags[number], len(body))
    parts = [{"part_number": number, "etag": etags[number]} for number in sorted(etags)]
    return {"name": name, "upload_id": multipart["upload_id"], "parts": parts}
