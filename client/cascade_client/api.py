"""`Cascade`: the published API (docs/api.md) from Python, with errors a person can read.

Only the routes the reference publishes, plus `/files`, `/selection` and
`kernels.csv`. The token goes to Cascade only: the presigned links `/files` hands out are
fetched without it (pull.py), so a trace's bytes never pass through the web server. Every
answer is read up to a bound and checked for the API's shape (answers.py): an endless body, a
redirect or a list where an object belongs is a `BadAnswer`, never a traceback.
"""

import csv
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx

from cascade_client import answers
from cascade_client.errors import BadAnswer, BadToken, CascadeError, NotFound, NoToken, NotReady, Unreachable

DEFAULT_URL = "http://127.0.0.1:8000"
# The filters GET /api/traces reads; `arch` and `gpu` are the command line's short names.
FILTERS = {"state", "model", "source_gpu", "trace_gpu_arch", "sample", "created_after", "created_before"}
ALIASES = {"arch": "trace_gpu_arch", "gpu": "source_gpu"}


class Cascade:
    """A Cascade server: `CASCADE_URL` and `CASCADE_TOKEN` unless given.

    >>> Cascade().traces(state="ready", trace_gpu_arch="sm_90")
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        max_answer_bytes: int = answers.ANSWER_MAX,
        max_launches_bytes: int = answers.LAUNCHES_ANSWER_MAX,
    ):
        self.url = (url or os.environ.get("CASCADE_URL") or DEFAULT_URL).rstrip("/")
        # Spaces around a pasted token are the paste's, never the token's.
        self.token = (token if token is not None else os.environ.get("CASCADE_TOKEN", "")).strip()
        # One transport for Cascade and the bucket's links alike (tests hand in a MockTransport).
        self.transport = transport
        self.max_answer_bytes, self.max_launches_bytes = max_answer_bytes, max_launches_bytes
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- the routes ---------------------------------------------------------------------

    def traces(self, **filters) -> list[dict]:
        """Every trace, newest first, narrowed by GET /api/traces's filters (`state`, `model`,
        `source_gpu`, `trace_gpu_arch`, `sample`, `created_after`, `created_before`)."""
        params = {}
        for name, value in filters.items():
            name = ALIASES.get(name, name)
            if name not in FILTERS:
                raise TypeError(f"unknown filter {name!r}: one of {', '.join(sorted(FILTERS))}")
            if value is not None:
                params[name] = str(value).lower() if isinstance(value, bool) else str(value)
        rows = self._get_json("/api/traces", params=params, expect=list)
        if not all(isinstance(row, dict) for row in rows):
            raise BadAnswer("GET /api/traces: the answer is not a list of traces")
        return rows

    def trace(self, trace_id: str) -> dict:
        """The trace's detail: its fields, `metadata` and every launch in `kernels`."""
        return self._get_json(self._path(trace_id), limit=self.max_launches_bytes)

    def summary(self, trace_id: str) -> dict:
        """A ready trace's kernel mix and steps (`/summary`)."""
        return self._get_json(self._path(trace_id, "summary"))

    def files(self, trace_id: str) -> dict:
        """The run's files, each with a presigned link (`/files`)."""
        path = self._path(trace_id, "files")
        return answers.listing(self._get_json(path), f"GET {path}")

    def selection(self, trace_id: str, select: str = "unique", *, cover: float = 1.0) -> dict:
        """Representative launches (`/selection`): `select` is `unique` or `step:<name>`."""
        params = {"cover": repr(float(cover)), "members": "0"}
        if select == "unique":
            params["by"] = "unique"
        elif select.startswith("step:") and select[5:]:
            params |= {"by": "step", "step": select[5:]}
        else:
            raise ValueError(f"select must be 'unique' or 'step:<name>', not {select!r}")
        path = self._path(trace_id, "selection")
        return answers.selection(self._get_json(path, params=params), f"GET {path}")

    def kernels(self, trace_id: str, *, as_frame: bool = False):
        """Every launch of the trace: a list of dicts (the detail's `kernels`), or with
        `as_frame=True` a pandas DataFrame read from `kernels.csv` (far cheaper than JSON)."""
        if not as_frame:
            return self.trace(trace_id)["kernels"]
        try:
            import pandas
        except ImportError:
            raise CascadeError("as_frame=True needs pandas: pip install 'cascade-client[pandas]'") from None
        body = b"".join(self.kernels_csv(trace_id, raw=True))
        return pandas.read_csv(io.BytesIO(body), keep_default_na=False, na_values=[""])

    def kernels_csv(self, trace_id: str, *, raw: bool = False) -> Iterator[bytes]:
        """`kernels.csv` as it arrives (decompressed), chunk by chunk: for a spreadsheet, its
        cells that would read as formulas neutralised by the server (a leading `'`); with
        `raw=True` (`?raw=1`) the text as it is, for programs."""
        params = {"raw": "1"} if raw else None
        with self._stream(self._path(trace_id, "kernels.csv"), params=params) as stream:
            yield from stream.iter_bytes()

    def kernel_rows(self, trace_id: str) -> Iterator[dict[str, str]]:
        """`kernels.csv` read row by row with the csv module: strings (the raw text), "" for null."""
        yield from csv.DictReader(_lines(self.kernels_csv(trace_id, raw=True)))

    def pull(
        self,
        trace_id: str,
        dest: str | Path | None = None,
        *,
        select: str | None = None,
        cover: float = 1.0,
        jobs: int = 8,
        progress=None,
        force: bool = False,
        allow_missing: bool = False,
    ):
        """The run into `dest` (default `./<trace_id>`), ready for Accel-Sim; see pull.py."""
        from cascade_client.pull import pull

        return pull(
            self,
            trace_id,
            dest,
            select=select,
            cover=cover,
            jobs=jobs,
            progress=progress,
            force=force,
            allow_missing=allow_missing,
        )

    # --- HTTP -----------------------------------------------------------------------------

    def _path(self, trace_id: str, *rest: str) -> str:
        return "/".join(["/api/traces", quote(trace_id, safe=""), *rest])

    def _headers(self) -> dict[str, str]:
        if not self.token:
            raise NoToken(
                "no token: set CASCADE_TOKEN (an operator makes one with `python manage.py create_token NAME`)"
            )
        if not all("!" <= char <= "~" for char in self.token):
            raise BadToken(
                "CASCADE_TOKEN is malformed: it holds a space or a character no token has; copy it again"
            )
        return {"Authorization": f"Bearer {self.token}"}

    def _send(
        self, method: str, path: str, *, params: dict | None = None, body=None, limit: int | None = None
    ) -> tuple[httpx.Response, bytes]:
        """The answer to one request and its body, read up to `limit` bytes (an error's up to
        `answers.ERROR_MAX`); unchecked (`check` says what its status means)."""
        request = self._http.build_request(method, path, params=params, json=body, headers=self._headers())
        what = f"{method} {request.url.path}"
        try:
            response = self._http.send(request, stream=True)
            try:
                if response.status_code >= 300:
                    content = answers.read_capped(response, answers.ERROR_MAX, what, truncate=True)
                else:
                    content = answers.read_capped(response, limit or self.max_answer_bytes, what)
            finally:
                response.close()
        except httpx.TransportError as error:
            raise self._unreachable(error) from None
        return response, content

    def _get_json(
        self, path: str, params: dict | None = None, *, limit: int | None = None, expect: type = dict
    ):
        response, content = self._send("GET", path, params=params, limit=limit)
        check(response, self.url, content)
        return answers.parse_json(content, f"GET {response.request.url.path}", expect)

    def _post_json(self, path: str, body: dict, *, refused: str) -> dict:
        """A POST's JSON answer; a 403 says `refused`, with the server's reason."""
        response, content = self._send("POST", path, body=body)
        if response.status_code == 403:
            raise CascadeError(f"{refused} (403): {error_detail(content) or 'the token may not do this'}")
        check(response, self.url, content)
        return answers.parse_json(content, f"POST {response.request.url.path}")

    def _stream(self, path: str, params: dict | None = None):
        """A GET's body as it arrives, refused past the launches' bound (a trace's kernels.csv)."""
        client = self

        class Stream:
            def __enter__(self):
                headers = client._headers()
                try:
                    self.response = client._http.send(
                        client._http.build_request("GET", path, params=params, headers=headers), stream=True
                    )
                except httpx.TransportError as error:
                    raise client._unreachable(error) from None
                if self.response.status_code >= 300:
                    what = f"GET {self.response.request.url.path}"
                    try:
                        content = answers.read_capped(self.response, answers.ERROR_MAX, what, truncate=True)
                    finally:
                        self.response.close()
                    check(self.response, client.url, content)
                return self

            def iter_bytes(self):
                read, limit = 0, client.max_launches_bytes
                try:
                    for chunk in self.response.iter_bytes():
                        read += len(chunk)
                        if read > limit:
                            raise BadAnswer(
                                f"GET {self.response.request.url.path}: the answer is larger than the "
                                f"{answers.size(limit)} the client reads; cut off there"
                            )
                        yield chunk
                except httpx.DecodingError as error:
                    raise BadAnswer(f"GET {path}: the answer's compression is broken ({error})") from None
                except httpx.TransportError as error:
                    raise client._unreachable(error) from None

            def __exit__(self, *exc):
                self.response.close()

        return Stream()

    def _unreachable(self, error: Exception) -> Unreachable:
        reason = str(error) or type(error).__name__
        return Unreachable(f"cannot reach Cascade at {self.url}: {reason} (is CASCADE_URL right?)")


def check(response: httpx.Response, url: str, content: bytes | None = None) -> None:
    """Raise the error an answer stands for, with the server's own `detail` when it has one.
    `content`: the body as read (a streamed answer's); else the response's own."""
    status = response.status_code
    if status < 300:
        return
    if status < 400:  # the API never redirects: a wrong CASCADE_URL, or a server that loops
        where = answers.shown(response.headers.get("location", ""))
        raise BadAnswer(
            f"the server answered {status}, a redirect to {where}: Cascade's API never redirects "
            "(is CASCADE_URL right: http or https, no path?)"
        )
    detail = error_detail(response.content if content is None else content)
    if status == 401:
        raise BadToken(
            f"the server at {url} refused the token (401): {detail or 'wrong token'}; check CASCADE_TOKEN"
        )
    if status == 404:
        raise NotFound(detail or f"not found: {response.request.url.path}")
    if status == 409:
        raise NotReady(detail or "the trace is not ready")
    raise CascadeError(f"the server answered {status}: {detail or response.reason_phrase}")


def error_detail(content: bytes) -> str:
    """An error body's one sentence: its JSON `detail`, else its text's first 200 characters."""
    try:
        detail = json.loads(content).get("detail") or ""
    except (ValueError, RecursionError, AttributeError):
        return content.decode("utf-8", "replace").strip()[:200]
    return detail if isinstance(detail, str) else str(detail)[:200]


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """Text lines (with their endings, as csv wants them) from byte chunks."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode() + "\n"
    if pending:
        yield pending.decode()
