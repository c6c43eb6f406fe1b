"""Job endpoints: submit (JSON or YAML), list with filters, detail, cancel, restart."""

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import OuterRef, Prefetch
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError as DRFValidationError
from rest_framework.response import Response

from apps.core.api.parsers import JSONParser, YAMLParser
from apps.core.api.validation import validated
from apps.jobs import services
from apps.jobs.api import render
from apps.jobs.api.filters import JobFilter
from apps.jobs.api.serializers import (
    JobBatchResultSerializer,
    JobBatchSerializer,
    JobDetailSerializer,
    JobSerializer,
    LogChunkSerializer,
    LogQuerySerializer,
    MetricQuerySerializer,
    MetricSeriesSerializer,
    NodeCacheSerializer,
)
from apps.jobs.models import Job, JobEvent
from apps.jobs.selectors import node_cache_summary, read_log_chunk
from apps.jobs.spec import JobSpecSerializer
from apps.logs.models import SignatureMatch
from apps.logs.selectors import job_metric_series
from apps.tenancy.api.viewsets import TenantScopedViewSet


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    resource = "job"
    scope_field = "project"  # a submit names its project (a batch, one per job)
    queryset = Job.objects.select_related("project", "user", "cluster")
    serializer_class = JobSerializer
    filterset_class = JobFilter
    ordering_fields = ["created_at", "priority", "state", "name"]
    parser_classes = [JSONParser, YAMLParser]

    def get_queryset(self):
        queryset = super().get_queryset()
        if self.action in ("list", "retrieve"):  # the failure signatures: a subquery, not N+1
            names = (
                SignatureMatch.objects.filter(job_id=OuterRef("pk"))
                .values_list("signature__name", flat=True)
                .distinct()
                .order_by("signature__name")
            )
            queryset = queryset.annotate(signature_names=ArraySubquery(names))
        if self.action == "retrieve":  # a pipeline polls this: 5 statements (test_query_counts)
            queryset = queryset.prefetch_related(
                "attempts__dataset_versions__dataset",
                "attempts__dataset_stages",
                "attempts__model_version__model",
                Prefetch("events", queryset=JobEvent.objects.select_related("attempt")),
            )
        return queryset

    def get_serializer_class(self):
        return JobDetailSerializer if self.action != "list" else JobSerializer

    @extend_schema(request=JobSpecSerializer, responses={201: JobDetailSerializer})
    def create(self, request, *args, **kwargs):
        spec = validated(JobSpecSerializer, request.data)  # one serializer a thread
        (submitted,) = services.jobs_create(actor=self.actor, items=[(self.write_scope, spec)])
        if submitted.current:  # as written: rendered from memory (render.py)
            body = render.job_detail(
                submitted.job, attempts=submitted.attempts, events=submitted.events
            )
        else:
            body = JobDetailSerializer(submitted.job).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=JobBatchSerializer, responses={201: JobBatchResultSerializer})
    @action(detail=False, methods=["post"], policy_action="create", scope_items="jobs")
    def batch(self, request):
        """Submit up to 1000 jobs in one request (a sweep): all are created or none."""
        envelope = JobBatchSerializer(data=request.data)
        envelope.is_valid(raise_exception=True)
        specs, errors = [], {}
        for index, item in enumerate(envelope.validated_data["jobs"]):
            try:
                specs.append(validated(JobSpecSerializer, item))
            except DRFValidationError as exc:
                errors[str(index)] = exc.detail
        if errors:
            raise DRFValidationError({"jobs": errors})
        projects = {project.pk: project for project in self.write_scopes}
        submitted = services.jobs_create(
            actor=self.actor, items=[(projects[spec["project"]], spec) for spec in specs]
        )
        results = [
            render.job_row(s.job) if s.current else JobSerializer(s.job).data for s in submitted
        ]
        return Response({"results": results}, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[OpenApiParameter("node", OpenApiTypes.STR)],
        responses=NodeCacheSerializer(many=True),
    )
    @action(
        detail=False,
        methods=["get"],
        url_path="dataset-cache",
        policy_action="read",
        pagination_class=None,  # one row per node, whole: not the jobs' paginated, filtered list
        filter_backends=[],
    )
    def dataset_cache(self, request):
        """The dataset cache per node, over the jobs the caller can see: files found in the
        cache (hits), files staged into it (misses), bytes staged and evicted."""
        rows = node_cache_summary(actor=self.actor, node=request.query_params.get("node"))
        return Response(NodeCacheSerializer(rows, many=True).data)

    @extend_schema(request=None, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"], policy_action="cancel")
    def cancel(self, request, pk=None):
        job = services.job_cancel(actor=self.actor, job=self.get_object())
        return Response(JobDetailSerializer(job).data)

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

    @extend_schema(request=None, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"], policy_action="restart")
    def restart(self, request, pk=None):
        job = services.job_restart(actor=self.actor, job=self.get_object())
        return Response(JobDetailSerializer(job).data)
