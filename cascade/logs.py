"""What operators read on stderr: every line with the request it belongs to.

Each request gets an id, the proxy's `X-Request-ID` when it sends a sane one, else a new
one. The id goes back in the response's `X-Request-ID`, into every log line written while
the request is served (a 500's traceback included) and into the 500's JSON body, so that a
user's report, the proxy's access log and our traceback meet on one string.
`CASCADE_LOG_FORMAT=json` writes one JSON object a line for log collectors.
"""

import json
import logging
import re
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime

REQUEST_ID_HEADER = "X-Request-ID"
# A proxy's id is taken as it is only when it cannot garble a log line or a header: printable
# ASCII without spaces, at most this long (a UUID is 36, an AWS trace id about 40).
REQUEST_ID_MAX = 128
_SANE_REQUEST_ID = re.compile(rf"[\x21-\x7e]{{1,{REQUEST_ID_MAX}}}")

_request_id: ContextVar[str | None] = ContextVar("cascade_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request this thread is serving; None outside a request (a poll, a task)."""
    return _request_id.get()


def request_id_from(header: str | None) -> str:
    """The proxy's id if it is sane, else a new one."""
    if header and _SANE_REQUEST_ID.fullmatch(header):
        return header
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """First in MIDDLEWARE: the id is known before anything can fail or log."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = request_id_from(request.META.get("HTTP_X_REQUEST_ID"))
        token = _request_id.set(request.request_id)
        try:
            response = self.get_response(request)
        finally:
            _request_id.reset(token)
        response[REQUEST_ID_HEADER] = request.request_id
        return response


class RequestIdFilter(logging.Filter):
    """Gives every record a `request_id` ("-" outside a request) and a `request_tag`, " [id]"
    in a request and nothing outside one: a poller's lines read as they always have."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id() or "-"
        record.request_tag = "" if record.request_id == "-" else f" [{record.request_id}]"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: timestamp, level, logger, message, request_id, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": _json_request_id(record),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def _json_request_id(record: logging.LogRecord) -> str | None:
    request_id = getattr(record, "request_id", None) or current_request_id()
    return None if request_id == "-" else request_id
