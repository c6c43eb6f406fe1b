"""Subscriptions in the API: what is sent in (each field checked) and what comes back (never
the signing secret, but once, at creation)."""

from rest_framework import serializers

from apps.core.api.serializers import StrictModelSerializer, StrictSerializer
from apps.notifications.models import Channel, Event, NotificationDefault, Subscription

TENANT_REF_MAX = 64


class SubscriptionSerializer(StrictModelSerializer):
    tenant_id = serializers.UUIDField(read_only=True)
    project = serializers.UUIDField(source="project_id", read_only=True, allow_null=True)
    job = serializers.UUIDField(source="job_id", read_only=True, allow_null=True)
    events = serializers.ListField(child=serializers.ChoiceField(choices=Event.choices))

    class Meta:
        model = Subscription
        fields = [
            "id",
            "tenant_id",
            "project",
            "job",
            "events",
            "channel",
            "address",
            "failing_since",
            "last_error",
            "default",
            "created_at",
        ]
        read_only_fields = fields


class SubscriptionCreateSerializer(StrictSerializer):
    tenant = serializers.CharField(
        required=False,
        max_length=TENANT_REF_MAX,
        help_text="Tenant id or slug (default: your only one).",
    )
    project = serializers.UUIDField(
        required=False, allow_null=True, help_text="A project's jobs (its members' and others')."
    )
    job = serializers.UUIDField(required=False, allow_null=True, help_text="One job.")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=Event.choices), min_length=1, max_length=len(Event)
    )
    channel = serializers.ChoiceField(choices=Channel.choices)
    address = serializers.CharField(
        max_length=2048,
        required=False,
        allow_blank=True,
        default="",
        help_text="An e-mail address, or an https URL for the other channels; none for inapp.",
    )

    def validate(self, data):
        if data.get("project") and data.get("job"):
            raise serializers.ValidationError({"job": ["Name a job or a project, not both."]})
        return data


class SubscriptionCreatedSerializer(SubscriptionSerializer):
    secret = serializers.CharField(
        read_only=True,
        help_text="A webhook's signing secret (X-Torus-Signature), returned this once.",
    )

    class Meta(SubscriptionSerializer.Meta):
        fields = [*SubscriptionSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class NotificationDefaultSerializer(StrictModelSerializer):
    tenant = serializers.CharField(
        write_only=True,
        required=False,
        max_length=TENANT_REF_MAX,
        help_text="Tenant id or slug (default: your only one).",
    )
    tenant_id = serializers.UUIDField(read_only=True)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=Event.choices), min_length=1, max_length=len(Event)
    )
    channel = serializers.ChoiceField(
        choices=[Channel.EMAIL.value, Channel.INAPP.value],
        help_text="email (each member's account e-mail) or inapp (the bell); one default each.",
    )

    class Meta:
        model = NotificationDefault
        fields = ["id", "tenant", "tenant_id", "channel", "events", "created_at", "updated_at"]
        read_only_fields = ["id", "tenant_id", "created_at", "updated_at"]
        validators = []
