"""Quota endpoints (admins set limits) and usage reports (JSON, or CSV for spreadsheets)."""

import csv
import io

from django.core.exceptions import ValidationError
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.serializers import StrictModelSerializer
from apps.quotas import services
from apps.quotas.models import Quota
from apps.quotas.selectors import storage_summary, usage_summary
from apps.tenancy.access import actor_for
from apps.tenancy.api.viewsets import PatchOnlyMixin, TenantScopedViewSet
from apps.tenancy.models import Project
from apps.tenancy.selectors import member_by_username

LIMIT_FIELDS = [
    "gpus",
    "cpus",
    "memory_mb",
    "running_jobs",
    "gpu_hours_per_month",
    "storage_bytes",
]


class QuotaSerializer(StrictModelSerializer):
    tenant = serializers.CharField(write_only=True, required=False, max_length=64)
    tenant_id = serializers.UUIDField(read_only=True)
    project = serializers.UUIDField(source="project_id", required=False, allow_null=True)
    user = serializers.CharField(
        source="user.username", required=False, allow_null=True, max_length=150
    )
    scope = serializers.CharField(source="scope_label", read_only=True)

    class Meta:
        model = Quota
        fields = [
            "id",
            "tenant",
            "tenant_id",
            "project",
            "user",
            "scope",
            *LIMIT_FIELDS,
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "tenant_id", "scope", "created_at", "updated_at"]
        validators = []
        extra_kwargs = {
            "gpu_hours_per_month": {"min_value": 0},
        }


class QuotaUpdateSerializer(StrictModelSerializer):
    class Meta:
        model = Quota
        fields = LIMIT_FIELDS
        extra_kwargs = {"gpu_hours_per_month": {"min_value": 0}}


class QuotaViewSet(
    PatchOnlyMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet
):
    resource = "quota"
    queryset = Quota.objects.select_related("tenant", "project", "user")
    serializer_class = QuotaSerializer
    filterset_fields = ["project"]
    ordering_fields = ["created_at"]

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        data.pop("tenant", None)
        tenant = self.write_scope
        project = None
        if data.get("project_id"):
            project = Project.objects.filter(tenant=tenant, pk=data["project_id"]).first()
            if project is None:
                raise ValidationError({"project": ["Project not found in this tenant."]})
        user = None
        if (data.get("user") or {}).get("username"):
            # the same answer whether the person exists elsewhere or not at all
            user = member_by_username(tenant_id=tenant.pk, username=data["user"]["username"])
        limits = {name: data[name] for name in LIMIT_FIELDS if name in data}
        quota = services.quota_create(
            actor=self.actor, tenant=tenant, project=project, user=user, limits=limits, ip=self.ip
        )
        return Response(self.get_serializer(quota).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=QuotaUpdateSerializer, responses=QuotaSerializer)
    def partial_update(self, request, *args, **kwargs):
        quota = self.get_object()
        serializer = QuotaUpdateSerializer(quota, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        quota = services.quota_update(
            actor=self.actor, quota=quota, limits=serializer.validated_data, ip=self.ip
        )
        return Response(self.get_serializer(quota).data)

    def destroy(self, request, *args, **kwargs):
        services.quota_delete(actor=self.actor, quota=self.get_object(), ip=self.ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


USAGE_PARAMETERS = [
    OpenApiParameter("period", OpenApiTypes.STR, description="YYYY-MM (default: this month)"),
    OpenApiParameter(
        "group_by", OpenApiTypes.STR, description="tenant, project (default), user or project_user"
    ),
]


class UsageRowSerializer(serializers.Serializer):
    period = serializers.CharField()
    tenant = serializers.CharField()
    project = serializers.CharField(required=False)
    user = serializers.CharField(required=False)
    gpu_hours = serializers.FloatField()
    cpu_hours = serializers.FloatField()
    gpu_seconds = serializers.FloatField()
    cpu_seconds = serializers.FloatField()
    jobs = serializers.IntegerField()
    attempts = serializers.IntegerField()


class StorageRowSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    project = serializers.CharField(allow_null=True)
    used_bytes = serializers.IntegerField()
    limit_bytes = serializers.IntegerField(allow_null=True)


class UsageSerializer(serializers.Serializer):
    results = UsageRowSerializer(many=True)
    storage = StorageRowSerializer(many=True, help_text="Bytes held now, per tenant and project.")


def _usage_rows(request) -> list[dict]:
    return usage_summary(
        actor=actor_for(request),
        period=request.query_params.get("period"),
        group_by=request.query_params.get("group_by", "project"),
    )


class UsageView(APIView):
    """GPU- and CPU-hours per period from the usage ledger."""

    resource, policy_action = "usage", "read"

    @extend_schema(parameters=USAGE_PARAMETERS, responses=UsageSerializer)
    def get(self, request):
        # storage is what is held now (datasets, model files), per tenant and project
        storage = storage_summary(actor=actor_for(request))
        return Response({"results": _usage_rows(request), "storage": storage})


class UsageExportView(APIView):
    """The same report as CSV."""

    resource, policy_action = "usage", "export"

    @extend_schema(parameters=USAGE_PARAMETERS, responses={(200, "text/csv"): OpenApiTypes.STR})
    def get(self, request):
        rows = _usage_rows(request)
        buffer = io.StringIO()
        columns = [
            "period",
            "tenant",
            "project",
            "user",
            "gpu_hours",
            "cpu_hours",
            "gpu_seconds",
            "cpu_seconds",
            "jobs",
            "attempts",
        ]
        writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        response = HttpResponse(buffer.getvalue(), content_type="text/csv")
        name = request.query_params.get("period", "current")
        response["Content-Disposition"] = f'attachment; filename="torus-usage-{name}.csv"'
        return response
