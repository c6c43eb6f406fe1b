"""Failure signatures: a tenant's named log queries, and how many jobs matched each."""

from django.db.models import Count
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.api.serializers import StrictModelSerializer
from apps.logs import services
from apps.logs.models import FailureSignature, SignatureMatch
from apps.tenancy.api.viewsets import PatchOnlyMixin, TenantScopedViewSet


class FailureSignatureSerializer(StrictModelSerializer):
    tenant = serializers.CharField(write_only=True, required=False, max_length=64)
    tenant_id = serializers.UUIDField(read_only=True)

    class Meta:
        model = FailureSignature
        fields = ["id", "tenant", "tenant_id", "name", "query", "created_at", "updated_at"]
        read_only_fields = ["id", "tenant_id", "created_at", "updated_at"]
        validators = []


class SignatureStatSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    jobs = serializers.IntegerField()
    attempts = serializers.IntegerField()


class SignatureStatsSerializer(serializers.Serializer):
    """Every signature that matched in the period, most jobs first (one list, no pages)."""

    results = SignatureStatSerializer(many=True)


class FailureSignatureViewSet(
    PatchOnlyMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet
):
    resource = "failure-signature"
    queryset = FailureSignature.objects.all()
    serializer_class = FailureSignatureSerializer
    filterset_fields = ["name"]
    ordering_fields = ["name", "created_at"]

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        signature = services.signature_create(
            actor=self.actor,
            tenant=self.write_scope,
            name=data["name"],
            query=data["query"],
            ip=self.ip,
        )
        return Response(self.get_serializer(signature).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, *args, **kwargs):
        signature = self.get_object()
        serializer = self.get_serializer(signature, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        fields = {k: v for k, v in serializer.validated_data.items() if k in ("name", "query")}
        signature = services.signature_update(
            actor=self.actor, signature=signature, fields=fields, ip=self.ip
        )
        return Response(self.get_serializer(signature).data)

    def destroy(self, request, *args, **kwargs):
        services.signature_delete(actor=self.actor, signature=self.get_object(), ip=self.ip)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[
            OpenApiParameter("since", OpenApiTypes.DATETIME, description="attempts ended from"),
            OpenApiParameter("until", OpenApiTypes.DATETIME, description="attempts ended before"),
        ],
        responses=SignatureStatsSerializer,
    )
    @action(detail=False, methods=["get"], policy_action="stats", pagination_class=None)
    def stats(self, request):
        """How many jobs (and attempts) matched each signature in a period."""
        params = StatsQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        matches = self.restrict(SignatureMatch.objects.all())
        if params.validated_data.get("since"):
            matches = matches.filter(attempt__ended_at__gte=params.validated_data["since"])
        if params.validated_data.get("until"):
            matches = matches.filter(attempt__ended_at__lt=params.validated_data["until"])
        rows = (
            matches.values("signature_id", "signature__name")
            .annotate(jobs=Count("job", distinct=True), attempts=Count("attempt"))
            .order_by("-jobs", "signature__name")
        )
        return Response(
            {
                "results": [
                    {
                        "id": row["signature_id"],
                        "name": row["signature__name"],
                        "jobs": row["jobs"],
                        "attempts": row["attempts"],
                    }
                    for row in rows
                ]
            }
        )


class StatsQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
