from rest_framework import serializers

from apps.core.api.serializers import StrictSerializer
from apps.secrets.models import ProjectSecret


class SecretSerializer(serializers.ModelSerializer):
    """A secret as every answer shows it: its name and history, never its value."""

    updated_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = ProjectSecret
        fields = ["name", "version", "created_at", "updated_at", "updated_by"]
        read_only_fields = fields


class SecretValueSerializer(StrictSerializer):
    # the rules (64 KiB of UTF-8, no NUL) are the service's: one 400 names the field
    value = serializers.CharField(
        allow_blank=True,
        trim_whitespace=False,
        write_only=True,
        max_length=64 * 1024,  # characters; the service counts the bytes
        help_text="Write-only.",
    )
