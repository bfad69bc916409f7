"""The OpenAPI description of the simulation routes: a trace's simulations, every trace's,
their accuracy, and a simulation's upload (each view's `extend_schema`).

The shapes are `simulations.serializers` (from `traces.shapes`); the shared pieces are `traces.openapi`'s.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema

from simulations import accuracy
from simulations.api_examples import (
    ACCURACY_EXAMPLE,
    SIMULATION_COMPLETE_EXAMPLES,
    SIMULATION_LIST_EXAMPLE,
    SIMULATION_UPLOAD_EXAMPLES,
    SIMULATIONS_EXAMPLE,
)
from simulations.serializers import (
    SimulationAccuracySerializer,
    SimulationCompleteRequestSerializer,
    SimulationCompleteSerializer,
    SimulationDetailSerializer,
    SimulationListItemSerializer,
    SimulationSummarySerializer,
    SimulationUploadRequestSerializer,
    SimulationUploadSerializer,
    SweepAccuracySerializer,
)
from traces.openapi import (
    CHALLENGE,
    LIST_EXAMPLES,
    NO_SUCH_TRACE,
    THROTTLED,
    TRACE_ID,
    UNAUTHORIZED,
    error_response,
    trace_responses,
)

# --- simulations ------------------------------------------------------------------------------

SIMULATION_FILTER_400 = error_response(
    "A filter's value cannot be read, or a parameter is not one the list knows.",
    "state accepts one of uploading, parsing, ready, failed; got 'done'.",
)

trace_simulations_schema = extend_schema(
    operation_id="traces_simulations_list",
    # A list, but of one trace's simulations: the trace list's filters are not its parameters.
    filters=False,
    summary="List a trace's simulations",
    description=(
        "Every simulation of the trace (`<run>/simulations/<name>/` in the bucket), in every "
        "state, newest first by created_at (ties by name). `metrics` is null until a simulation "
        "is ready."
    ),
    parameters=[
        TRACE_ID,
        CHALLENGE,
    ],
    responses=trace_responses(SimulationSummarySerializer(many=True)),
)

simulation_schema = extend_schema(
    operation_id="traces_simulations_retrieve",
    summary="Get a simulation",
    description=(
        "One simulation of the trace: its summary, the launches a cycle limit stopped "
        "(`interrupted`), its accuracy per step of the trace and per kernel family, and every "
        "simulated launch in the trace's order (ctx, kernel_id), each beside its measured time. "
        "Large simulations are streamed (chunked transfer), compressed as they stream when "
        "Accept-Encoding allows (zstd or gzip)."
    ),
    parameters=[
        TRACE_ID,
        OpenApiParameter(
            "name",
            OpenApiTypes.STR,
            OpenApiParameter.PATH,
            description="The simulation's folder name under <run>/simulations/.",
            examples=[OpenApiExample("accelsim-SM90_H100", value="accelsim-SM90_H100")],
        ),
        CHALLENGE,
    ],
    responses={
        200: SimulationDetailSerializer,
        401: UNAUTHORIZED,
        404: error_response(
            "No trace has this id, or the trace no simulation of this name.",
            "simulation nope of trace demo not found",
        ),
        429: THROTTLED,
    },
)

simulations_schema = extend_schema(
    operation_id="simulations_list",
    summary="List simulations",
    description=(
        "Every simulation of every trace, newest first by created_at (ties by trace and name), "
        "each after its trace's id. The optional filters narrow the list; a value a filter cannot "
        "read is a 400 that names it."
    ),
    parameters=[CHALLENGE],
    responses={
        200: SimulationListItemSerializer(many=True),
        400: SIMULATION_FILTER_400,
        401: UNAUTHORIZED,
        429: THROTTLED,
    },
)

accuracy_schema = extend_schema(
    operation_id="simulations_accuracy",
    filters=True,  # the list's filters narrow the simulations added up
    summary="Accuracy by simulator build or config",
    description=(
        "One row per simulator build (or config, `by=config`) over its ready simulations among "
        "those the filters select: how many simulations and traces, and MAPE, aggregate error and "
        "Pearson's r pooled over every launch they compared (not a mean of their simulations'). "
        "The most accurate (lowest MAPE) first; builds with nothing compared last."
    ),
    parameters=[
        OpenApiParameter(
            "by",
            OpenApiTypes.STR,
            enum=accuracy.ACCURACY_BY,
            default=accuracy.ACCURACY_BY[0],
            description="Group by the Accel-Sim build (default) or the simulator config.",
        ),
        CHALLENGE,
    ],
    responses={
        200: SimulationAccuracySerializer(many=True),
        400: error_response(
            "`by` is neither simulator_build nor config, or a filter's value cannot be read.",
            "by must be one of simulator_build, config, not 'x'",
        ),
        401: UNAUTHORIZED,
        429: THROTTLED,
    },
)


# --- a sweep's accuracy -----------------------------------------------------------------------

NO_SUCH_SWEEP = error_response("No sweep has this id (nor `against`'s).", "sweep 99 not found")

sweep_accuracy_schema = extend_schema(
    operation_id="sweeps_accuracy",
    summary="A sweep's accuracy",
    description=(
        "`by_config`: a row per (config, simulator build) over the sweep's ready simulations, "
        "as /api/simulations/accuracy computes its rows. `cells`: each job. `against`: another "
        "sweep's simulations of the same traces, launch by launch."
    ),
    parameters=[
        OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The sweep's id."),
        OpenApiParameter("against", OpenApiTypes.INT, description="Another sweep's id."),
        CHALLENGE,
    ],
    responses={
        200: SweepAccuracySerializer,
        400: error_response(
            "`against` is not an integer.", "against must be a sweep's id (an integer), not 'x'"
        ),
        401: UNAUTHORIZED,
        404: NO_SUCH_SWEEP,
        429: THROTTLED,
    },
)


# --- a simulation's upload --------------------------------------------------------------------

SIMULATION_NAME = OpenApiParameter(
    "name",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description=(
        "The simulation's folder under <run>/simulations/: letters, digits, '.', '_', '-', at most "
        "100; a folder's name by the path rule: not `.` or `..`, no Windows device name (CON, "
        "nul.txt), no trailing dot."
    ),
    examples=[OpenApiExample("accelsim-SM86_RTX3070", value="accelsim-SM86_RTX3070")],
)
UPLOAD_NOT_READY = error_response(
    "The trace is not ready (its state is said), or a finished upload (ready, failed, or being "
    "read) holds the name: delete it first.",
    "simulation accelsim-SM86_RTX3070 of trace demo exists; delete it or choose another name",
)
NOT_THE_OWNER = error_response(
    "The token's scope is read, or the simulation is another user's (its owner is named): only "
    "its owner or staff may replace, complete or delete it.",
    "simulation accelsim-SM86_RTX3070 of trace demo belongs to alice: only its owner or staff may replace it",
)
BODY_TOO_LARGE = error_response(
    "The request body is larger than 1 MiB.", "the request body is 2097152 bytes, more than 1048576"
)

simulation_upload_schema = extend_schema(
    operation_id="traces_simulations_upload",
    summary="Upload a simulation: where to PUT its files",
    description=(
        "Presigned PUT URLs into the trace's `simulations/{name}/` for the files named, valid "
        "until `expires_at` (CASCADE_PRESIGN_SECONDS): PUT each with exactly its `headers` (the "
        "length is signed), `simulation.json` last, then POST `.../complete`. A file of "
        "CASCADE_SIM_MULTIPART_BYTES (64 MiB) and up is an S3 multipart upload instead: PUT each "
        "part (`part_size` bytes, the last what remains) to its URL and keep each answer's ETag "
        "for the completion. The URLs point into the folder's `.staging/`: nothing in the folder "
        "changes until `/complete`. The first upload to a name makes its token's user the "
        "simulation's owner; another user's upload to it is a 403 naming the owner (staff may); "
        "a name whose upload finished (ready, failed, or being read) is a 409 for anyone: DELETE "
        "it first. The owner's own unfinished upload is replaced by the new one. Needs a write "
        "token."
    ),
    request=SimulationUploadRequestSerializer,
    parameters=[
        TRACE_ID,
        SIMULATION_NAME,
        CHALLENGE,
    ],
    examples=SIMULATION_UPLOAD_EXAMPLES,
    responses={
        200: SimulationUploadSerializer,
        400: error_response(
            "A bad name, a file name the folder does not accept, a size out of bounds, no "
            "simulation.json, or a body that is not the request's shape.",
            "simulation.json is missing: it is the folder's completion marker, uploaded last",
        ),
        401: UNAUTHORIZED,
        403: NOT_THE_OWNER,
        404: NO_SUCH_TRACE,
        409: UPLOAD_NOT_READY,
        413: BODY_TOO_LARGE,
        429: THROTTLED,
    },
)

simulation_complete_schema = extend_schema(
    operation_id="traces_simulations_complete",
    summary="Complete a simulation's upload: read it at once",
    description=(
        "Completes the multipart uploads listed (none, or no `multipart`, when every file was one "
        "PUT; each `upload_id` the one `/upload` answered), checks that every file named at "
        "`/upload` landed with its size, then moves them into the folder (the folder's files the "
        "upload does not name are deleted, `simulation.json` moved last), registers the "
        "simulation's folder and has it read at once, in the background; "
        "answers the simulation's state now (`uploading` until its read begins) and its URL: poll "
        "that until the state is `ready` or `failed`. Needs a write token."
    ),
    request=SimulationCompleteRequestSerializer,
    parameters=[
        TRACE_ID,
        SIMULATION_NAME,
        CHALLENGE,
    ],
    examples=SIMULATION_COMPLETE_EXAMPLES,
    responses={
        202: SimulationCompleteSerializer,
        400: error_response(
            "A bad name, a part list S3 refuses (no such upload, a wrong ETag), nothing uploaded "
            "to the folder, or a body that is not the request's shape.",
            "sim.log.xz: S3 refused to complete the upload: NoSuchUpload: The specified upload does not exist.",
        ),
        401: UNAUTHORIZED,
        403: NOT_THE_OWNER,
        404: NO_SUCH_TRACE,
        409: UPLOAD_NOT_READY,
        413: BODY_TOO_LARGE,
        429: THROTTLED,
    },
)

simulation_delete_schema = extend_schema(
    operation_id="traces_simulations_destroy",
    summary="Delete a simulation and its files",
    description=(
        "Deletes the simulation and every object of its folder in the bucket (its files, its "
        "owner record, an upload's staged files; its unfinished multipart uploads aborted), so "
        "that no later poll registers it again. Its owner's write token, or a staff user's. "
        "Answers 204 with no body."
    ),
    parameters=[
        TRACE_ID,
        SIMULATION_NAME,
        CHALLENGE,
    ],
    request=None,
    responses={
        204: None,
        401: UNAUTHORIZED,
        403: error_response(
            "The token's scope is read, or the simulation is another user's (its owner is named).",
            "simulation accelsim-SM86_RTX3070 of trace demo belongs to alice: only its owner or "
            "staff may delete it",
        ),
        404: error_response(
            "No trace has this id, or the trace no simulation of this name.",
            "simulation nope of trace demo not found",
        ),
        429: THROTTLED,
    },
)

LIST_EXAMPLES.update(
    {
        "/api/traces/{trace_id}/simulations": (
            "Simulations",
            SIMULATIONS_EXAMPLE,
            "A ready simulation, one arriving",
        ),
        "/api/simulations": ("Simulations", SIMULATION_LIST_EXAMPLE, "A ready simulation, one arriving"),
        "/api/simulations/accuracy": (
            "TwoBuilds",
            ACCURACY_EXAMPLE,
            "Two Accel-Sim builds, the more accurate first",
        ),
    }
)
