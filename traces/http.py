"""HTTP around the Traces API's JSON: content codings (gzip, zstd), ETags, 304s, Cache-Control.

A TraceDetail can be hundreds of megabytes of very repetitive JSON (a trace launches the same
few dozen kernels over and over): compressed it is 15 to 40 times smaller, and a client that
already holds it should not download it again. Three constraints shape this module:

- The detail is streamed, so it is compressed chunk by chunk, each chunk flushed (gzip's
  Z_SYNC_FLUSH, zstd's block flush): memory stays at one chunk and the first bytes leave at
  once. Django's GZipMiddleware is not used: it compresses every response (errors of a few
  bytes included) and cannot be told which coding a client prefers.
- A detail's ETag must be known before its kernels are read, so that a 304 costs one query on
  the trace table. Every write to a trace or its kernels saves the trace row, which bumps its
  `updated_at` (`Trace.save`, called by every service in `traces.services`): the row's id and
  `updated_at` identify what the detail says. A list's ETag is known without its body
  too: from its rows' count, keys and `updated_at` (`selectors.ListVersion`, `list_digest`).
- Each coding is a different representation with its own strong ETag (`"<digest>-gzip"`,
  `"<digest>-zstd"`); `If-None-Match` matches any coding of the current digest (a client that
  cached the gzip answer and now accepts zstd still holds the current content).

Responses say `Cache-Control: private, no-cache`: private because they answer one token (no
shared cache may keep them), no-cache because a trace can change at any moment (a re-upload,
an operator's re-ingest) and asking again costs the client a 304 of a few hundred bytes.
"""

import hashlib
import math
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import BinaryIO

import orjson
import zstandard
from django.http import FileResponse, HttpResponse, HttpResponseNotModified, StreamingHttpResponse
from django.utils.cache import patch_vary_headers
from django.utils.http import content_disposition_header, parse_etags

from traces.encoders import format_timestamp
from traces.models import Trace

IDENTITY = "identity"
GZIP = "gzip"
ZSTD = "zstd"
# At equal q a client gets zstd: smaller and several times cheaper to produce than gzip.
CODINGS = (ZSTD, GZIP)
ALIASES = {"x-gzip": GZIP}

# gzip 6 is the knee: it keeps pace with the encoding and keeps a margin on less repetitive
# traces; zstd 1 gives fewer bytes than its default, 3, on our JSON, and faster. The measurements:
# docs/performance.md, "Compression levels".
GZIP_LEVEL = 6
ZSTD_LEVEL = 1
# A list shorter than this is sent as is: a few traces' JSON would barely shrink.
COMPRESS_ABOVE = 1024

CACHE_CONTROL = "private, no-cache"
# The same URL answers JSON or the browsable API's HTML (Accept), plain or compressed.
VARY = ("Accept", "Accept-Encoding")

# Bump when the JSON sent for an unchanged trace row changes (a new key, another format): the
# detail's ETag then changes for every trace, and no client keeps a copy in the old shape.
REPRESENTATION_VERSION = "1"


# --- Accept-Encoding ------------------------------------------------------------------------


def accepted_codings(header: str) -> dict[str, float]:
    """`gzip;q=0.5, zstd, *;q=0` as {coding: q}; a q that cannot be read refuses its coding."""
    weights: dict[str, float] = {}
    for item in header.split(","):
        coding, *params = item.split(";")
        coding = coding.strip().lower()
        if not coding:
            continue
        weight = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(value.strip())
                except ValueError:
                    weight = 0.0
                if not (math.isfinite(weight) and 0.0 <= weight <= 1.0):
                    weight = 0.0
        weights[ALIASES.get(coding, coding)] = weight
    return weights


def choose_coding(header: str | None) -> str:
    """The coding to answer a request's Accept-Encoding with: zstd, gzip or identity.

    No header means identity (RFC 9110 would allow any coding, but a client that names none,
    curl without --compressed, expects plain bytes). `*` stands for codings not named; q=0
    refuses; identity wins only when named with a higher q than the best coding.
    """
    if not header:
        return IDENTITY
    weights = accepted_codings(header)
    others = weights.get("*", 0.0)
    best, best_weight = IDENTITY, 0.0
    for coding in CODINGS:
        weight = weights.get(coding, others)
        if weight > best_weight:
            best, best_weight = coding, weight
    if best != IDENTITY and weights.get(IDENTITY, 0.0) > best_weight:
        return IDENTITY
    return best


# --- compression ----------------------------------------------------------------------------


def compressor(coding: str) -> tuple[Callable[[bytes], bytes], Callable[[], bytes]]:
    """`compress(chunk)` (the chunk's compressed bytes, flushed) and `finish()` (the end of the
    stream) for `coding`: the one definition of what an answer's compressed bytes are, whether
    they are sent as computed (`compress_chunks`) or written once (`detail_bodies`)."""
    if coding == GZIP:
        gzip = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: a gzip header, mtime 0

        def compress(data: bytes) -> bytes:
            return gzip.compress(data) + gzip.flush(zlib.Z_SYNC_FLUSH)

        return compress, gzip.flush
    if coding == ZSTD:
        zstd = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj()

        def compress(data: bytes) -> bytes:
            return zstd.compress(data) + zstd.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)

        return compress, zstd.flush
    raise ValueError(f"not a content coding: {coding!r}")


def compress_chunks(chunks: Iterable[bytes], coding: str) -> Iterator[bytes]:
    """`chunks` compressed with `coding`, each flushed as it comes: memory stays at one chunk.

    Closing this generator (a client that hung up) closes `chunks`, and with it the
    kernels' database cursor.
    """
    compress, finish = compressor(coding)
    try:
        for chunk in chunks:
            if compressed := compress(chunk):
                yield compressed
        yield finish()
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def compress_bytes(body: bytes, coding: str) -> bytes:
    return b"".join(compress_chunks((body,), coding))


# --- ETags and If-None-Match ------------------------------------------------------------------


def etag(digest: str, coding: str) -> str:
    """The strong ETag of one coding of a representation: `"<digest>"`, `"<digest>-gzip"`..."""
    return f'"{digest}"' if coding == IDENTITY else f'"{digest}-{coding}"'


def if_none_match_hits(header: str | None, digest: str) -> bool:
    """Does If-None-Match name the current representation (in any coding)? `*` always does.

    Django's parse_etags reads the header (entries that are not entity tags are dropped); the
    comparison is weak, as RFC 9110 asks for If-None-Match: `W/"x"` matches `"x"`.
    """
    if not header:
        return False
    tags = parse_etags(header)
    if tags == ["*"]:
        return True
    current = {etag(digest, coding) for coding in (IDENTITY, *CODINGS)}
    return any(tag.removeprefix("W/") in current for tag in tags)


def digest_of(*parts: str) -> str:
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=16).hexdigest()


def trace_digest(trace_id: str, updated_at: datetime) -> str:
    """What identifies a trace's detail: its row's id and `updated_at` (see the module's docstring)."""
    return digest_of(REPRESENTATION_VERSION, trace_id, format_timestamp(updated_at))


# Bump when the CSV sent for an unchanged trace row changes (a column added, another format).
CSV_REPRESENTATION_VERSION = "1"


def kernels_csv_digest(trace_id: str, updated_at: datetime, *, raw: bool = False) -> str:
    """What identifies a trace's kernels.csv: the detail's rule (its row's id and `updated_at`),
    as another representation, so that the detail's ETag never matches the CSV's (nor the
    neutralised CSV's the raw one's, `?raw=1`)."""
    kind = "kernels.csv raw" if raw else "kernels.csv"
    return digest_of(kind, CSV_REPRESENTATION_VERSION, trace_id, format_timestamp(updated_at))


def trace_updated_at(trace_id: str) -> datetime | None:
    """The trace's `updated_at`, or None when there is no such trace: one query on the trace table."""
    return Trace.objects.filter(pk=trace_id).values_list("updated_at", flat=True).first()


# --- responses --------------------------------------------------------------------------------


def cacheable(response: HttpResponse, digest: str, coding: str) -> HttpResponse:
    """The headers every JSON answer of the list and the detail carries, 304s included."""
    response["ETag"] = etag(digest, coding)
    response["Cache-Control"] = CACHE_CONTROL
    if coding != IDENTITY and response.status_code != 304:  # a 304 has no content to decode
        response["Content-Encoding"] = coding
    patch_vary_headers(response, VARY)
    return response


def not_modified(digest: str, coding: str) -> HttpResponse:
    """304 with the ETag, Cache-Control and Vary the 200 would carry, and no body."""
    return cacheable(HttpResponseNotModified(), digest, coding)


def head_response(digest: str, coding: str) -> StreamingHttpResponse:
    """A HEAD's answer: a 200's headers without its body (no Content-Length: the detail's
    length is known only once streamed)."""
    return cacheable(StreamingHttpResponse((), content_type="application/json"), digest, coding)


def json_response(body: bytes, *, digest: str, coding: str) -> HttpResponse:
    """JSON bytes, compressed when `coding` says so (for a list, `list_coding` decides)."""
    if coding != IDENTITY:
        body = compress_bytes(body, coding)
    return cacheable(HttpResponse(body, content_type="application/json"), digest, coding)


def streaming_json_response(
    chunks: Iterable[bytes],
    *,
    digest: str,
    coding: str,
    keep: Callable[[Iterator[bytes]], Iterator[bytes]] | None = None,
) -> StreamingHttpResponse:
    """JSON in chunks (chunked transfer, no Content-Length), compressed chunk by chunk; `keep`
    wraps the compressed chunks (`body_cache.tee`: a copy kept on disk as they are sent)."""
    if coding != IDENTITY:
        chunks = compress_chunks(chunks, coding)
        if keep is not None:
            chunks = keep(chunks)
    return cacheable(StreamingHttpResponse(chunks, content_type="application/json"), digest, coding)


def unversioned_json_response(chunks: Iterable[bytes], coding: str, *, stream: bool) -> HttpResponse:
    """JSON with no ETag (a selection, a simulation: their rows say nothing of when they last
    changed), streamed chunk by chunk as it is encoded when `stream`, else joined; compressed
    as asked, with Vary as every answer of the API that may be compressed."""
    if stream:
        response = StreamingHttpResponse(compress_chunks(chunks, coding) if coding != IDENTITY else chunks)
    else:
        body = b"".join(chunks)
        response = HttpResponse(compress_bytes(body, coding) if coding != IDENTITY else body)
    response["Content-Type"] = "application/json"
    if coding != IDENTITY:
        response["Content-Encoding"] = coding
    patch_vary_headers(response, VARY)
    return response


def file_json_response(body: BinaryIO, *, digest: str, coding: str) -> FileResponse:
    """Encoded JSON kept in a file (`body_cache`), with the headers of the answer it was
    computed as, and now a Content-Length. FileResponse streams it (the server's sendfile when
    it has one) and closes it; its `inline; filename=` would name a cache file: dropped."""
    response = FileResponse(body, content_type="application/json")
    del response["Content-Disposition"]
    return cacheable(response, digest, coding)


# --- a body written once (`detail_bodies`): its length known, so ranges too -------------------

WHOLE = None
UNSATISFIABLE = "unsatisfiable"


def byte_range(header: str | None, if_range: str | None, size: int, current: str):
    """The one range of bytes a Range header asks of a `size`-byte representation whose ETag is
    `current`: `(start, stop)`, WHOLE (no Range, one that cannot be read, several ranges, or an
    If-Range that names another representation or a date: RFC 9110 lets a server answer those
    whole) or UNSATISFIABLE (it starts past the end: a 416)."""
    if not header or (if_range is not None and if_range.strip() != current):
        return WHOLE
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return WHOLE
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first + last).isascii() or not (first.isdigit() or first == ""):
        return WHOLE
    if last and not last.isdigit():
        return WHOLE
    if first == "":
        if not last:
            return WHOLE
        suffix = int(last)
        if suffix == 0 or size == 0:
            return UNSATISFIABLE
        return max(0, size - suffix), size
    start = int(first)
    if last and int(last) < start:
        return WHOLE
    if start >= size:
        return UNSATISFIABLE
    return start, min(size, int(last) + 1) if last else size


def written_json_response(
    read: Callable[[int, int], Iterator[bytes]],
    size: int,
    *,
    digest: str,
    coding: str,
    range_header: str | None = None,
    if_range: str | None = None,
) -> HttpResponse:
    """An answer written once (`detail_bodies`), streamed by `read(start, stop)`: the headers of
    the answer it was computed as, plus its Content-Length and Accept-Ranges; a 206 for one
    satisfiable range, a 416 for one that starts past the end."""
    wanted = byte_range(range_header, if_range, size, etag(digest, coding))
    if wanted is UNSATISFIABLE:
        response = HttpResponse(
            orjson.dumps({"detail": f"the range starts past the end of the {size:,}-byte answer"}),
            status=416,
            content_type="application/json",
        )
        response["Content-Range"] = f"bytes */{size}"
        return response
    start, stop = (0, size) if wanted is WHOLE else wanted
    response = cacheable(
        StreamingHttpResponse(read(start, stop), content_type="application/json"), digest, coding
    )
    response["Content-Length"] = str(stop - start)
    response["Accept-Ranges"] = "bytes"
    if wanted is not WHOLE:
        response.status_code = 206
        response["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
    return response


CSV_CONTENT_TYPE = "text/csv; charset=utf-8"


def csv_attachment(response: HttpResponse, filename: str) -> HttpResponse:
    """Content-Type and Content-Disposition of a CSV download: Django quotes the name (RFC
    6266), or writes it as `filename*=utf-8''...` when it is not printable ASCII."""
    response["Content-Type"] = CSV_CONTENT_TYPE
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


def streaming_csv_response(
    chunks: Iterable[bytes], *, digest: str, coding: str, filename: str
) -> StreamingHttpResponse:
    """CSV in chunks (chunked transfer), compressed chunk by chunk as the detail's JSON."""
    if coding != IDENTITY:
        chunks = compress_chunks(chunks, coding)
    return cacheable(csv_attachment(StreamingHttpResponse(chunks), filename), digest, coding)


def csv_head_response(digest: str, coding: str, filename: str) -> StreamingHttpResponse:
    """A HEAD's answer for the CSV: the 200's headers, no kernel read."""
    return cacheable(csv_attachment(StreamingHttpResponse(()), filename), digest, coding)


# --- the list (`GET /api/traces`) -------------------------------------------------------------

# A list of more traces than this is compressed when asked: a TraceSummary is never under 280
# bytes of JSON, so 4 are over COMPRESS_ABOVE. Counted, not measured, so that a 304 knows the
# coding its 200 would have without building the body.
COMPRESS_TRACES_ABOVE = 3


def list_coding(coding: str, traces: int) -> str:
    """The coding of a list of `traces` traces, given the one Accept-Encoding chose."""
    return coding if traces > COMPRESS_TRACES_ABOVE else IDENTITY


def list_digest(filters: str, page: str, version) -> str:
    """What identifies a list's answer without its body: its filters, its page, and the
    `selectors.ListVersion` of its rows (whose docstring says why these numbers suffice)."""
    return digest_of(
        REPRESENTATION_VERSION,
        "list",
        filters,
        page,
        str(version.count),
        str(version.key_sum),
        str(version.stamp_sum),
        "more" if version.more else "",
    )
