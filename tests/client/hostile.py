"""A Cascade and a bucket that lie, on 127.0.0.1: a real HTTP server (the standard library's),
for what a MockTransport cannot show: bytes on a socket the client must stop reading, a
download slow enough to press Ctrl-C in, the headers the client really sends.

Besides the run's files (`File`), any API route can be made to answer what a hostile server
would (`Answer`): other JSON, a body that never ends, a redirect; POSTs (an upload's routes)
answer only what `answers` says, and their bodies are kept in `posted`."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

CHUNK = 64 * 1024
LIMIT = 300 * 1024 * 1024  # the most any answer sends: every loop here ends


class File:
    """One file as listed (`listed` bytes, `etag`) and as served: `body` exactly ("exact"),
    `body` then more until the client hangs up ("longer", no Content-Length), a
    Content-Length of `announce` ("announce"), or `body`'s first `stall_after` bytes, then
    nothing until `released` is set ("stall": a download caught mid-body, however long the
    test takes)."""

    def __init__(
        self, body: bytes, *, mode="exact", listed=None, etag='"-"', announce=None, stall_after=CHUNK
    ):
        self.body, self.mode, self.etag, self.announce = body, mode, etag, announce
        self.stall_after = stall_after
        self.released = threading.Event()
        self.listed = len(body) if listed is None else listed
        self.sent = 0
        self.watch: Path | None = None  # a file whose size is read between chunks
        self.largest_seen = 0
        self.headers: dict[str, str] = {}


class Answer:
    """What a route answers instead of the truth: `json` (any value, with `status`), `raw`
    bytes as the body, an
    `endless` JSON-looking body (chunked, until the client hangs up or LIMIT), or a `redirect`
    to `location`. `sent` counts the bytes of the body sent."""

    def __init__(
        self,
        *,
        json=None,
        raw: bytes | None = None,
        endless: bool = False,
        redirect: str | None = None,
        status: int = 200,
    ):
        self.value, self.raw, self.endless, self.redirect, self.status = json, raw, endless, redirect, status
        self.sent = 0


class HostileServer:
    def __init__(self, trace_id: str, files: dict[str, File], answers: dict[str, Answer] | None = None):
        self.trace_id, self.files = trace_id, files
        self.answers = answers or {}  # path (no query) -> Answer
        self.posted: list[tuple[str, object]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                path = unquote(self.path.split("?")[0])
                try:
                    if path in server.answers:
                        self.answer(server.answers[path])
                    elif path == "/api/traces":
                        self.json([{"id": server.trace_id, "suggested_sim_config": None}])
                    elif path == f"/api/traces/{server.trace_id}/files":
                        self.json(server.listing())
                    elif path.startswith("/bucket/") and path[8:] in server.files:
                        self.serve(server.files[path[8:]])
                    else:
                        self.json({"detail": "Not found."}, 404)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_POST(self):
                path = unquote(self.path.split("?")[0])
                length = int(self.headers.get("Content-Length") or 0)
                server.posted.append((path, json.loads(self.rfile.read(length) or b"null")))
                try:
                    if path in server.answers:
                        self.answer(server.answers[path])
                    else:
                        self.json({"detail": "Not found."}, 404)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def answer(self, answer: Answer):
                if answer.redirect is not None:
                    self.send_response(302)
                    self.send_header("Location", answer.redirect)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif answer.endless:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    chunk = b'{"files": [' + b'{"path": "x", "bytes": 1}, ' * (CHUNK // 26)
                    while answer.sent < LIMIT:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        answer.sent += len(chunk)
                elif answer.raw is not None:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer.raw)))
                    self.end_headers()
                    self.wfile.write(answer.raw)
                else:
                    self.json(answer.value, answer.status)

            def json(self, value, status=200):
                body = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def serve(self, file: File):
                file.headers = dict(self.headers.items())
                self.send_response(200)
                if file.mode == "longer":
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(file.announce or len(file.body)))
                self.send_header("Connection", "close")
                self.end_headers()
                if file.mode == "longer":
                    chunk = (file.body * (CHUNK // max(1, len(file.body)) + 1))[:CHUNK]
                    while file.sent < LIMIT:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        file.sent += len(chunk)
                        self.look(file)
                elif file.mode == "announce":
                    while file.sent < min(file.announce, LIMIT):
                        self.wfile.write(b"\0" * CHUNK)
                        file.sent += CHUNK
                        self.look(file)
                elif file.mode == "stall":
                    self.wfile.write(file.body[: file.stall_after])
                    self.wfile.flush()
                    file.sent += file.stall_after
                    file.released.wait()
                    self.wfile.write(file.body[file.stall_after :])
                    file.sent += len(file.body) - file.stall_after
                else:
                    self.wfile.write(file.body)
                    file.sent += len(file.body)

            def look(self, file: File):
                if file.watch is not None and file.watch.exists():
                    file.largest_seen = max(file.largest_seen, file.watch.stat().st_size)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def listing(self) -> dict:
        return {
            "trace_id": self.trace_id,
            "state": "ready",
            "error": None,
            "expires_at": "2030-01-01T00:00:00Z",
            "files": [
                {
                    "path": path,
                    "key": f"accelsim-traces/{self.trace_id}/{path}",
                    "bytes": file.listed,
                    "etag": file.etag,
                    "url": f"{self.url}/bucket/{path}?X-Amz-Signature=x",
                }
                for path, file in sorted(self.files.items())
            ],
            "refused": [],
        }

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        for file in self.files.values():
            file.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()
