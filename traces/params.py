"""Query parameters of the API, read before any arithmetic on them: the one place that turns
a parameter's text into a number, and that refuses text no route can use.

A number is bounded twice before Python computes with it: its text's length (at most
`NUMBER_CHARS`) and its form (plain decimal digits, an exponent of at most three digits), so that
`int()` and `Fraction()` build at most a thousand-digit integer: `1e-10000000` or 10,000 digits are a
400 at once, never seconds of CPU (`Fraction("1e-10000000")` builds a ten-million-digit
integer). Then its range. Every parameter's name and value refuse NUL (PostgreSQL cannot store
it) and more than `TEXT_CHARS` characters (`check_text`, for every request under /api/).

Every refusal is InvalidFilter: a 400 with `{"detail": "<name> accepts <what>; got <value>."}`,
the API reference's error body.
"""

import re
from fractions import Fraction

from django.http import JsonResponse, QueryDict
from rest_framework import status
from rest_framework.exceptions import APIException

# The longest value (and name) any parameter accepts: longer ones are typos or probes.
TEXT_CHARS = 1000
# The longest number: 20 digits of an int64 and a sign, or a decimal such as 0.000000001.
NUMBER_CHARS = 32
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Decimal digits and at most a three-digit exponent (a float's repr, 5e-324, fits): no nan, inf,
# hex, `_` or unicode digits.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")

# Parameters every route reads (DRF's renderer choice) besides its own.
COMMON = ("format",)


class InvalidFilter(APIException):
    """A 400 with `{"detail": "<sentence>"}`, as every error of the API reference."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid_filter"


def shown(value: str, limit: int = 80) -> str:
    """The value as the client sent it, quoted, and cut short: a detail is a sentence."""
    return repr(value if len(value) <= limit else value[:limit] + "...")


def text_problem(text: str) -> str | None:
    """Why no parameter accepts `text` (a name or a value), or None."""
    if "\0" in text:
        return "text without NUL characters"
    if len(text) > TEXT_CHARS:
        return f"at most {TEXT_CHARS:,} characters (got {len(text):,})"
    return None


def check_text(params: QueryDict) -> None:
    """InvalidFilter for a parameter whose name or any value holds NUL or is over-long."""
    for name, values in params.lists():
        if problem := text_problem(name):
            raise InvalidFilter(f"a parameter's name must be {problem}; got {shown(name)}.")
        for value in values:
            if problem := text_problem(value):
                raise InvalidFilter(f"{shown(name, 40)[1:-1]} accepts {problem}; got {shown(value)}.")


def check_known(params: QueryDict, allowed) -> None:
    """InvalidFilter naming the parameters `allowed` does not list (and those it does): a typo
    such as `stat=ready` must not answer an unfiltered list."""
    known = [*allowed, *COMMON]
    unknown = [name for name in params if name not in known]
    if unknown:
        names = ", ".join(shown(name, 40) for name in unknown)
        raise InvalidFilter(
            f"unknown parameter{'s' if len(unknown) > 1 else ''} {names}; this route accepts {', '.join(known)}."
        )


def single(params: QueryDict, name: str) -> str | None:
    """The parameter's one value (None when absent); InvalidFilter when given twice."""
    values = params.getlist(name)
    if len(values) > 1:  # which one would count is anyone's guess: refused, not picked
        raise InvalidFilter(f"{name} is given more than once.")
    return values[0] if values else None


def integer(value: str | None, name: str, *, low: int, high: int, default: int | None = None) -> int | None:
    """A whole number in [low, high]; `default` when absent or empty."""
    if value is None or value == "":
        return default
    text = value.strip()
    if len(text) <= NUMBER_CHARS and text.isascii() and _INTEGER.fullmatch(text):
        number = int(text)
        if low <= number <= high:
            return number
    raise InvalidFilter(f"{name} accepts an integer from {low} to {high}; got {shown(value)}.")


BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


def boolean(value: str | None, name: str, *, default: bool | None = None) -> bool | None:
    """true/false, 1/0 in any case; `default` when absent. Anything else is refused, never
    read as false: `?raw=yes` must not quietly mean no."""
    if value is None:
        return default
    flag = BOOLEANS.get(value.strip().lower()) if len(value) <= NUMBER_CHARS else None
    if flag is None:
        raise InvalidFilter(f"{name} accepts true or false (also 1 or 0); got {shown(value)}.")
    return flag


def fraction(
    value: str | None,
    name: str,
    *,
    low: Fraction,
    high: Fraction,
    low_open: bool = False,
    default: Fraction | None = None,
) -> Fraction | None:
    """An exact decimal number in [low, high] ((low, high] with `low_open`): `0.9` is 9/10."""
    if value is None:
        return default
    text = value.strip()
    if len(text) <= NUMBER_CHARS and text.isascii() and _DECIMAL.fullmatch(text):
        number = Fraction(text)  # at most NUMBER_CHARS digits and a 3-digit exponent: cheap
        if (low < number if low_open else low <= number) and number <= high:
            return number
    bound = "greater than" if low_open else "at least"
    raise InvalidFilter(f"{name} accepts a number {bound} {low} and at most {high}; got {shown(value)}.")


class QueryTextMiddleware:
    """`check_text` for every request under /api/, before any view reads a parameter: a route
    added later is covered without a line of its own (tests/traces/test_hostile_params.py)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path == "/api" or request.path.startswith("/api/"):
            try:
                check_text(request.GET)
            except InvalidFilter as error:
                return JsonResponse({"detail": str(error.detail)}, status=400)
        return self.get_response(request)
