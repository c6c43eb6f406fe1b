"""Registry serializers: validate shapes here; the services validate meaning."""

import functools

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import F, OuterRef
from django.utils import timezone
from rest_framework import serializers

from apps.core.api import json_rows
from apps.core.api.serializers import (
    BoundedDictField,
    JSONNumberField,
    JSONScalarField,
    StrictModelSerializer,
    StrictSerializer,
)
from apps.core.jsonsafe import renderable
from apps.registry.models import (
    ModelAlias,
    ModelFile,
    ModelVersion,
    RegisteredModel,
    Stage,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)
from apps.registry.validation import MAX_CARD, MAX_METRICS, MAX_PARAMS

# a version number (a positive PostgreSQL integer), a file's size (what a bigint holds)
MAX_NUMBER_IN_SEQUENCE = 2**31 - 1
MAX_FILE_BYTES = 2**63 - 1


class RegisteredModelSerializer(StrictModelSerializer):
    project = serializers.UUIDField(source="project_id")
    project_slug = serializers.CharField(source="project.slug", read_only=True)
    tenant_id = serializers.UUIDField(read_only=True)
    latest_version = serializers.IntegerField(source="last_number", read_only=True)
    tags = BoundedDictField(
        child=serializers.CharField(allow_blank=True, max_length=256),
        max_items=50,
        required=False,
    )
    aliases = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    archived_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="Set while archived."
    )

    class Meta:
        model = RegisteredModel
        fields = [
            "id",
            "tenant_id",
            "project",
            "project_slug",
            "name",
            "description",
            "tags",
            "latest_version",
            "aliases",
            "created_by",
            "created_at",
            "updated_at",
            "archived_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]
        validators = []

    def get_aliases(self, obj) -> dict[str, int]:
        if "model_aliases" in self.context:  # a page of models: looked up at once
            return self.context["model_aliases"].get(obj.pk, {})
        if hasattr(obj, "alias_names"):  # read with the model (with_aliases)
            return dict(zip(obj.alias_names, obj.alias_numbers, strict=True))
        return dict(obj.aliases.order_by("name").values_list("name", "version__number"))

    @staticmethod
    def with_aliases(models):
        """`models` (a queryset) with each one's aliases read in the same query."""
        aliases = ModelAlias.objects.filter(model=OuterRef("pk")).order_by("name")
        return models.annotate(
            alias_names=ArraySubquery(aliases.values("name")),
            alias_numbers=ArraySubquery(aliases.values("version__number")),
        )

    @staticmethod
    def page_context(models) -> dict:
        aliases: dict = {}
        rows = ModelAlias.objects.filter(model_id__in=[m.pk for m in models]).order_by("name")
        for model_id, name, number in rows.values_list("model_id", "name", "version__number"):
            aliases.setdefault(model_id, {})[name] = number
        return {"model_aliases": aliases}


class ModelUpdateSerializer(StrictSerializer):
    description = serializers.CharField(allow_blank=True, required=False, max_length=10_000)
    tags = BoundedDictField(
        child=serializers.CharField(allow_blank=True, max_length=256),
        max_items=50,
        required=False,
    )


class ModelFileSerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelFile
        fields = ["path", "size", "sha256"]


class ModelVersionSerializer(serializers.ModelSerializer):
    model = serializers.UUIDField(source="model_id", read_only=True)
    model_name = serializers.CharField(source="model.name", read_only=True)
    aliases = serializers.SerializerMethodField()
    dataset_versions = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "model",
            "model_name",
            "number",
            "state",
            "stage",
            "storage",
            "framework",
            "description",
            "card",
            "metrics",
            "params",
            "tags",
            "aliases",
            "source_job",
            "source_attempt",
            "dataset_versions",
            "file_count",
            "size_bytes",
            "manifest_sha256",
            "error",
            "created_by",
            "created_at",
            "ready_at",
        ]
        read_only_fields = fields

    def get_aliases(self, obj) -> list[str]:
        if "aliases" in self.context:  # a page of versions: looked up at once (see below)
            return self.context["aliases"].get(obj.pk, [])
        return sorted(alias.name for alias in obj.aliases.all())

    def get_dataset_versions(self, obj) -> list[str]:
        if "dataset_versions" in self.context:
            return self.context["dataset_versions"].get(obj.pk, [])
        return [str(dv.pk) for dv in obj.dataset_versions.all()]

    @staticmethod
    def page_context(versions) -> dict:
        """Aliases and dataset versions of a page of versions in two plain queries (Django's
        prefetch builds a queryset per row, which costs more than the rows)."""
        ids = [v.pk for v in versions]
        aliases: dict = {}
        for version_id, name in (
            ModelAlias.objects.filter(version_id__in=ids)
            .order_by("name")
            .values_list("version_id", "name")
        ):
            aliases.setdefault(version_id, []).append(name)
        datasets: dict = {}
        through = ModelVersion.dataset_versions.through
        for version_id, dv_id in through.objects.filter(modelversion_id__in=ids).values_list(
            "modelversion_id", "datasetversion_id"
        ):
            datasets.setdefault(version_id, []).append(str(dv_id))
        return {"aliases": aliases, "dataset_versions": datasets}

    HEAVY = ("card", "metrics", "params")  # left out of a listing unless asked for

    @classmethod
    def listing(cls, *, model_id, full: bool):
        """The model's versions as dicts of `cursor_position` (created_at as text) and `json`: the
        row as `to_representation` writes it, written by PostgreSQL, with each version's
        aliases and dataset versions; one query a page."""
        return _listing(full).filter(model_id=model_id)

    def to_representation(self, obj) -> dict:
        """The fields above, built directly: DRF's field-by-field rendering costs more than
        the query behind a page of 50 versions. A listing leaves out HEAVY."""
        row = self._row(obj)
        if self.context.get("full") is not False:  # (deferred in a listing: not read)
            # rows from before the bounds may hold numbers JSON cannot write back
            row.update(
                card=obj.card, metrics=renderable(obj.metrics), params=renderable(obj.params)
            )
        return row

    def _row(self, obj) -> dict:
        return {
            "id": str(obj.pk),
            "model": str(obj.model_id),
            "model_name": obj.model.name,
            "number": obj.number,
            "state": obj.state,
            "stage": obj.stage,
            "storage": obj.storage,
            "framework": obj.framework,
            "description": obj.description,
            "tags": renderable(obj.tags),
            "aliases": self.get_aliases(obj),
            "source_job": str(obj.source_job_id) if obj.source_job_id else None,
            "source_attempt": str(obj.source_attempt_id) if obj.source_attempt_id else None,
            "dataset_versions": self.get_dataset_versions(obj),
            "file_count": obj.file_count,
            "size_bytes": obj.size_bytes,
            "manifest_sha256": obj.manifest_sha256,
            "error": obj.error,
            "created_by": obj.created_by.username if obj.created_by_id else None,
            "created_at": _iso(obj.created_at),
            "ready_at": _iso(obj.ready_at),
        }


@functools.cache
def _listing(full: bool):
    """The listing's query before its filter, built once a process (its two dozen
    expressions cost more to resolve than PostgreSQL takes to run them)."""
    aliases = ModelAlias.objects.filter(version=OuterRef("pk")).order_by("name")
    through = ModelVersion.dataset_versions.through.objects
    datasets = through.filter(modelversion=OuterRef("pk")).order_by("pk")
    plain = ("number", "state", "stage", "storage", "framework", "description", "tags")
    counts = ("file_count", "size_bytes", "manifest_sha256", "error")
    pairs = {
        "id": json_rows.text("id"),
        "model": json_rows.text("model_id"),
        "model_name": F("model__name"),
        **{name: F(name) for name in plain},
        "aliases": ArraySubquery(aliases.values("name")),
        "source_job": json_rows.text("source_job_id"),
        "source_attempt": json_rows.text("source_attempt_id"),
        "dataset_versions": ArraySubquery(datasets.values("datasetversion_id")),
        **{name: F(name) for name in counts},
        "created_by": F("created_by__username"),
        "created_at": json_rows.utc_time("created_at"),
        "ready_at": json_rows.utc_time("ready_at"),
        **({name: F(name) for name in ModelVersionSerializer.HEAVY} if full else {}),
    }
    rows = ModelVersion.objects.annotate(
        json=json_rows.JSONRow(pairs), cursor_position=json_rows.text("created_at")
    )
    return rows.values("cursor_position", "json")


def _iso(value) -> str | None:
    """As DRF renders a datetime (in the current time zone, UTC as 'Z'), without making a
    field object per value."""
    if value is None:
        return None
    text = timezone.localtime(value).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class ModelVersionRowSerializer(ModelVersionSerializer):
    """A row of a model's versions listing, as the schema tells it: card, metrics and params
    only with ?full=1 (the listing renders its rows itself: `listing_row`)."""

    card = serializers.CharField(required=False)
    metrics = serializers.JSONField(required=False)
    params = serializers.JSONField(required=False)


class VersionCreateSerializer(StrictSerializer):
    framework = serializers.CharField(allow_blank=True, required=False, max_length=64)
    description = serializers.CharField(allow_blank=True, required=False, max_length=10_000)
    card = serializers.CharField(
        allow_blank=True,
        required=False,
        trim_whitespace=False,
        max_length=MAX_CARD,
        help_text="Markdown",
    )
    metrics = BoundedDictField(child=JSONNumberField(), max_items=MAX_METRICS, required=False)
    params = BoundedDictField(child=JSONScalarField(), max_items=MAX_PARAMS, required=False)
    tags = BoundedDictField(
        child=serializers.CharField(allow_blank=True, max_length=256),
        max_items=50,
        required=False,
    )
    dataset_versions = serializers.ListField(
        child=serializers.CharField(max_length=200),
        required=False,
        max_length=100,
        help_text='UUIDs or "<dataset>:<number>"',
    )
    source_attempt = serializers.UUIDField(required=False, allow_null=True)
    path = serializers.CharField(
        required=False,
        max_length=1024,
        help_text="A directory in the project's tree to copy in (instead of uploading files)",
    )


class VersionUpdateSerializer(StrictSerializer):
    description = serializers.CharField(allow_blank=True, required=False, max_length=10_000)
    card = serializers.CharField(
        allow_blank=True, required=False, trim_whitespace=False, max_length=MAX_CARD
    )
    tags = BoundedDictField(
        child=serializers.CharField(allow_blank=True, max_length=256),
        max_items=50,
        required=False,
    )


class StageSerializer(StrictSerializer):
    stage = serializers.ChoiceField(choices=Stage.choices)


class AliasSetSerializer(StrictSerializer):
    version = serializers.IntegerField(min_value=1, max_value=MAX_NUMBER_IN_SEQUENCE)


class AliasSerializer(serializers.ModelSerializer):
    version = serializers.IntegerField(source="version.number")

    class Meta:
        model = ModelAlias
        fields = ["name", "version", "updated_at"]

    def to_representation(self, instance) -> dict:
        """The fields above, built directly (DRF makes the field objects anew each time)."""
        return {
            "name": instance.name,
            "version": instance.version.number,
            "updated_at": _iso(instance.updated_at),
        }


class UploadQuerySerializer(StrictSerializer):
    offset = serializers.IntegerField(min_value=0, max_value=MAX_FILE_BYTES, default=0)


class CompareQuerySerializer(StrictSerializer):
    a = serializers.IntegerField(min_value=1, max_value=MAX_NUMBER_IN_SEQUENCE)
    b = serializers.IntegerField(min_value=1, max_value=MAX_NUMBER_IN_SEQUENCE)


class WebhookSerializer(StrictModelSerializer):
    tenant = serializers.CharField(write_only=True, required=False, max_length=64)
    tenant_id = serializers.UUIDField(read_only=True)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.choices),
        min_length=1,
        max_length=len(WebhookEvent.choices),
    )

    class Meta:
        model = Webhook
        fields = [
            "id",
            "tenant",
            "tenant_id",
            "url",
            "events",
            "description",
            "active",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "tenant_id", "created_at", "updated_at"]
        extra_kwargs = {"url": {"validators": []}}  # the service decides (scheme, addresses)
        validators = []


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(read_only=True, help_text="Shown once: store it now.")

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]


class WebhookDeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event",
            "payload",
            "state",
            "attempts",
            "response_code",
            "error",
            "next_attempt_at",
            "delivered_at",
            "created_at",
        ]
