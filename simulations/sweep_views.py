"""The sweeps' routes: `POST|GET /api/sweeps`, `GET|DELETE /api/sweeps/{id}` (a cancel, its
owner's or staff's), and the worker's `POST /api/sweeps/{id}/jobs/{job_id}/start|progress|finish`.
Each view is thin: the logic is `simulations.sweeps` and `simulations.sweep_jobs`."""

from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from simulations import sweep_jobs, sweeps
from simulations.errors import SweepConflict, SweepForbidden, SweepMissing, SweepRefused
from simulations.sweep_openapi import (
    sweep_cancel_schema,
    sweep_create_schema,
    sweep_job_finish_schema,
    sweep_job_progress_schema,
    sweep_job_start_schema,
    sweep_list_schema,
    sweep_schema,
)
from simulations.sweep_serializers import (
    SweepCreateRequestSerializer,
    SweepJobFinishRequestSerializer,
    SweepJobProgressRequestSerializer,
    SweepJobStartRequestSerializer,
)
from traces import audit
from traces.models import AuditAction
from traces.params import check_known
from traces.permissions import CanViewTraces, CanWriteSweeps
from traces.uploads import refused_as, validated
from traces.views import OperatorDescribed, json_or_browsable

JOB = r"jobs/(?P<job_id>[0-9]{1,18})"


def sweep_refusals():
    """The sweeps' refusals as the API's one-sentence errors: 404, 403 naming the owner, 409, 400."""
    return refused_as(SweepMissing, SweepForbidden, SweepConflict, SweepRefused)


class SweepViewSet(OperatorDescribed, viewsets.ViewSet):
    """Sweeps: their jobs, their cancellation, and the workers' reports of the jobs they run."""

    operator_description = (
        "Sweeps: every chosen trace on every chosen config, run by `cascade worker` processes. "
        "Creating, cancelling and a worker's reports need a write token."
    )
    permission_classes = [CanViewTraces]
    lookup_value_regex = "[0-9]{1,18}"

    def get_permissions(self):
        if self.request is not None and self.request.method in ("POST", "DELETE"):
            return [CanWriteSweeps()]
        return super().get_permissions()

    @sweep_list_schema
    def list(self, request):
        check_known(request.query_params, [])  # a filter the list does not have is no filter
        return json_or_browsable(request, sweeps.sweep_list())

    @sweep_create_schema
    def create(self, request):
        body = validated(SweepCreateRequestSerializer, request)
        asked = sweeps.SweepRequest(
            name=body["name"],
            configs=list(dict.fromkeys(body["configs"])),
            trace_ids=body.get("trace_ids"),
            filters={name: body[name] for name in sweeps.FILTER_KEYS if name in body},
            select=body.get("select"),
            cover=body["cover"],
            rerun=body["rerun"],
        )
        with sweep_refusals():
            sweep = sweeps.create_sweep(asked, owner=request.user)
            detail = sweeps.sweep_detail(sweep.pk)
        audit.record(
            AuditAction.SWEEP_CREATE,
            request=request,
            detail={
                "sweep": sweep.pk,
                "name": sweep.name,
                "configs": sweep.configs,
                "counts": detail["counts"],
            },
        )
        return Response(detail, status=status.HTTP_201_CREATED)

    @sweep_schema
    def retrieve(self, request, pk=None):
        check_known(request.query_params, [])
        with sweep_refusals():
            return json_or_browsable(request, sweeps.sweep_detail(int(pk)))

    @sweep_cancel_schema
    def destroy(self, request, pk=None):
        with sweep_refusals():
            detail = sweeps.cancel_sweep(int(pk), user=request.user)
        audit.record(
            AuditAction.SWEEP_CANCEL,
            request=request,
            detail={"sweep": detail["id"], "name": detail["name"], "counts": detail["counts"]},
        )
        return Response(detail)

    @sweep_job_start_schema
    @action(detail=True, methods=["post"], url_path=f"{JOB}/start", url_name="job-start")
    def start(self, request, pk=None, job_id=None):
        body = validated(SweepJobStartRequestSerializer, request)
        worker = sweep_jobs.Worker(
            host=body["host"],
            process=body["process"],
            accel_sim_build=body.get("accel_sim_build"),
            gpgpusim_build=body.get("gpgpusim_build"),
            configs=tuple(body.get("configs") or ()),
            sass_versions=tuple(body.get("sass_versions") or ()),
        )
        with sweep_refusals():
            return Response(sweep_jobs.start_job(int(pk), int(job_id), worker))

    @sweep_job_progress_schema
    @action(detail=True, methods=["post"], url_path=f"{JOB}/progress", url_name="job-progress")
    def progress(self, request, pk=None, job_id=None):
        body = validated(SweepJobProgressRequestSerializer, request)
        with sweep_refusals():
            answer = sweep_jobs.report_progress(
                int(pk), int(job_id), body["attempt"], body["kernels_finished"], body["kernels_listed"]
            )
        return Response(answer)

    @sweep_job_finish_schema
    @action(detail=True, methods=["post"], url_path=f"{JOB}/finish", url_name="job-finish")
    def finish(self, request, pk=None, job_id=None):
        body = validated(SweepJobFinishRequestSerializer, request)
        with sweep_refusals():
            answer = sweep_jobs.finish_job(
                int(pk),
                int(job_id),
                body["attempt"],
                body["state"],
                error=body.get("error"),
                reason=body.get("reason"),
            )
        return Response(answer)
