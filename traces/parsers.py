"""Request bodies under /api/, read within bounds: at most DATA_UPLOAD_MAX_MEMORY_SIZE bytes (past
it a 413) and MAX_DEPTH levels deep, every way a body is not JSON a 400 in one sentence.

DRF's JSONParser reads a body of any size and lets a RecursionError (a 2 KB body of 1,000
nested `[`) escape as a 500; a body here is a request of a few keys (an upload's file list is
its deepest: three levels).
"""

import json

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser

MAX_DEPTH = 32


class BodyTooLarge(APIException):
    """A body past what a route reads: a 413, as a Content-Length past it is before any read."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"


class BoundedJSONParser(BaseParser):
    """The API's JSON bodies: bounded in size and depth; NaN and Infinity refused. Not a
    JSONParser subclass: DRF hands those `request.body`, which Django refuses past its limit
    with an HTML 400; this one reads the request's stream itself, up to the limit."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise BodyTooLarge(f"the request body is more than {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = json.loads(raw.decode(encoding), parse_constant=_refuse_constant)
        except RecursionError:
            raise ParseError(_too_deep()) from None
        except UnicodeDecodeError:
            raise ParseError(f"the request body is not {encoding} text") from None
        except ValueError as error:  # JSONDecodeError, an integer of too many digits, a constant
            raise ParseError(f"the request body is not valid JSON: {error}") from None
        if nesting_depth(data) > MAX_DEPTH:
            raise ParseError(_too_deep())
        return data


def _too_deep() -> str:
    return f"the request body is nested more than {MAX_DEPTH} levels deep"


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def nesting_depth(value) -> int:
    """How many arrays and objects deep `value` goes, without recursion."""
    deepest = 0
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest
