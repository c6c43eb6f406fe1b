"""Dataset and version representations; request bodies are strict (unknown fields: 400)."""

from rest_framework import serializers

from apps.core.api.serializers import StrictSerializer
from apps.datasets.models import (
    Dataset,
    DatasetFile,
    DatasetVersion,
    StorageKind,
    name_validator,
)

MAX_TEXT = 10_000  # a description, a version's notes (the models' bound)
MAX_FILE_BYTES = 2**63 - 1  # what PostgreSQL's bigint holds
MAX_VERSION_NUMBER = 2**31 - 1


class DatasetSerializer(serializers.ModelSerializer):
    tenant = serializers.UUIDField(source="tenant_id", read_only=True)
    project = serializers.UUIDField(source="project_id", read_only=True)
    project_slug = serializers.CharField(source="project.slug", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True)
    latest_version = serializers.IntegerField(read_only=True, default=None)

    class Meta:
        model = Dataset
        fields = [
            "id",
            "tenant",
            "project",
            "project_slug",
            "name",
            "description",
            "created_by",
            "latest_version",
            "created_at",
            "updated_at",
            "archived_at",
        ]
        read_only_fields = fields


class DatasetCreateSerializer(StrictSerializer):
    project = serializers.UUIDField()
    name = serializers.CharField(max_length=64, validators=[name_validator])
    description = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=MAX_TEXT
    )


class DatasetUpdateSerializer(StrictSerializer):
    description = serializers.CharField(allow_blank=True, max_length=MAX_TEXT)


class DatasetVersionSerializer(serializers.ModelSerializer):
    dataset = serializers.UUIDField(source="dataset_id", read_only=True)
    dataset_name = serializers.CharField(source="dataset.name", read_only=True)
    ref = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True)
    source_attempt = serializers.UUIDField(
        source="source_attempt_id", read_only=True, allow_null=True
    )

    class Meta:
        model = DatasetVersion
        fields = [
            "id",
            "dataset",
            "dataset_name",
            "number",
            "ref",
            "state",
            "storage_kind",
            "file_count",
            "size_bytes",
            "manifest_sha256",
            "committed_at",
            "created_by",
            "source_attempt",
            "notes",
            "created_at",
        ]
        read_only_fields = fields

    def get_ref(self, version) -> str:
        return f"{version.dataset.name}:{version.number}"


class DatasetVersionCreateSerializer(StrictSerializer):
    notes = serializers.CharField(required=False, allow_blank=True, default="", max_length=MAX_TEXT)
    storage_kind = serializers.ChoiceField(choices=StorageKind.choices, required=False)


class DatasetRegisterSerializer(StrictSerializer):
    path = serializers.CharField(max_length=4096, trim_whitespace=False)


class DatasetFileSerializer(serializers.ModelSerializer):
    class Meta:
        model = DatasetFile
        fields = ["path", "size", "sha256"]
        read_only_fields = fields


class DatasetPathQuerySerializer(StrictSerializer):
    path = serializers.CharField(max_length=4096, trim_whitespace=False)


class DatasetUploadQuerySerializer(StrictSerializer):
    path = serializers.CharField(max_length=4096, trim_whitespace=False)
    offset = serializers.IntegerField(min_value=0, max_value=MAX_FILE_BYTES)
    total = serializers.IntegerField(min_value=0, max_value=MAX_FILE_BYTES)


class DatasetUploadStateSerializer(serializers.Serializer):
    path = serializers.CharField()
    offset = serializers.IntegerField()
    complete = serializers.BooleanField()
    file = DatasetFileSerializer(allow_null=True)


class DatasetCompareQuerySerializer(StrictSerializer):
    a = serializers.IntegerField(min_value=1, max_value=MAX_VERSION_NUMBER)
    b = serializers.IntegerField(min_value=1, max_value=MAX_VERSION_NUMBER)


class DatasetCompareSerializer(serializers.Serializer):
    a = serializers.IntegerField()
    b = serializers.IntegerField()
    added = serializers.ListField(child=serializers.CharField())
    removed = serializers.ListField(child=serializers.CharField())
    changed = serializers.ListField(child=serializers.CharField())
    unchanged = serializers.IntegerField()


class DatasetVerifySerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    checked = serializers.IntegerField()
    missing = serializers.ListField(child=serializers.CharField())
    changed = serializers.ListField(child=serializers.CharField())
    unexpected = serializers.ListField(child=serializers.CharField())
