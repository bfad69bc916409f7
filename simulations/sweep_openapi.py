"""The OpenAPI description of the sweeps' routes (each view's `extend_schema`); the shapes are
`simulations.sweep_shapes`, the requests `simulations.sweep_serializers`."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema

from simulations import sweep_shapes
from simulations.sweep_serializers import (
    SweepCreateRequestSerializer,
    SweepJobFinishRequestSerializer,
    SweepJobProgressRequestSerializer,
    SweepJobStartRequestSerializer,
)
from traces.openapi import CHALLENGE, THROTTLED, UNAUTHORIZED, error_response
from traces.serializers import serializer_for

SweepSummarySerializer = serializer_for(sweep_shapes.SWEEP_SUMMARY)
SweepDetailSerializer = serializer_for(sweep_shapes.SWEEP_DETAIL)
SweepJobSerializer = serializer_for(sweep_shapes.SWEEP_JOB)
SweepJobStartSerializer = serializer_for(sweep_shapes.SWEEP_JOB_START)
SweepJobContinueSerializer = serializer_for(sweep_shapes.SWEEP_JOB_CONTINUE)

SWEEP_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The sweep's id.")
JOB_ID = OpenApiParameter("job_id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The job's id.")
NO_SUCH_SWEEP = error_response("No sweep has this id.", "sweep 9 not found")
NO_SUCH_JOB = error_response("No sweep has this id, or it has no such job.", "job 7 of sweep 9 not found")
READ_ONLY = error_response(
    "The token's scope is read.",
    "this token's scope is read: a sweep's writes needs a write token (manage.py create_token NAME "
    "--scope write)",
)
STALE = error_response(
    "The attempt is no longer the job's: stop the simulator and drop the job.",
    "attempt 1 is no longer job 7's: the job is running attempt 2",
)
BAD_BODY = error_response("The body is not the request's shape.", "attempt: This field is required.")


def _answers(ok: dict, others: dict | None = None) -> dict:
    return dict(sorted({**ok, 401: UNAUTHORIZED, 429: THROTTLED, **(others or {})}.items()))


sweep_list_schema = extend_schema(
    operation_id="sweeps_list",
    summary="List the sweeps",
    description="Every sweep, newest first, with its jobs counted by state.",
    parameters=[CHALLENGE],
    responses=_answers({200: SweepSummarySerializer(many=True)}),
)

sweep_create_schema = extend_schema(
    operation_id="sweeps_create",
    summary="Create a sweep",
    description=(
        "One job per (trace, config): the traces by `trace_ids`, or by the trace list's filters "
        "(ready traces only). A config whose `SMxx_` name models another GPU generation than the "
        "trace's SASS version makes a `skipped` job with its reason; the others are queued on "
        "the config's queue (`cascade.sim.<CONFIG>`) for `cascade worker`. Needs a write token."
    ),
    request=SweepCreateRequestSerializer,
    parameters=[CHALLENGE],
    responses=_answers(
        {201: SweepDetailSerializer},
        {
            400: error_response(
                "The body is wrong, names no trace, or no ready trace matches its filters.",
                "trace_ids: no trace nope",
            ),
            403: READ_ONLY,
            409: error_response(
                "A trace named is not ready.", "trace demo is parsing: a sweep runs ready traces"
            ),
        },
    ),
)

sweep_schema = extend_schema(
    operation_id="sweeps_retrieve",
    summary="Get a sweep",
    description="The sweep, its counts and every job (creation order).",
    parameters=[SWEEP_ID, CHALLENGE],
    responses=_answers({200: SweepDetailSerializer}, {404: NO_SUCH_SWEEP}),
)

sweep_cancel_schema = extend_schema(
    operation_id="sweeps_destroy",
    summary="Cancel a sweep",
    description=(
        "Its queued jobs end `cancelled`; running ones finish. Its owner's write token, or a staff "
        "user's. Answers the sweep."
    ),
    parameters=[SWEEP_ID, CHALLENGE],
    request=None,
    responses=_answers(
        {200: SweepDetailSerializer},
        {
            403: error_response(
                "The token's scope is read, or the sweep is another user's (its owner is named).",
                "sweep 9 belongs to alice: only its owner or staff may cancel it",
            ),
            404: NO_SUCH_SWEEP,
        },
    ),
)


def _job_schema(step: str, summary: str, description: str, request, ok, conflict: bool) -> extend_schema:
    others = {400: BAD_BODY, 403: READ_ONLY, 404: NO_SUCH_JOB, **({409: STALE} if conflict else {})}
    return extend_schema(
        operation_id=f"sweeps_jobs_{step}",
        summary=summary,
        description=description,
        request=request,
        parameters=[SWEEP_ID, JOB_ID, CHALLENGE],
        responses=_answers({200: ok}, others),
    )


sweep_job_start_schema = _job_schema(
    "start",
    "Start a job (a worker)",
    "A new attempt, or `run` false with why: the job ended, runs elsewhere under a fresh lease, "
    "or the same Accel-Sim build's simulation of it is ready (the job is then `ready`).",
    SweepJobStartRequestSerializer,
    SweepJobStartSerializer,
    conflict=False,
)
sweep_job_progress_schema = _job_schema(
    "progress",
    "Report a job's progress (a worker)",
    "Renews the job's lease (CASCADE_SWEEP_LEASE_SECONDS); report at least every 30 s.",
    SweepJobProgressRequestSerializer,
    SweepJobContinueSerializer,
    conflict=True,
)
sweep_job_finish_schema = _job_schema(
    "finish",
    "Finish a job's attempt (a worker)",
    "`ready` once its simulation is ready (else failed with the simulation's error); `failed` is "
    "queued again until CASCADE_SWEEP_ATTEMPTS; `skipped` with a reason. Answers the job.",
    SweepJobFinishRequestSerializer,
    SweepJobSerializer,
    conflict=True,
)
