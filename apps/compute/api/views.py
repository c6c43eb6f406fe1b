"""Clusters, nodes and accelerator types: platform infrastructure, readable by every user."""

import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.compute.builds import STATES, pending_builds
from apps.compute.models import AcceleratorType, Cluster, Node, Partition


class PartitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = Partition
        fields = ["name", "is_default", "state", "max_time_minutes", "node_names"]
        read_only_fields = fields


class ClusterSerializer(serializers.ModelSerializer):
    partitions = PartitionSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "backend",
            "is_default",
            "supports_containers",
            "healthy",
            "last_error",
            "last_synced_at",
            "last_reconciled_at",
            "partitions",
        ]
        read_only_fields = fields


class BuildSerializer(serializers.Serializer):
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=STATES)
    step = serializers.IntegerField(help_text="the step running or failed; 0 while waiting")
    steps = serializers.IntegerField()
    step_name = serializers.CharField()
    started = serializers.DateTimeField(allow_null=True)
    finished = serializers.DateTimeField(allow_null=True)
    cluster = serializers.CharField(allow_null=True, help_text="the cluster it registers")
    error = serializers.CharField(allow_blank=True)
    log = serializers.CharField(required=False, help_text="the builder's log file (staff only)")


class BuildListSerializer(serializers.Serializer):
    results = BuildSerializer(many=True)


class NodeSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "cluster",
            "name",
            "address",
            "partitions",
            "cpus",
            "memory_mb",
            "accelerators",
            "accelerators_in_use",
            "state",
            "reason",
            "updated_at",
        ]
        read_only_fields = fields


class AcceleratorTypeSerializer(serializers.ModelSerializer):
    class Meta:
        model = AcceleratorType
        fields = [
            "id",
            "name",
            "vendor",
            "gres_name",
            "resource_name",
            "visible_devices_env",
            "memory_mb",
        ]
        read_only_fields = fields


class NodeFilter(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    state = django_filters.CharFilter(lookup_expr="icontains")
    partition = django_filters.CharFilter(method="filter_partition")

    class Meta:
        model = Node
        fields = ["cluster", "state", "partition"]

    def filter_partition(self, queryset, name, value):
        return queryset.filter(partitions__contains=[value])


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    resource = "cluster"  # platform infrastructure: every signed-in user reads (policies.SIGNED_IN)
    policy_action: str | None = None  # a custom action names its own (MatrixPermission)
    queryset = Cluster.objects.prefetch_related("partitions")
    serializer_class = ClusterSerializer
    filterset_fields = ["backend", "name"]
    ordering_fields = ["name", "created_at"]

    @extend_schema(responses=BuildListSerializer)
    @action(detail=False, policy_action="read", pagination_class=None, filter_backends=[])
    def builds(self, request):
        """The builds `make up` left running in the background (a cluster, the serving
        engine) that are not done: waiting, building (step n of m) or failed."""
        rows = [
            build.public() | ({"log": build.log} if request.user.is_staff else {})
            for build in pending_builds()
        ]
        return Response(BuildListSerializer({"results": rows}).data)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    resource = "node"
    queryset = Node.objects.select_related("cluster")
    serializer_class = NodeSerializer
    filterset_class = NodeFilter
    ordering_fields = ["name", "created_at"]


class AcceleratorTypeViewSet(viewsets.ReadOnlyModelViewSet):
    resource = "accelerator-type"
    queryset = AcceleratorType.objects.all()
    serializer_class = AcceleratorTypeSerializer
    ordering_fields = ["name", "created_at"]
