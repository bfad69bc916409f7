"""The Traces API: `GET /api/traces`, `GET /api/traces/{trace_id}`, a trace's analysis:
`GET /api/traces/{trace_id}/summary`, `GET /api/traces/{a}/compare/{b}` and
`GET /api/traces/{trace_id}/selection` (representative kernels); a trace's downloads:
`GET /api/traces/{trace_id}/files` (presigned URLs) and `.../kernels.csv`; a run pushed with a
`write` token: `POST /api/traces/{trace_id}/upload` and `.../complete`. A trace's simulations
are the simulations app's (`simulations/views.py`).

Each view is thin: the reads are in selectors, analysis and selection, the bytes in encoders.
"""

from django.http import HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, ParseError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from traces import analysis, audit, body_cache, detail_bodies, encoders, http, selectors
from traces.browsable import BrowsableAPIRenderer
from traces.detail_bodies import STREAM_KERNELS_ABOVE
from traces.files import trace_files
from traces.filters import (
    InvalidFilter,
    TraceFilter,
    encode_cursor,
    filters_key,
    shown,
    trace_filters,
    trace_list_page,
)
from traces.models import AuditAction, Trace, TraceState
from traces.openapi_traces import (
    compare_schema,
    files_schema,
    kernels_csv_schema,
    list_schema,
    push_complete_schema,
    push_schema,
    retrieve_schema,
    selection_schema,
    summary_schema,
)
from traces.permissions import CanPushTraces, CanViewTraces
from traces.selection import (
    SelectionError,
    encode_selection,
    group_dict,
    head_dict,
    parse_by,
    parse_cover,
    parse_members,
    select,
)
from traces.serializers import PushCompleteRequestSerializer, PushRequestSerializer
from traces.snapshots import snapshot
from traces.storable_text import is_storable
from traces.uploads import multipart_items, refusals, trace_push, trace_push_complete, validated

# The browsable API renders HTML per kernel: a million would hang the browser.
BROWSABLE_KERNELS_MAX = 1000
# A trace's page in the browsable API shows its kernels this many at a time (`?kernels_page=`):
# 700 kernels made a page 16,000 px tall. The JSON detail is always whole.
BROWSABLE_KERNELS_PAGE = 50
UPDATED_AT_COLUMN = selectors.TRACE_DETAIL_COLUMNS.index("updated_at")


def kernels_page_number(text: str) -> int:
    """`?kernels_page=` of the browsable detail: a whole number from 1, read before any query."""
    if not (text.isascii() and text.isdigit() and len(text) <= 9 and int(text) >= 1):
        raise ParseError(f"kernels_page must be a whole number from 1, not {shown(text[:40])}")
    return int(text)


class TraceNotReady(APIException):
    """409: the trace exists but has no parsed kernels to add up (yet, or any more)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "not_ready"


class OperatorDescribed:
    """The browsable API's description of a viewset: its `operator_description`, not the
    docstring written for the code's readers."""

    operator_description = ""

    def get_view_description(self, html=False):
        if not html:
            return self.operator_description
        return format_html("<p>{}</p>", self.operator_description)


def json_or_browsable(request, value):
    """A small answer: JSON bytes for a JSON client, the browsable API's page for a person."""
    if isinstance(request.accepted_renderer, JSONRenderer):
        return HttpResponse(encoders.encode_json(value), content_type="application/json")
    return Response(value)


class TraceViewSet(OperatorDescribed, viewsets.ViewSet):
    """Traces as the API reference documents them.

    Rows come from `traces.selectors`; JSON clients get them as bytes encoded by
    `traces.encoders` (no serializer per row), the browsable API as the same dicts through
    DRF's renderer.
    """

    # The browsable pages write a kernel a line (traces.browsable); JSON clients are unchanged.
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]
    # What operators read on the browsable API's pages (and OPTIONS): the docstring above is
    # for developers.
    operator_description = (
        "Traces registered from the S3 bucket. JSON clients: Authorization: Bearer <token>; "
        "?format=json for the raw JSON."
    )

    permission_classes = [CanViewTraces]
    # Read by the OpenAPI schema (drf-spectacular's django-filter extension) for the list's
    # parameters; `list` validates with the same TraceFilter (`trace_filters`) for the
    # reference's 400 body, and reads through `selectors`, never this queryset.
    queryset = Trace.objects.none()
    filter_backends = [DjangoFilterBackend]
    filterset_class = TraceFilter

    # Trace ids are S3 folder names: dots, `+`, `@` and `=` included.
    lookup_value_regex = "[^/]+"
    lookup_url_kwarg = "trace_id"

    def wants_json(self, request) -> bool:
        return isinstance(request.accepted_renderer, JSONRenderer)

    @list_schema
    def list(self, request):
        # ?state=ready&sample=false&limit=100...: a value that cannot be read is a 400, before any query.
        params = request.query_params
        filters, page = trace_filters(params), trace_list_page(params)
        if not self.wants_json(request):
            version, rows = selectors.trace_summary_rows(filters, page)
            rows = list(rows)
            # For a person: each trace with a link to its detail (the JSON list has none).
            listed = [encoders.list_row_to_dict(row) for row in rows]
            linked = [
                {"url": request.build_absolute_uri(reverse("trace-detail", args=[trace["id"]])), **trace}
                for trace in listed
            ]
            return with_next_link(Response(linked), request, version, rows)
        coding = http.choose_coding(request.META.get("HTTP_ACCEPT_ENCODING"))
        keys = (filters_key(filters), page.key())
        if conditional := request.META.get("HTTP_IF_NONE_MATCH"):
            # One query that reads no row of the list: a 304 costs the same at any size.
            version = selectors.trace_list_version(filters, page)
            digest = http.list_digest(*keys, version)
            if http.if_none_match_hits(conditional, digest):
                return http.not_modified(digest, http.list_coding(coding, version.count))
        version, rows = selectors.trace_summary_rows(filters, page)
        digest, coding = http.list_digest(*keys, version), http.list_coding(coding, version.count)
        if version.more:  # a page: the Link names its last row, so it is read before sending
            rows = list(rows)
        body = encoders.encode_summary_chunks(rows)
        if version.count > selectors.LIST_FETCH_ROWS:
            response = http.streaming_json_response(body, digest=digest, coding=coding)
        else:
            response = http.json_response(b"".join(body), digest=digest, coding=coding)
        return with_next_link(response, request, version, rows)

    @retrieve_schema
    def retrieve(self, request, trace_id=None):
        if not is_storable(trace_id):
            raise NotFound(f"trace {trace_id} not found")
        if not self.wants_json(request):
            number = kernels_page_number(request.query_params.get("kernels_page", "1"))
            row, rows = selectors.trace_detail_snapshot(
                trace_id, BROWSABLE_KERNELS_PAGE, (number - 1) * BROWSABLE_KERNELS_PAGE
            )
            if row is None:
                raise NotFound(f"trace {trace_id} not found")
            head = encoders.trace_detail_head(row, raw_metadata=False)
            return Response(self.browsable_detail(request, head, rows, number))
        coding = http.choose_coding(request.META.get("HTTP_ACCEPT_ENCODING"))
        conditional = request.META.get("HTTP_IF_NONE_MATCH")
        # One query on the trace table: a 304, a HEAD or a written body reads no kernel.
        current = detail_bodies.current_body(trace_id, coding)
        if current is None:
            body_cache.forget(trace_id)
            raise NotFound(f"trace {trace_id} not found")
        digest = http.trace_digest(trace_id, current.updated_at)
        if http.if_none_match_hits(conditional, digest):
            return http.not_modified(digest, coding)
        if request.method == "HEAD":
            return http.head_response(digest, coding)
        if current.body_id is not None:
            body_id = current.body_id
            return http.written_json_response(
                lambda start, stop: detail_bodies.read_body(body_id, start, stop),
                current.size,
                digest=digest,
                coding=coding,
                range_header=request.META.get("HTTP_RANGE"),
                if_range=request.META.get("HTTP_IF_RANGE"),
            )
        # Not written yet (or not a large ready trace): a compressed answer kept on this node's
        # disk, else computed as it is sent (a stat first: no folder, no file).
        if coding != http.IDENTITY and body_cache.has_bodies(trace_id):
            if body := body_cache.open_body(trace_id, digest, coding):
                return http.file_json_response(body, digest=digest, coding=coding)
        row, rows = selectors.trace_detail_snapshot(trace_id)
        if row is None:
            raise NotFound(f"trace {trace_id} not found")
        # The ETag of the row the kernels were read with (one snapshot), whatever changed since.
        digest = http.trace_digest(trace_id, row[UPDATED_AT_COLUMN])
        head = encoders.trace_detail_head(row)
        body = encoders.encode_trace_detail(head, rows)
        if head["state"] in selectors.SERVES_KERNELS and head["kernel_count"] > STREAM_KERNELS_ABOVE:
            keep = None
            if head["state"] == TraceState.READY and body_cache.enabled():
                # A parsed trace's large detail is kept as encoded, for the next client.
                def keep(chunks):
                    return body_cache.tee(chunks, trace_id, digest, coding)

            return http.streaming_json_response(body, digest=digest, coding=coding, keep=keep)
        # A detail is compressed whatever its size, so that its coding (and its ETag, in a 304
        # or a HEAD) follows from Accept-Encoding alone.
        return http.json_response(b"".join(body), digest=digest, coding=coding)

    def browsable_detail(self, request, head: dict, rows, number: int) -> dict:
        """The detail for a person in a browser: a page of its kernels, links to the others,
        and how to get them all."""
        kernels = [encoders.kernel_row_to_dict(row) for row in rows]
        count = head["kernel_count"] if head["state"] in selectors.SERVES_KERNELS else 0
        pages = max(1, -(-count // BROWSABLE_KERNELS_PAGE))
        before, after = encoders.detail_head_and_tail(head)
        detail = {**before}
        if count > BROWSABLE_KERNELS_PAGE:
            first = (number - 1) * BROWSABLE_KERNELS_PAGE + 1

            def page_url(page: int) -> str:
                return request.build_absolute_uri(f"{request.path}?{urlencode({'kernels_page': page})}")

            detail["kernels_shown"] = (
                f"kernels {first:,}-{first + len(kernels) - 1:,} of {count:,} (page {number} of {pages}); "
                "?format=json (or an Accept: application/json client) returns them all"
                if kernels
                else f"no kernels on page {number}: the trace has {pages} pages of {BROWSABLE_KERNELS_PAGE}"
            )
            detail["kernels_pages"] = {
                "first": page_url(1),
                "previous": page_url(number - 1) if 1 < number <= pages else None,
                "next": page_url(number + 1) if number < pages else None,
                "last": page_url(pages),
            }
        detail["kernels"] = kernels
        return {**detail, **after}

    def ready_traces(self, trace_ids: tuple[str, ...]) -> None:
        """404 naming the first trace that does not exist, 409 for one that is not ready."""
        states = analysis.trace_states([trace_id for trace_id in trace_ids if is_storable(trace_id)])
        for trace_id in trace_ids:
            if trace_id not in states:
                raise NotFound(f"trace {trace_id} not found")
        for trace_id in trace_ids:
            if states[trace_id] != TraceState.READY:
                raise TraceNotReady(f"trace {trace_id} is {states[trace_id]}")

    @summary_schema
    @action(detail=True, methods=["get"], url_path="summary")
    def summary(self, request, trace_id=None):
        # One snapshot: the state checked and the sums read agree even while a parse commits.
        with snapshot(one_trace=True):
            self.ready_traces((trace_id,))
            result = analysis.summary(trace_id)
        return json_or_browsable(request, encoders.summary_dict(result))

    @compare_schema
    @action(detail=True, methods=["get"], url_path="compare/(?P<other_id>[^/]+)")
    def compare(self, request, trace_id=None, other_id=None):
        by = request.query_params.get("by", analysis.BY_NAME)
        if by not in analysis.COMPARE_BY:
            raise ParseError(f"by must be one of {', '.join(analysis.COMPARE_BY)}, not {shown(by)}")
        with snapshot(one_trace=True):
            self.ready_traces((trace_id, other_id))
            result = analysis.compare(trace_id, other_id, by)
        return json_or_browsable(request, encoders.comparison_dict(result))

    @selection_schema
    @action(detail=True, methods=["get"], url_path="selection")
    def selection(self, request, trace_id=None):
        params = request.query_params
        try:
            by, step = parse_by(params.get("by"), params.get("step"))
            cover, members = parse_cover(params.get("cover")), parse_members(params.get("members"))
            browsable = not self.wants_json(request)
            result = select(
                trace_id,
                by=by,
                step=step,
                cover=cover,
                # A browser is shown the groups alone: a million members would hang it.
                members=members and not browsable,
                check=lambda: self.ready_traces((trace_id,)),
            )
        except SelectionError as error:
            raise InvalidFilter(str(error)) from None
        if browsable:
            return Response({**head_dict(result), "groups": [group_dict(g) for g in result.groups]})
        coding = http.choose_coding(request.META.get("HTTP_ACCEPT_ENCODING"))
        stream = members and result.launches > STREAM_KERNELS_ABOVE
        return http.unversioned_json_response(encode_selection(result), coding, stream=stream)


def with_next_link(response, request, version: selectors.ListVersion, rows):
    """`Link: <this URL, after its last row>; rel="next"` when rows follow a page (GitHub's
    convention): every other parameter, filters and limit included, as the client sent it."""
    if version.more:
        last = rows[-1]
        params = request.query_params.copy()
        params["after"] = encode_cursor(last[selectors.CREATED_AT_COLUMN], last[0])
        response["Link"] = f'<{request.build_absolute_uri(request.path)}?{params.urlencode()}>; rel="next"'
    return response


# --- a trace's downloads: its files (presigned), its launches as CSV ---------------------------


class JsonErrorsOnly(BaseContentNegotiation):
    """kernels.csv is CSV whatever Accept asks for (a browser's, pandas'); its errors are JSON,
    as every error of the API."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class TraceDownloadsViewSet(OperatorDescribed, viewsets.ViewSet):
    """What a client downloads of a trace: its run's files from the bucket, through presigned
    URLs (`traces.files`; no byte of them passes through Cascade), and its launches as CSV for
    pandas (streamed and compressed as the detail's JSON, with the same ETag rules)."""

    operator_description = TraceViewSet.operator_description
    permission_classes = [CanViewTraces]
    lookup_value_regex = TraceViewSet.lookup_value_regex
    lookup_url_kwarg = TraceViewSet.lookup_url_kwarg

    @files_schema
    @action(detail=True, methods=["get"], url_path="files")
    def files(self, request, trace_id=None):
        answer = trace_files(trace_id) if is_storable(trace_id) else None
        if answer is None:
            raise NotFound(f"trace {trace_id} not found")
        if isinstance(request.accepted_renderer, JSONRenderer):
            return HttpResponse(encoders.encode_json(answer), content_type="application/json")
        return Response(answer)

    @kernels_csv_schema
    @action(
        detail=True,
        methods=["get"],
        url_path=r"kernels\.csv",
        url_name="kernels-csv",
        renderer_classes=[JSONRenderer],
        content_negotiation_class=JsonErrorsOnly,
    )
    def kernels_csv(self, request, trace_id=None):
        if not is_storable(trace_id):
            raise NotFound(f"trace {trace_id} not found")
        filename = f"{trace_id}.csv"
        raw = request.query_params.get("raw", "0")
        if raw not in ("0", "1"):
            raise ParseError(f"raw must be 0 or 1, not {shown(raw)}")
        raw = raw == "1"
        coding = http.choose_coding(request.META.get("HTTP_ACCEPT_ENCODING"))
        conditional = request.META.get("HTTP_IF_NONE_MATCH")
        if conditional or request.method == "HEAD":
            # As the detail: one query on the trace table, no kernel read.
            updated_at = http.trace_updated_at(trace_id)
            if updated_at is None:
                raise NotFound(f"trace {trace_id} not found")
            digest = http.kernels_csv_digest(trace_id, updated_at, raw=raw)
            if http.if_none_match_hits(conditional, digest):
                return http.not_modified(digest, coding)
            if request.method == "HEAD":
                return http.csv_head_response(digest, coding, filename)
        row, rows = selectors.trace_detail_snapshot(trace_id)
        if row is None:
            raise NotFound(f"trace {trace_id} not found")
        digest = http.kernels_csv_digest(trace_id, row[UPDATED_AT_COLUMN], raw=raw)
        return http.streaming_csv_response(
            encoders.encode_kernels_csv(rows, raw=raw), digest=digest, coding=coding, filename=filename
        )


class TracePushViewSet(OperatorDescribed, viewsets.ViewSet):
    """A run pushed by a script (`cascade push`) with a `write` token: where to PUT its files
    (presigned, into the run's folder; no byte passes through Cascade), then the completion,
    which answers metadata.json's PUT once the rest landed (`traces.uploads`, ingestion's)."""

    operator_description = (
        "A run's push: presigned PUT URLs for its files, then metadata.json's. Needs a write token "
        "(manage.py create_token NAME --scope write)."
    )
    permission_classes = [CanPushTraces]
    lookup_value_regex = TraceViewSet.lookup_value_regex
    lookup_url_kwarg = TraceViewSet.lookup_url_kwarg

    @push_schema
    @action(detail=True, methods=["post"], url_path="upload", url_name="push-upload")
    def upload(self, request, trace_id=None):
        files = [dict(item) for item in validated(PushRequestSerializer, request)["files"]]
        with refusals():
            answer = trace_push(trace_id, files, request.user)
        audit.record(AuditAction.PUSH, request=request, trace_id=trace_id, detail={"files": len(files)})
        return Response(answer)

    @push_complete_schema
    @action(detail=True, methods=["post"], url_path="complete", url_name="push-complete")
    def complete(self, request, trace_id=None):
        body = validated(PushCompleteRequestSerializer, request)
        files = [dict(item) for item in body["files"]]
        with refusals():
            answer = trace_push_complete(trace_id, files, multipart_items(body), request.user)
        audit.record(AuditAction.PUSH, request=request, trace_id=trace_id, detail={"completed": len(files)})
        return Response(answer)
