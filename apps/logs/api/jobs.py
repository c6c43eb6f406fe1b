"""A job's output, served on the jobs' prefix: GET /api/v1/jobs/{id}/logs/ (a chunk of an
attempt's output file) and /metrics/ (the training metrics it reported). The job is found
and checked as the jobs' own endpoints do: the role matrix's `logs` and `metrics` actions."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.jobs.models import Job
from apps.logs.api.serializers import (
    LogChunkSerializer,
    LogQuerySerializer,
    MetricQuerySerializer,
    MetricSeriesSerializer,
)
from apps.logs.selectors import job_metric_series, read_log_chunk
from apps.tenancy.api.viewsets import TenantScopedViewSet


class JobOutputViewSet(TenantScopedViewSet):
    resource = "job"
    scope_field = "project"
    queryset = Job.objects.select_related("project", "user", "cluster")

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "attempt",
                {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                description="default: the latest",
            ),
            OpenApiParameter("stream", OpenApiTypes.STR, enum=["stdout", "stderr"]),
            OpenApiParameter(
                "offset",
                {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                description="byte offset to read from",
            ),
            OpenApiParameter(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": 1024 * 1024},
                description="bytes, at most 1 MiB",
            ),
        ],
        responses=LogChunkSerializer,
    )
    @action(detail=True, methods=["get"], policy_action="logs")
    def logs(self, request, pk=None):
        """A chunk of an attempt's output file; poll with `next_offset` to follow it."""
        job = self.get_object()
        params = LogQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        chunk = read_log_chunk(job=job, **params.validated_data)
        return Response(chunk)

    @extend_schema(
        parameters=[
            OpenApiParameter("metric", OpenApiTypes.STR, description="names, comma separated"),
            OpenApiParameter(
                "since_step",
                {"type": "integer", "minimum": -(2**63 - 1), "maximum": 2**63 - 1},
                description="only later steps",
            ),
        ],
        responses=MetricSeriesSerializer,
    )
    @action(detail=True, methods=["get"], policy_action="metrics")
    def metrics(self, request, pk=None):
        """The training metrics the job reported, as series for charts."""
        job = self.get_object()
        params = MetricQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        names = [n for n in params.validated_data.get("metric", "").split(",") if n]
        series = job_metric_series(
            job=job, names=names or None, since_step=params.validated_data.get("since_step")
        )
        return Response({"series": series})
