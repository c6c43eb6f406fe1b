"""Registry endpoints: /api/v1/models/... (versions, files, aliases, lineage, compare),
/api/v1/webhooks/ and /api/v1/lineage/dataset-versions/{id}."""

import json
import tarfile
import uuid
from functools import lru_cache, partial

import orjson
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponseRedirect, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import SAFE_METHODS
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.parsers import JSONParser
from apps.core.api.views import PatchOnlyMixin, TenantScopedViewSet
from apps.core.queries import unique_row
from apps.datasets.storage.base import CHUNK_BYTES
from apps.registry import selectors, services
from apps.registry.api.serializers import (
    AliasSerializer,
    AliasSetSerializer,
    CompareQuerySerializer,
    ModelFileSerializer,
    ModelUpdateSerializer,
    ModelVersionRowSerializer,
    ModelVersionSerializer,
    RegisteredModelSerializer,
    StageSerializer,
    UploadQuerySerializer,
    VersionCreateSerializer,
    VersionUpdateSerializer,
    WebhookCreatedSerializer,
    WebhookDeliverySerializer,
    WebhookSerializer,
)
from apps.registry.models import ModelVersion, RegisteredModel, VersionState, Webhook
from apps.tenancy.access import actor_for
from apps.tenancy.api.lifecycle import LifecycleMixin

VERSION = r"versions/(?P<number>[0-9]{1,9})"
WEBHOOK_EVENTS = {"versions", "commit", "alias"}  # actions that may tell the webhooks
# routes that use the model's own row and its project (for the role rule), not its tenant's
# row or its creator: a smaller query to build and read
PROJECT_ONLY = {("versions", "GET"), ("version", "GET"), ("lineage", "GET"), ("alias", "PUT")}
READ_BYTES = 64 * 1024
# how many bytes of a file of an open version are stored (an upload's answer, and where to resume)
UPLOAD_STATE = inline_serializer(
    "ModelUploadState", {"path": serializers.CharField(), "size": serializers.IntegerField()}
)


class OctetStreamParser:
    """Accepts a raw body without reading it: the view streams request.stream itself."""

    media_type = "application/octet-stream"

    def parse(self, stream, media_type=None, parser_context=None):
        return {}


def _body_chunks(request):
    stream = request.stream
    if stream is None:
        return
    while chunk := stream.read(READ_BYTES):
        yield chunk


def _stream_file(storage, key: str):
    with storage.open(key=key) as handle:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk


def _tar_stream(version: ModelVersion):
    """A tar of the version's files, streamed file by file (never the whole in memory)."""
    storage = services._storage(version)
    for row in version.files.order_by("path"):
        info = tarfile.TarInfo(name=f"{version.model.name}-v{version.number}/{row.path}")
        info.size, info.mode = row.size, 0o644
        info.mtime = int(version.ready_at.timestamp()) if version.ready_at else 0
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        yield from _stream_file(storage, services.file_key(version, row.path))
        if row.size % tarfile.BLOCKSIZE:
            yield b"\0" * (tarfile.BLOCKSIZE - row.size % tarfile.BLOCKSIZE)
    yield b"\0" * (tarfile.BLOCKSIZE * 2)


@lru_cache(maxsize=64)  # bounded: the method is what the client sent
def _model_rows(action: str | None, method: str):
    """The models as `action` reads them, before the actor's scope: built once a process
    (the annotations cost more to resolve than PostgreSQL takes to run them). Never
    evaluated: callers take a copy (`.all()`)."""
    rows = RegisteredModelViewSet.queryset
    if action == "retrieve":  # the model with its aliases: one query
        rows = RegisteredModelSerializer.with_aliases(rows)
    if (action, method) in PROJECT_ONLY:
        rows = rows.select_related(None).select_related("project")
    if action in WEBHOOK_EVENTS and method not in SAFE_METHODS:
        rows = services.with_webhook_flag(rows)
    return rows


class RegisteredModelViewSet(
    LifecycleMixin,
    PatchOnlyMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    TenantScopedViewSet,
):
    """Models of a project and everything below them. Version routes are actions on the
    model: the model is the object the role matrix and the project rule are checked on."""

    resource = "model"
    scope_field = "project"
    queryset = RegisteredModel.objects.select_related("project__tenant", "created_by")
    serializer_class = RegisteredModelSerializer
    filterset_fields = ["project", "name"]
    ordering_fields = ["name", "created_at"]
    parser_classes = [JSONParser, MultiPartParser, OctetStreamParser]

    def get_queryset(self):
        return self.restrict(_model_rows(self.action, self.request.method).all())

    # -- models ---------------------------------------------------------------------------------

    def create(self, request, *args, **kwargs):
        serializer = RegisteredModelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        model = services.model_create(
            actor=self.actor,
            project=self.write_scope,
            name=data["name"],
            description=data.get("description", ""),
            tags=data.get("tags"),
        )
        return Response(RegisteredModelSerializer(model).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ModelUpdateSerializer)
    def partial_update(self, request, *args, **kwargs):
        model = self.get_object()
        serializer = ModelUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        model = services.model_update(actor=self.actor, model=model, **serializer.validated_data)
        return Response(RegisteredModelSerializer(model).data)

    def destroy(self, request, *args, **kwargs):
        model = self.get_object()
        self.destroy_checked(model)  # a model with versions is archived instead
        services.model_delete(actor=self.actor, model=model)
        return Response(status=status.HTTP_204_NO_CONTENT)

    # -- versions -------------------------------------------------------------------------------

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        context = RegisteredModelSerializer.page_context(page)
        return self.get_paginated_response(
            RegisteredModelSerializer(page, many=True, context=context).data
        )

    def _version(
        self, model: RegisteredModel, number, *, full: bool = False, rows=None
    ) -> ModelVersion:
        """Version `number` of the model (404 if none); `full` with what its serializer
        renders (aliases, dataset versions, creator); `rows`: the model's versions as a
        caller wants them read."""
        rows = model.versions.all() if rows is None else rows
        if full:
            rows = rows.select_related("created_by").prefetch_related("aliases", "dataset_versions")
        version = unique_row(rows.filter(number=int(number)))
        if version is None:
            raise Http404("Version not found.")
        version.model = model  # loaded with its project and tenant
        return version

    @extend_schema(methods=["GET"], responses=ModelVersionRowSerializer(many=True))
    @extend_schema(
        methods=["POST"], request=VersionCreateSerializer, responses={201: ModelVersionSerializer}
    )
    @action(
        detail=True,
        methods=["get", "post"],
        url_path="versions",
        policy_action={"get": "read", "head": "read", "post": "create-version"},
        filter_backends=[],  # newest first, always: the models' ?ordering= is not the versions'
    )
    def versions(self, request, pk=None):
        """GET: the versions, newest first, without card, metrics and params unless `?full=1`.
        POST: a new version, open for uploads, or copied in from a directory of the project's
        tree (`path`) by the worker."""
        model = self.get_object()
        if request.method == "GET":
            # cards may be 256 KiB each: a page lists, the detail tells all (or ?full=1)
            full = request.query_params.get("full") in ("1", "true")
            rows = ModelVersionSerializer.listing(model_id=model.pk, full=full)
            page = self.paginate_queryset(rows.order_by("-created_at"))
            return self.get_paginated_response([orjson.Fragment(row["json"]) for row in page])
        files = None
        body = request.data
        if request.content_type.startswith("multipart/form-data"):
            # a small version in one request: `metadata` (the JSON below) and `file/<path>`
            # parts, created, stored and committed (under the API's body limit)
            try:
                body = json.loads(request.data.get("metadata") or "{}")
            except ValueError:
                raise ValidationError({"metadata": ["Not JSON."]}) from None
            files = [
                (name[len("file/") :], handle)
                for name, handle in request.FILES.items()
                if name.startswith("file/")
            ]
        serializer = VersionCreateSerializer(data=body)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        attempt = None
        if data.get("source_attempt"):
            from apps.jobs.models import JobAttempt

            attempt = (
                JobAttempt.objects.visible_to(self.actor)
                .select_related("job")
                .filter(pk=data["source_attempt"])
                .first()
            )
            if attempt is None:
                raise ValidationError({"source_attempt": ["Job attempt not found."]})
        create = services.version_create
        if files is not None:
            if data.get("path"):
                raise ValidationError({"path": ["Upload files or name a path, not both."]})
            create = partial(services.version_create_with_files, files=files)
        version = create(
            actor=self.actor,
            model=model,
            framework=data.get("framework", ""),
            description=data.get("description", ""),
            card=data.get("card", ""),
            metrics=data.get("metrics"),
            params=data.get("params"),
            tags=data.get("tags"),
            dataset_versions=data.get("dataset_versions"),
            source_attempt=attempt,
            source_path=data.get("path", ""),
        )
        version = self._version(model, version.number, full=True)
        return Response(ModelVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=VersionUpdateSerializer, responses=ModelVersionSerializer)
    @action(
        detail=True,
        methods=["get", "patch"],
        url_path=VERSION,
        policy_action={"get": "read", "head": "read", "patch": "update"},
    )
    def version(self, request, pk=None, number=None):
        model = self.get_object()
        version = self._version(model, number, full=True)
        if request.method == "PATCH":
            serializer = VersionUpdateSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            services.version_update(actor=self.actor, version=version, **serializer.validated_data)
            version = self._version(model, number, full=True)
        return Response(ModelVersionSerializer(version).data)

    @extend_schema(responses=ModelFileSerializer(many=True))
    @action(
        detail=True,
        methods=["get"],
        url_path=f"{VERSION}/files",
        policy_action="read",
        pagination_class=None,  # the whole manifest, a bare array
    )
    def files(self, request, pk=None, number=None):
        """The version's manifest: path, size, sha256 of every file."""
        version = self._version(self.get_object(), number)
        return Response(ModelFileSerializer(version.files.order_by("path"), many=True).data)

    @extend_schema(
        methods=["GET"], responses={(200, "application/octet-stream"): OpenApiTypes.BINARY}
    )
    @extend_schema(
        methods=["PUT"],
        parameters=[
            OpenApiParameter("offset", {"type": "integer", "minimum": 0, "maximum": 2**63 - 1})
        ],
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses=UPLOAD_STATE,
    )
    @action(
        detail=True,
        methods=["get", "put"],
        url_path=f"{VERSION}/files/(?P<path>.+)",
        policy_action={"get": "download", "head": "download", "put": "create-version"},
    )
    def file(self, request, pk=None, number=None, path=None):
        """GET: download one file of a ready version. PUT: append the body to one file of an
        open version at `?offset=` (the bytes stored so far; a 409 tells where to resume)."""
        model = self.get_object()
        version = self._version(model, number)
        if request.method == "PUT":
            params = UploadQuerySerializer(data=request.query_params)
            params.is_valid(raise_exception=True)
            size = services.version_upload(
                actor=self.actor,
                version=version,
                path=path,
                offset=params.validated_data["offset"],
                chunks=_body_chunks(request),
            )
            return Response({"path": path, "size": size})
        if version.state != VersionState.READY:
            raise Http404("The version is not ready.")
        row = unique_row(version.files.filter(path=path))
        if row is None:
            raise Http404("No such file in this version.")
        storage = services._storage(version)
        key = services.file_key(version, path)
        url = storage.download_url(key=key, expires_s=300)
        if url:
            return HttpResponseRedirect(url)
        response = StreamingHttpResponse(
            _stream_file(storage, key), content_type="application/octet-stream"
        )
        response["Content-Length"] = str(row.size)
        response["Content-Disposition"] = f'attachment; filename="{path.rsplit("/", 1)[-1]}"'
        response["X-Torus-Sha256"] = row.sha256
        return response

    @extend_schema(responses=UPLOAD_STATE)
    @action(
        detail=True,
        methods=["get"],
        url_path=f"{VERSION}/uploads/(?P<path>.+)",
        policy_action="read",
    )
    def upload(self, request, pk=None, number=None, path=None):
        """How many bytes of a file of an open version are stored: where to resume."""
        version = self._version(self.get_object(), number)
        return Response({"path": path, "size": services.upload_status(version=version, path=path)})

    @extend_schema(request=None, responses=ModelVersionSerializer)
    @action(
        detail=True, methods=["post"], url_path=f"{VERSION}/commit", policy_action="create-version"
    )
    def commit(self, request, pk=None, number=None):
        """Close an open version: the manifest is computed from the stored bytes, the files
        sealed; the version is ready (and immutable) from then on."""
        model = self.get_object()
        services.version_commit(actor=self.actor, version=self._version(model, number))
        return Response(ModelVersionSerializer(self._version(model, number, full=True)).data)

    @extend_schema(responses={(200, "application/x-tar"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"], url_path=f"{VERSION}/archive", policy_action="download")
    def archive(self, request, pk=None, number=None):
        """Every file of a ready version as one tar, streamed."""
        version = self._version(self.get_object(), number)
        if version.state != VersionState.READY:
            raise Http404("The version is not ready.")
        response = StreamingHttpResponse(_tar_stream(version), content_type="application/x-tar")
        name = f"{version.model.name}-v{version.number}.tar"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    @extend_schema(responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["get"], url_path=f"{VERSION}/lineage", policy_action="read")
    def lineage(self, request, pk=None, number=None):
        """The version's job, attempts (with their logs), metrics and dataset versions."""
        model = self.get_object()
        version = self._version(model, number, rows=selectors.versions_for_lineage(model))
        return Response(selectors.version_lineage(actor=self.actor, version=version))

    @extend_schema(request=StageSerializer, responses=ModelVersionSerializer)
    @action(detail=True, methods=["post"], url_path=f"{VERSION}/stage", policy_action="stage")
    def stage(self, request, pk=None, number=None):
        model = self.get_object()
        serializer = StageSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = self._version(model, number)
        services.version_stage(actor=self.actor, version=version, **serializer.validated_data)
        return Response(ModelVersionSerializer(self._version(model, number, full=True)).data)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "a", {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}, required=True
            ),
            OpenApiParameter(
                "b", {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}, required=True
            ),
        ],
        responses=OpenApiTypes.OBJECT,
    )
    @action(detail=True, methods=["get"], policy_action="read")
    def compare(self, request, pk=None):
        """Two versions' metrics (with b - a) and parameters side by side."""
        model = self.get_object()
        params = CompareQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        a = self._version(model, params.validated_data["a"])
        b = self._version(model, params.validated_data["b"])
        return Response(selectors.versions_compare(actor=self.actor, a=a, b=b))

    # -- aliases --------------------------------------------------------------------------------

    @extend_schema(responses=AliasSerializer(many=True))
    @action(detail=True, methods=["get"], policy_action="read", pagination_class=None)
    def aliases(self, request, pk=None):
        model = self.get_object()
        rows = model.aliases.select_related("version").order_by("name")
        return Response(AliasSerializer(rows, many=True).data)

    @extend_schema(request=AliasSetSerializer, responses=AliasSerializer)
    @action(
        detail=True,
        methods=["put", "delete"],
        url_path=r"aliases/(?P<alias>[^/]{1,64})",
        policy_action="alias",
    )
    def alias(self, request, pk=None, alias=None):
        """PUT {"version": n}: point the alias at version n (audited, webhooks told).
        DELETE: remove it."""
        model = self.get_object()
        if request.method == "DELETE":
            services.alias_delete(actor=self.actor, model=model, name=alias)
            return Response(status=status.HTTP_204_NO_CONTENT)
        serializer = AliasSetSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = self._version(
            model,
            serializer.validated_data["version"],
            rows=model.versions.only("id", "model_id", "number", "state"),
        )
        row = services.alias_set(actor=self.actor, model=model, name=alias, version=version)
        return Response(AliasSerializer(row).data)

    @extend_schema(
        responses=inline_serializer(
            "AliasMove",
            fields={
                "alias": serializers.CharField(allow_null=True),
                "from_version": serializers.IntegerField(allow_null=True),
                "to_version": serializers.IntegerField(allow_null=True),
                "actor": serializers.CharField(),
                "at": serializers.DateTimeField(),
            },
            many=True,
        )
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="alias-history",
        policy_action="read",
        pagination_class=None,  # a bare array of moves
    )
    def alias_history(self, request, pk=None):
        """Every move of this model's aliases, oldest first (from the audit log)."""
        return Response(selectors.alias_history(actor=self.actor, model=self.get_object()))


class WebhookViewSet(
    PatchOnlyMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet
):
    """A tenant's webhooks (admins): signed POSTs on model_version.created and alias.changed."""

    resource = "webhook"
    queryset = Webhook.objects.all()
    serializer_class = WebhookSerializer
    ordering_fields = ["created_at"]

    @extend_schema(responses={201: WebhookCreatedSerializer})
    def create(self, request, *args, **kwargs):
        serializer = WebhookSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        hook, secret = services.webhook_create(
            actor=self.actor,
            tenant=self.write_scope,
            url=data["url"],
            events=data["events"],
            description=data.get("description", ""),
        )
        hook.secret = secret
        return Response(WebhookCreatedSerializer(hook).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, *args, **kwargs):
        hook = self.get_object()
        serializer = WebhookSerializer(hook, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        fields = {
            k: v
            for k, v in serializer.validated_data.items()
            if k in ("url", "events", "active", "description")
        }
        hook = services.webhook_update(actor=self.actor, webhook=hook, **fields)
        return Response(WebhookSerializer(hook).data)

    def destroy(self, request, *args, **kwargs):
        services.webhook_delete(actor=self.actor, webhook=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=WebhookDeliverySerializer(many=True))
    @action(detail=True, methods=["get"], policy_action="read")
    def deliveries(self, request, pk=None):
        """The delivery log: each event sent, its state, tries, response code and error."""
        hook = self.get_object()
        page = self.paginate_queryset(hook.deliveries.order_by("-created_at"))
        return self.get_paginated_response(WebhookDeliverySerializer(page, many=True).data)


class DatasetVersionLineageView(APIView):
    """Every job that read a dataset version and every model version that came from it."""

    resource = "lineage"
    policy_action = "read"

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, pk: uuid.UUID):
        from apps.datasets.models import DatasetVersion
        from apps.tenancy.policies import authorize

        actor = actor_for(request)
        dv = DatasetVersion.objects.visible_to(actor).filter(pk=pk).first()
        if dv is None:
            raise Http404("Dataset version not found.")
        authorize(actor, resource="lineage", action="read", tenant_id=dv.tenant_id_value)
        return Response(selectors.dataset_version_lineage(actor=actor, dataset_version=dv))
