"""The query parameters that narrow `GET /api/traces` (and, through `simulations.filters`,
`GET /api/simulations`): django-filter FilterSets.

Every filter is optional and an absent or empty one narrows nothing. A parameter the list does
not know (`stat=ready`, a typo) is a 400 naming it and the parameters allowed, and a value a
filter cannot read is a 400 whose `detail` names the parameter and what it accepts: never a
silently unfiltered list (a script asking for `sample=yes` must not get every trace).

`created_after` is inclusive and `created_before` exclusive, so that consecutive windows
(`created_after=A&created_before=B`, then `created_after=B&...`) list each trace once.
"""

import base64
import binascii
import datetime
from dataclasses import dataclass

import django_filters
import orjson
from django import forms
from django.core.exceptions import ValidationError
from django.http import QueryDict

from traces.models import Trace, TraceState
from traces.params import BOOLEANS, InvalidFilter, check_known, integer, shown

# What each parameter accepts, in the words of a 400's detail (and of the OpenAPI schema).
ACCEPTS = {
    "state": f"one of {', '.join(TraceState.values)}",
    "model": "the model's exact name (text without NUL characters)",
    "source_gpu": "the source GPU's exact name (text without NUL characters)",
    "trace_gpu_arch": "the exact architecture, such as sm_90 (text without NUL characters)",
    "sample": "true or false (also 1 or 0)",
    "created_after": (
        "an ISO 8601 date or date-time, such as 2026-11-08 or 2026-11-08T08:59:02Z "
        "(a time without an offset is UTC; send a + offset as %2B)"
    ),
    "created_before": (
        "an ISO 8601 date or date-time, such as 2026-11-08 or 2026-11-08T08:59:02Z "
        "(a time without an offset is UTC; send a + offset as %2B)"
    ),
}


class StrictBooleanField(forms.Field):
    """true/false, 1/0 in any case: unlike NullBooleanField, anything else is an error, not None."""

    VALUES = BOOLEANS

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            return self.VALUES[str(value).strip().lower()]
        except KeyError:
            raise ValidationError("not a boolean", code="invalid") from None


class UtcDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 date-time in UTC; one too close to year 1 or 9999 to convert is an error."""

    def to_python(self, value):
        # RFC 3339 allows a lower-case t and z; Python's parser does not.
        parsed = super().to_python(value.upper() if isinstance(value, str) else value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(datetime.UTC)
        except OverflowError:
            raise ValidationError("out of range", code="invalid") from None


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class TraceFilter(django_filters.FilterSet):
    """The viewset's `filterset_class`: the OpenAPI schema's parameters are read from it, and
    each `help_text` is its parameter's description."""

    state = django_filters.ChoiceFilter(
        choices=TraceState.choices, help_text=f"{ACCEPTS['state'].capitalize()}."
    )
    model = django_filters.CharFilter(help_text=f"Exact match: {ACCEPTS['model']}.")
    source_gpu = django_filters.CharFilter(help_text=f"Exact match: {ACCEPTS['source_gpu']}.")
    trace_gpu_arch = django_filters.CharFilter(help_text=f"Exact match: {ACCEPTS['trace_gpu_arch']}.")
    sample = StrictBooleanFilter(help_text="Only the shipped samples, or none of them.")
    created_after = UtcDateTimeFilter(
        field_name="created_at",
        lookup_expr="gte",
        help_text=f"Created at or after this instant: {ACCEPTS['created_after']}.",
    )
    created_before = UtcDateTimeFilter(
        field_name="created_at",
        lookup_expr="lt",
        help_text=f"Created strictly before this instant: {ACCEPTS['created_before']}.",
    )


def trace_filters(params: QueryDict) -> TraceFilter:
    """The filters `params` asks for, validated; InvalidFilter (a 400) names every bad one.

    Validating reads nothing from the database: the list stays one query. A parameter that is
    neither a filter nor a page's (`limit`, `after`) is refused first.
    """
    check_known(params, [*TraceFilter.base_filters, *PAGE_ACCEPTS])
    filters = TraceFilter(params, queryset=Trace.objects.none())
    if not filters.is_valid():
        raise InvalidFilter(
            " ".join(
                f"{name} accepts {ACCEPTS[name]}; got {shown(params.get(name))}." for name in filters.errors
            )
        )
    return filters


# --- pages of `GET /api/traces`: ?limit= and ?after= ---------------------------------------

LIMIT_MAX = 1000
PAGE_ACCEPTS = {
    "limit": f"an integer from 1 to {LIMIT_MAX}",
    "after": "the cursor of a Link header of this list",
}
_CURSOR_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True)
class ListPage:
    """`?limit=` (None: every trace) and `?after=` (the sort key, `created_at` and `id`, of the
    last row of the previous page)."""

    limit: int | None = None
    after: tuple[datetime.datetime, str] | None = None

    def key(self) -> str:
        """What of the page its answer depends on, for its ETag."""
        if self.limit is None and self.after is None:
            return ""
        if self.after is None:
            return f"limit={self.limit}&after="
        created_at, trace_id = self.after
        return (
            f"limit={self.limit or ''}&after={encode_cursor(created_at.strftime(_CURSOR_FORMAT), trace_id)}"
        )


def encode_cursor(created_at: str, trace_id: str) -> str:
    """An opaque `after`: the row's sort key (`created_at` as the API writes it, and `id`) as
    URL-safe base64 of a JSON pair, unpadded."""
    return base64.urlsafe_b64encode(orjson.dumps([created_at, trace_id])).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> tuple[datetime.datetime, str]:
    """`encode_cursor`'s pair; ValueError for anything it did not write."""
    try:
        data = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, trace_id = orjson.loads(data)
        if not isinstance(created, str) or not isinstance(trace_id, str) or "\0" in trace_id:
            raise ValueError("not a cursor")
        moment = datetime.datetime.strptime(created, _CURSOR_FORMAT).replace(tzinfo=datetime.UTC)
    except (binascii.Error, orjson.JSONDecodeError, TypeError, ValueError):
        raise ValueError("not a cursor") from None
    return moment, trace_id


def trace_list_page(params: QueryDict) -> ListPage:
    """`limit` and `after` as `params` gives them; InvalidFilter (a 400) names each bad one, as
    a filter's. An absent or empty one is no page: the whole list."""
    repeated = [name for name in PAGE_ACCEPTS if len(params.getlist(name)) > 1]
    if repeated:  # which one would count is anyone's guess: refused, not picked
        raise InvalidFilter(" ".join(f"{name} is given more than once." for name in repeated))
    errors, limit, after = [], None, None
    try:
        limit = integer(params.get("limit"), "limit", low=1, high=LIMIT_MAX)
    except InvalidFilter:
        errors.append("limit")
    if raw := params.get("after"):
        try:
            after = decode_cursor(raw)
        except ValueError:
            errors.append("after")
    if errors:
        raise InvalidFilter(
            " ".join(
                f"{name} accepts {PAGE_ACCEPTS[name]}; got {shown(params.get(name))}." for name in errors
            )
        )
    return ListPage(limit=limit, after=after)


def filters_key(filters: TraceFilter) -> str:
    """The filters that narrow the list (empty ones and other parameters left out), for its ETag."""
    return "&".join(
        f"{name}={value.isoformat() if isinstance(value, datetime.datetime) else value}"
        for name, value in sorted(filters.form.cleaned_data.items())
        if value is not None and value != ""
    )
