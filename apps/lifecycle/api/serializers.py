from rest_framework import serializers

from apps.lifecycle.models import Kind, Purge


class PurgeSerializer(serializers.ModelSerializer):
    requested_by = serializers.CharField(
        source="requested_by.username", read_only=True, default=None, allow_null=True
    )

    class Meta:
        model = Purge
        fields = [
            "id",
            "kind",
            "target_id",
            "target_repr",
            "tenant_slug",
            "state",
            "steps_done",
            "runs",
            "last_error",
            "requested_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields


class PurgeRequestSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=Kind.choices)
    id = serializers.UUIDField()
