"""The OpenAPI description of the Traces API: what drf-spectacular cannot read from the code.

The shapes are `traces.serializers` (built from `traces.shapes`) and the list's filters the
viewset's `filterset_class`; each route's prose and parameters are `traces.openapi_traces`' and
`traces.openapi_simulations`'; written here are the pieces they share (the headers of caching,
compression and the Bearer challenge, the errors), the hooks and the schema's cache. `finish_schema` then forbids keys
the reference does not list, so that validating a real response against the schema catches a
key added by mistake.

The schema (`/api/schema`) and Swagger UI (`/api/docs`) are public: they describe routes and
shapes, as the published reference does, and hold no data. Calling the routes from Swagger
UI still takes a token ("Authorize"). Only the Bearer scheme is described: operators' admin
sessions also work on these URLs, for the browsable API's HTML, which is not the contract.
"""

import threading

from django import forms
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils import translation
from django.utils.html import format_html
from drf_spectacular.contrib.django_filters import DjangoFilterExtension
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from traces import http
from traces.api_examples import LIST_EXAMPLE
from traces.serializers import ErrorSerializer


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "traces.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "`Authorization: Bearer <token>`; an operator issues tokens with "
                "`python manage.py create_token NAME` (the token is the last line it prints); "
                "uploading a simulation needs one issued with `--scope write`."
            ),
        }


# Text filters refuse NUL, as Django's CharField does (no S3 key or PostgreSQL text holds one).
NO_NUL = "^[^\\u0000]*$"


class TraceFilterParameters(DjangoFilterExtension):
    """The list's query parameters from the viewset's `filterset_class`, with what
    drf-spectacular cannot see there: the description is the filter's help_text as written
    (no list of choices appended), a text filter's value has no NUL (else a 400), and an
    empty value (`?state=`, as a blank form field sends) narrows nothing."""

    priority = 1

    def resolve_filter_field(self, auto_schema, model, filterset_class, field_name, filter_field):
        parameters = super().resolve_filter_field(
            auto_schema, model, filterset_class, field_name, filter_field
        )
        for parameter in parameters:
            parameter["description"] = filter_field.extra["help_text"]
            if issubclass(filter_field.field_class, forms.CharField):
                parameter["schema"]["pattern"] = NO_NUL
            parameter["allowEmptyValue"] = True
        return parameters


def error_response(description: str, example: str) -> OpenApiResponse:
    return OpenApiResponse(
        ErrorSerializer,
        description=description,
        examples=[OpenApiExample("Error", value={"detail": example}, response_only=True)],
    )


UNAUTHORIZED = error_response(
    "The Authorization header is missing, is not Bearer <token>, or the token is wrong "
    "(with WWW-Authenticate: Bearer).",
    "Authentication credentials were not provided.",
)
# DRF's 401 names the scheme to use, as the reference says.
CHALLENGE = OpenApiParameter(
    "WWW-Authenticate",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    response=[401],
    enum=["Bearer"],
    required=True,
    description="Always `Bearer`.",
)
THROTTLED = error_response(
    "The token made more requests than its rate allows (CASCADE_API_RATE or the token's own), or "
    "the client's address more without valid credentials than CASCADE_ANON_RATE.",
    "Request was throttled. Expected available in 1 second.",
)

# --- caching and compression (traces.http) -------------------------------------------------------

CACHING_PARAMETERS = [
    OpenApiParameter(
        "If-None-Match",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        description=(
            "ETags of copies the client holds (a list, `W/` prefixes and `*` accepted): when one "
            "is the current representation's, in any content coding, the answer is a 304 "
            "without a body (a detail's kernels are then not even read)."
        ),
    ),
    OpenApiParameter(
        "Accept-Encoding",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        description=(
            "`zstd` and `gzip` are served (zstd when both are accepted with the same q; q=0 "
            "refuses a coding; without the header, none). Large details are compressed chunk "
            f"by chunk as they stream; a list only of more than {http.COMPRESS_TRACES_ABOVE} traces."
        ),
    ),
    OpenApiParameter(
        "ETag",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200, 304],
        description=(
            'Strong, one per content coding (`"<digest>"`, `"<digest>-gzip"`, '
            '`"<digest>-zstd"`). It changes when the answer\'s content does: for a detail, '
            "whenever the trace row changes (every change of a trace or its kernels updates its "
            "`updated_at`); for a list, whenever its JSON does (a trace added, changed, deleted or "
            "filtered in or out)."
        ),
    ),
    OpenApiParameter(
        "Cache-Control",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200, 304],
        enum=[http.CACHE_CONTROL],
        description="Keep it for this client only, and ask again (If-None-Match) before using it.",
    ),
    OpenApiParameter(
        "Content-Encoding",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200],
        enum=list(http.CODINGS),
        description="The coding Accept-Encoding chose; absent when the body is plain JSON.",
    ),
    OpenApiParameter(
        "Vary",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200, 304],
        description="`Accept, Accept-Encoding`: JSON or the browsable API's HTML, plain or compressed.",
    ),
]
NOT_MODIFIED = OpenApiResponse(
    description=(
        "If-None-Match names the current representation: no body; ETag, Cache-Control and Vary "
        "as the 200 would carry them."
    )
)


def trace_parameter(name: str, description: str, example: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.STR,
        OpenApiParameter.PATH,
        description=description,
        examples=[OpenApiExample(example, value=example)],
    )


TRACE_ID = trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo")
NO_SUCH_TRACE = error_response("No trace has this id.", "trace nope not found")


def trace_responses(ok, others: dict | None = None) -> dict:
    """A route under a trace's answers: `ok` (200), the 401, 404 and 429 every such route has,
    and its `others`, by status."""
    answers = {200: ok, 401: UNAUTHORIZED, 404: NO_SUCH_TRACE, 429: THROTTLED, **(others or {})}
    return dict(sorted(answers.items()))


# --- hooks (SPECTACULAR_SETTINGS) ----------------------------------------------------------


def paths_without_slash(endpoints):
    """Preprocessing hook: `/api/traces`, as the reference writes it (the router's `/?` takes both)."""
    return [(path.rstrip("/"), regex, method, callback) for path, regex, method, callback in endpoints]


# A list's example in the schema, by its path: the traces' here, other apps' added by their own
# openapi modules (`simulations.openapi`), which the routes load before any schema is built.
LIST_EXAMPLES = {"/api/traces": ("TracesInEachState", LIST_EXAMPLE, "Traces in each state")}


def finish_schema(result, generator, request, public):
    """Postprocessing hook: the documented objects have exactly the documented keys, and the
    lists' examples are set (the traces list's is the reference's)."""
    schemas = result.get("components", {}).get("schemas", {})
    for schema in schemas.values():
        if schema.get("type") == "object":
            schema["additionalProperties"] = False
    for path, (name, value, summary) in LIST_EXAMPLES.items():
        listing = result.get("paths", {}).get(path, {}).get("get")
        if listing is not None:
            listing["responses"]["200"]["content"]["application/json"]["examples"] = {
                name: {"value": value, "summary": summary}
            }
    return result


# --- the schema, built once per process ---------------------------------------------------------

_schemas: dict[tuple, dict] = {}
_schemas_lock = threading.Lock()


def api_schema(version: str | None = None) -> dict:
    """The OpenAPI schema, generated once per process (and API version, and language): it
    depends on the code alone, and a build costs 60-80 ms of CPU that every `/api/schema`
    request paid. Built without a request: it names no host."""
    key = (version, translation.get_language())
    with _schemas_lock:  # one build, not one per thread that asks at start-up
        if key not in _schemas:
            _schemas[key] = SchemaGenerator(api_version=version).get_schema(request=None, public=True)
        return _schemas[key]


@receiver(setting_changed)
def forget_schemas(**kwargs) -> None:
    """A test that changes a setting gets the schema those settings give."""
    with _schemas_lock:
        _schemas.clear()


class CachedSchemaGenerator(SchemaGenerator):
    """The generator `/api/schema` is given (drf-spectacular's `generator_class`): it answers
    with the schema `api_schema` keeps, for the version the view asked for."""

    def get_schema(self, request=None, public=False):
        return api_schema(self.api_version)


class CachedSchemaView(SpectacularAPIView):
    """`/api/schema`: drf-spectacular's view (its version, language and file name), answering
    the schema `api_schema` keeps."""

    generator_class = CachedSchemaGenerator


def api_paths() -> list[str]:
    """Every route the schema describes, sorted: `/api/traces`, `/api/traces/{trace_id}`, ..."""
    return sorted(api_schema()["paths"])


TRACE_ROUTE = "/api/traces/{trace_id}"


def routes_under_a_trace() -> list[str]:
    """What follows `/api/traces/{trace_id}` in its routes: `/compare/{other_id}`, `/files`, ..."""
    return [path.removeprefix(TRACE_ROUTE) for path in api_paths() if path.startswith(TRACE_ROUTE + "/")]


class ApiIndexView(APIView):
    """`/api/`: the routes, each with its methods, summary and a link (the browsable API renders
    the links). Public, as the schema: it holds no data."""

    permission_classes = [AllowAny]

    def get_view_name(self):
        return "Cascade API"

    def get_view_description(self, html=False):
        text = "The routes of the API; Authorization: Bearer <token> for each (not for this index)."
        return format_html("<p>{}</p>", text) if html else text

    @extend_schema(exclude=True)  # not a route of the reference: the index of those that are
    def get(self, request):
        paths = api_schema()["paths"]
        origin = request.build_absolute_uri("/").removesuffix("/")
        routes = [
            {
                "path": path,
                # `{trace_id}` left as written (not %7B...%7D): a template to fill in.
                "url": origin + path,
                "methods": [method.upper() for method in item if method in HTTP_METHODS],
                "summary": next((item[m].get("summary", "") for m in item if m in HTTP_METHODS), ""),
            }
            for path, item in sorted(paths.items())
        ]
        return Response(
            {
                "routes": routes,
                "schema": origin + "/api/schema",
                "docs": origin + "/api/docs",
            }
        )


HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head")
