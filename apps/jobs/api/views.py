"""Job endpoints: submit (JSON or YAML), list with filters, detail, cancel, restart."""

from django.db.models import Prefetch
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError as DRFValidationError
from rest_framework.response import Response

from apps.core.api.parsers import JSONParser, YAMLParser
from apps.core.api.validation import validated
from apps.jobs import extras, services
from apps.jobs.api import render
from apps.jobs.api.filters import JobFilter
from apps.jobs.api.serializers import (
    JobBatchResultSerializer,
    JobBatchSerializer,
    JobDetailSerializer,
    JobSerializer,
    NodeCacheSerializer,
)
from apps.jobs.models import Job, JobEvent
from apps.jobs.selectors import node_cache_summary
from apps.jobs.spec import JobSpecSerializer
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
        if self.action in ("list", "retrieve") and (added := extras.annotations()):
            queryset = queryset.annotate(**added)  # the failure signatures: a subquery, not N+1
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

    @extend_schema(request=None, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"], policy_action="restart")
    def restart(self, request, pk=None):
        job = services.job_restart(actor=self.actor, job=self.get_object())
        return Response(JobDetailSerializer(job).data)
