"""Two small proxies that break things on purpose, for the fault suite.

`S3FaultProxy` stands between Cascade and moto's S3 server and answers each request as the
test's script says: an S3 `500 InternalError`, a `503 SlowDown`, a connection reset in the
middle of the response body, a stall (nothing sent for N seconds), or the real answer.
`PostgresFaultProxy` stands between a Django process and PostgreSQL and drops connections:
in the middle of a COPY, or all of them at once (a restart, a failover).

Both listen on 127.0.0.1 only, on a free port, serve at most MAX_CONNECTIONS connections at a
time, give every socket an I/O timeout, and stop by themselves after LIFETIME seconds even if
a test forgets them; `with` stops them at once. Plain sockets and threads: what breaks is
the bytes on the wire, so there is no HTTP or PostgreSQL library in between.
"""

import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

LIFETIME = 300.0  # seconds; the whole fault suite takes less
IO_TIMEOUT = 30.0
MAX_CONNECTIONS = 64
MAX_HEAD_BYTES = 64 * 1024


def reset(sock: socket.socket) -> None:
    """Close with a TCP RST instead of a FIN, as a crashed peer or a middlebox does.

    SHUT_RD first: it wakes a thread blocked reading the socket (close alone would not, and
    the socket would live on until that read returned) and sends nothing to the peer.
    """
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    sock.close()


class _Server:
    """The accept loop both proxies share: a daemon thread per connection, all of them bounded."""

    def __init__(self, *, lifetime: float = LIFETIME):
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._deadline = time.monotonic() + lifetime
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept_loop, name=type(self).__name__, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        self._close_all()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _accept_loop(self) -> None:
        try:
            while not self._stopping.is_set() and time.monotonic() < self._deadline:
                try:
                    client, _ = self._listener.accept()
                except TimeoutError:
                    continue
                if not self._slots.acquire(timeout=IO_TIMEOUT):
                    client.close()
                    continue
                client.settimeout(IO_TIMEOUT)
                self._track(client)
                threading.Thread(target=self._serve_and_release, args=(client,), daemon=True).start()
        finally:
            self._listener.close()
            self._close_all()

    def _serve_and_release(self, client: socket.socket) -> None:
        try:
            self.serve(client)
        except OSError:
            pass  # a peer went away: what a proxy for faults expects
        finally:
            self._untrack(client)
            client.close()
            self._slots.release()

    def serve(self, client: socket.socket) -> None:
        raise NotImplementedError

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)

    def _close_all(self) -> None:
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
        for sock in sockets:
            reset(sock)

    def _wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, less if the proxy is stopping; True if it is."""
        return self._stopping.wait(min(seconds, max(0.0, self._deadline - time.monotonic())))


# --- S3 over HTTP ------------------------------------------------------------------------------

S3_ERRORS = {
    "500": (
        "500 Internal Server Error",
        "InternalError",
        "We encountered an internal error. Please try again.",
    ),
    "slowdown": ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
    "403": ("403 Forbidden", "AccessDenied", "Access Denied"),
}


@dataclass
class Fault:
    """What to do, instead of answering, with the next `times` requests that `match`.

    `match` is a regular expression searched in `"METHOD target"`, e.g. `GET /bucket/...stats_ctx`
    or `list-type=2` for a listing. Kinds: "500", "slowdown" and "403" (S3's XML error bodies),
    "reset" (the answer's head and half its body, then `pause` seconds of silence, then a
    TCP RST), "stall" (`seconds` of silence after the request; then the connection is
    closed without an answer, or with `then="forward"` the real answer comes late).
    """

    kind: str
    match: str
    times: int = 1
    seconds: float = 0.0
    pause: float = 0.2
    then: str = "close"
    fired: int = 0

    def __post_init__(self):
        if self.kind not in (*S3_ERRORS, "reset", "stall"):
            raise ValueError(f"unknown fault {self.kind!r}")
        if self.then not in ("close", "forward"):
            raise ValueError(f"a stall ends with 'close' or 'forward', not {self.then!r}")


def internal_error(match: str, times: int = 1) -> Fault:
    return Fault("500", match, times)


def slow_down(match: str, times: int = 1) -> Fault:
    return Fault("slowdown", match, times)


def access_denied(match: str, times: int = 1) -> Fault:
    return Fault("403", match, times)


def reset_mid_body(match: str, times: int = 1, *, pause: float = 0.2) -> Fault:
    return Fault("reset", match, times, pause=pause)


def stall(match: str, seconds: float, times: int = 1, *, then: str = "close") -> Fault:
    return Fault("stall", match, times, seconds=seconds, then=then)


@dataclass
class Request:
    method: str
    target: str
    head: list[tuple[str, str]]
    body: bytes

    @property
    def line(self) -> str:
        return f"{self.method} {self.target}"


@dataclass
class Exchange:
    """One request as the proxy saw it, and what it did: a fault's kind or "forwarded"."""

    request: str
    outcome: str
    status: int | None = None


class S3FaultProxy(_Server):
    """An HTTP proxy in front of `upstream` (moto's server) that injects the faults of `script()`.

    One request per client connection (answers say `Connection: close`): botocore opens the
    next connection itself, and each fault concerns one request only. Requests are matched
    against the script in order; a fault that has fired `times` times is used up.
    """

    def __init__(self, upstream: str, **kwargs):
        super().__init__(**kwargs)
        match = re.fullmatch(r"http://(127\.0\.0\.1|localhost):(\d+)/?", upstream)
        if match is None:
            raise ValueError(f"the upstream must be http://127.0.0.1:<port>, not {upstream!r}")
        self.upstream = ("127.0.0.1", int(match.group(2)))
        self.url = f"http://127.0.0.1:{self.port}"
        self.exchanges: list[Exchange] = []
        self._faults: list[Fault] = []

    def script(self, *faults: Fault) -> list[Fault]:
        """Replace the script; returns the faults, whose `fired` counts the test may read."""
        with self._lock:
            self._faults = list(faults)
        return list(faults)

    def _next_fault(self, request: Request) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.fired < fault.times and re.search(fault.match, request.line):
                    fault.fired += 1
                    return fault
        return None

    def _record(self, request: Request, outcome: str, status: int | None = None) -> None:
        with self._lock:
            self.exchanges.append(Exchange(request.line, outcome, status))

    def serve(self, client: socket.socket) -> None:
        request = read_request(client)
        if request is None:
            return
        fault = self._next_fault(request)
        if fault is None:
            status = self._forward(client, request)
            self._record(request, "forwarded", status)
            return
        self._record(request, fault.kind)
        if fault.kind in S3_ERRORS:
            client.sendall(s3_error(*S3_ERRORS[fault.kind], request.target))
        elif fault.kind == "stall":
            if self._wait(fault.seconds):
                return
            if fault.then == "forward":
                self._forward(client, request)
        elif fault.kind == "reset":
            head, body = split_response(self._upstream_response(request))
            client.sendall(head + body[: len(body) // 2])
            self._wait(fault.pause)
            self._untrack(client)
            reset(client)

    def _forward(self, client: socket.socket, request: Request) -> int | None:
        response = self._upstream_response(request)
        client.sendall(response)
        client.shutdown(socket.SHUT_WR)
        status = re.match(rb"HTTP/1\.[01] (\d{3})", response)
        return int(status.group(1)) if status else None

    def _upstream_response(self, request: Request) -> bytes:
        """The upstream's whole answer, its head rewritten to close the connection."""
        lines = [f"{request.method} {request.target} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in request.head if not hop_by_hop(name)]
        lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body
        with socket.create_connection(self.upstream, timeout=IO_TIMEOUT) as upstream:
            upstream.sendall(data)
            chunks = []
            while chunk := upstream.recv(65536):
                chunks.append(chunk)
        head, body = split_response(b"".join(chunks))
        head_lines = [
            line
            for line in head.split(b"\r\n")[:-2]
            if not hop_by_hop(line.split(b":", 1)[0].decode("latin-1"))
        ]
        return b"\r\n".join([*head_lines, b"Connection: close", b"", b""]) + body


def hop_by_hop(name: str) -> bool:
    return name.strip().lower() in {"connection", "keep-alive", "proxy-connection"}


def read_request(sock: socket.socket) -> Request | None:
    """One HTTP/1.1 request with a Content-Length body (botocore's reads send none)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > MAX_HEAD_BYTES:
            raise OSError("request head too large")
    head, _, body = data.partition(b"\r\n\r\n")
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, target, _ = request_line.split(" ", 2)
    headers = [tuple(part.strip() for part in line.split(":", 1)) for line in header_lines if ":" in line]
    names = {name.lower(): value for name, value in headers}
    if "chunked" in names.get("transfer-encoding", "").lower():
        raise OSError("chunked request bodies are not proxied: upload straight to the S3 server")
    length = int(names.get("content-length", 0))
    while len(body) < length:
        chunk = sock.recv(min(65536, length - len(body)))
        if not chunk:
            return None
        body += chunk
    return Request(method, target, headers, body[:length])


def split_response(response: bytes) -> tuple[bytes, bytes]:
    """(head with its blank line, body) of a whole HTTP response."""
    head, separator, body = response.partition(b"\r\n\r\n")
    return head + separator, body


def s3_error(status: str, code: str, message: str, resource: str) -> bytes:
    """An error exactly as S3 answers it: XML body, the request id headers botocore logs."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<Resource>{resource.split('?', 1)[0]}</Resource><RequestId>FAULTPROXY0000001</RequestId>"
        "<HostId>fault-proxy</HostId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
        "x-amz-request-id: FAULTPROXY0000001\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body


# --- PostgreSQL over TCP --------------------------------------------------------------------------

# What starts a COPY in the client's bytes: Cascade's `COPY <table> (<columns>) FROM STDIN`;
# and what ends it, the CopyDone message ('c', length 4).
COPY_STARTS = re.compile(rb"COPY [^\x00]{1,4000}? FROM STDIN", re.IGNORECASE)
COPY_DONE = b"c\x00\x00\x00\x04"
COMMIT = b"COMMIT"
COMMIT_SETTLES = 0.5  # seconds between a COMMIT reaching PostgreSQL and the connection's reset


@dataclass(eq=False)
class _Link:
    """One proxied connection: the client's socket, PostgreSQL's, and whether answers still pass."""

    client: socket.socket
    upstream: socket.socket
    muted: threading.Event = field(default_factory=threading.Event)


class PostgresFaultProxy(_Server):
    """A TCP proxy in front of PostgreSQL that drops connections when told to.

    `drop_during_copy(after_bytes, times)`: the next `times` COPYs are cut once `after_bytes`
    of data followed the COPY statement (client to server): the connection is reset on both
    sides. `drop_at_commit(times)`: the next `times` COMMITs that follow a COPY reach the server,
    which commits, but its answer never reaches the client: the connection is reset (the
    client cannot know whether its transaction committed). `drop_all()`: every open connection
    is reset now. The proxied connection must not use SSL (`sslmode=disable`): the proxy reads
    the statements.
    """

    def __init__(self, upstream: tuple[str, int] = ("127.0.0.1", 5432), **kwargs):
        super().__init__(**kwargs)
        if upstream[0] not in ("127.0.0.1", "localhost"):
            raise ValueError("the fault suite proxies only PostgreSQL on 127.0.0.1")
        self.upstream = ("127.0.0.1", upstream[1])
        self.connections = 0
        self.copies_dropped = 0
        self.commits_dropped = 0
        self.dropped = 0
        self._copy_drops_left = 0
        self._copy_after_bytes = 0
        self._commit_drops_left = 0
        self._links: list[_Link] = []

    def drop_during_copy(self, after_bytes: int, times: int = 1) -> None:
        with self._lock:
            self._copy_after_bytes, self._copy_drops_left = after_bytes, times

    def drop_at_commit(self, times: int = 1) -> None:
        with self._lock:
            self._commit_drops_left = times

    def drop_all(self) -> int:
        """Reset every connection open now (both sides); returns how many."""
        with self._lock:
            links, self._links = self._links, []
            self.dropped += len(links)
        for link in links:
            self._cut(link)
        return len(links)

    def _cut(self, link: _Link) -> None:
        with self._lock:
            if link in self._links:
                self._links.remove(link)
        reset(link.upstream)
        reset(link.client)

    def serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.upstream, timeout=IO_TIMEOUT)
        # A connection sits idle between passes for as long as a test likes: no timeout on reads.
        client.settimeout(None)
        upstream.settimeout(None)
        self._track(upstream)
        link = _Link(client, upstream)
        with self._lock:
            self.connections += 1
            self._links.append(link)
        back = threading.Thread(target=self._pump_answers, args=(link,), daemon=True)
        back.start()
        try:
            self._pump_requests(link)
        finally:
            self._cut(link)
            self._untrack(upstream)
            back.join(5)

    def _pump_answers(self, link: _Link) -> None:
        """Server to client, unless muted."""
        try:
            while chunk := link.upstream.recv(65536):
                if not link.muted.is_set():
                    link.client.sendall(chunk)
        except OSError:
            pass
        finally:
            try:
                link.client.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _pump_requests(self, link: _Link) -> None:
        """Client to server, watching for a COPY to cut short, and for the COMMIT after it."""
        copying, copied, since_copy, tail = False, False, 0, b""
        while not self._stopping.is_set():
            chunk = link.client.recv(65536)
            if not chunk:
                return
            if not copying:
                window = tail + chunk
                found = COPY_STARTS.search(window)
                tail = b"" if found else window[-4096:]
                if found:
                    copying, since_copy = True, len(window) - found.end()
            else:
                since_copy += len(chunk)
            if (
                copying
                and since_copy >= self._copy_after_bytes
                and self._take("_copy_drops_left", "copies_dropped")
            ):
                self._cut(link)
                return
            if copied and COMMIT in chunk:
                copied = False
                if self._take("_commit_drops_left", "commits_dropped"):
                    link.muted.set()
                    link.upstream.sendall(chunk)
                    self._wait(COMMIT_SETTLES)  # PostgreSQL commits and answers, to nobody
                    self._cut(link)
                    return
            link.upstream.sendall(chunk)
            if copying and COPY_DONE in chunk:
                copying, copied = False, True

    def _take(self, left: str, done: str) -> bool:
        """One more of a scripted drop, if any is left: `left` counts down, `done` up."""
        with self._lock:
            if getattr(self, left) <= 0:
                return False
            setattr(self, left, getattr(self, left) - 1)
            setattr(self, done, getattr(self, done) + 1)
            return True
