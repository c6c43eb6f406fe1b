"""GET /api/v1/usage/history/: GPU-hours and GPUs allocated over time (apps/quotas/history.py)."""

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.quotas.history import BUCKETS, GROUPS, MAX_BUCKETS, bucket_starts, utilisation_history
from apps.tenancy.access import actor_for

DEFAULT_SPAN = timedelta(days=30)


class HistoryQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False, help_text="default: 30 days before until")
    until = serializers.DateTimeField(required=False, help_text="default: now")
    bucket = serializers.ChoiceField(choices=list(BUCKETS), default="day")
    group_by = serializers.ChoiceField(choices=list(GROUPS), default="project")
    tenant = serializers.UUIDField(required=False, help_text="one of the caller's tenants")
    project = serializers.UUIDField(required=False)

    def validate(self, attrs):
        until = attrs.get("until") or timezone.now()
        since = attrs.get("since") or until - DEFAULT_SPAN
        if since >= until:
            raise serializers.ValidationError({"since": ["Must be before until."]})
        count = len(bucket_starts(since=since, until=until, bucket=attrs["bucket"]))
        if count > MAX_BUCKETS:
            raise serializers.ValidationError(
                {
                    "bucket": [
                        f"{count} buckets; at most {MAX_BUCKETS}: a larger bucket or less time."
                    ]
                }
            )
        return {**attrs, "since": since, "until": until}


class HistoryPointSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    gpu_hours = serializers.FloatField()
    gpus = serializers.FloatField(help_text="GPUs allocated on average over the bucket")


class HistorySeriesSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    project = serializers.CharField(required=False)
    user = serializers.CharField(required=False)
    points = HistoryPointSerializer(many=True)


class HistorySerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    bucket = serializers.CharField()
    group_by = serializers.CharField()
    series = HistorySeriesSerializer(many=True)


class UsageHistoryView(APIView):
    """GPU-hours per hour, day or week (UTC) from the usage ledger, spread over the buckets
    each attempt ran in, and the GPUs allocated on average, per tenant, project or user: one
    series each, a point for every bucket. An attempt still running counts until now."""

    resource, policy_action = "usage", "read"

    @extend_schema(parameters=[HistoryQuerySerializer], responses=HistorySerializer)
    def get(self, request):
        query = HistoryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        series = utilisation_history(
            actor=actor_for(request),
            since=params["since"],
            until=params["until"],
            bucket=params["bucket"],
            group_by=params["group_by"],
            tenant_id=params.get("tenant"),
            project_id=params.get("project"),
        )
        body = {k: params[k] for k in ("since", "until", "bucket", "group_by")}
        return Response(HistorySerializer({**body, "series": series}).data)
