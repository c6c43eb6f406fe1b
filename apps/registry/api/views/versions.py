"""Registry endpoints of a model's versions: create (uploads, a one-call multipart, a copy from
the tree), describe, files, uploads, commit, archive, lineage, stage and compare. Actions of
the model's viewset (apps/registry/api/views/models.py): the model is what is authorised."""

import json
import tarfile
from functools import partial

import orjson
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponseRedirect, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.queries import unique_row
from apps.datasets.storage.base import CHUNK_BYTES
from apps.registry import lineage, selectors
from apps.registry.api.serializers import (
    CompareQuerySerializer,
    ModelFileSerializer,
    ModelVersionRowSerializer,
    ModelVersionSerializer,
    StageSerializer,
    UploadQuerySerializer,
    VersionCreateSerializer,
    VersionUpdateSerializer,
)
from apps.registry.files import file_key, version_storage
from apps.registry.models import ModelVersion, RegisteredModel, VersionState
from apps.registry.uploads import (
    upload_status,
    version_commit,
    version_create_with_files,
    version_upload,
)
from apps.registry.versions import version_create, version_stage, version_update

VERSION = r"versions/(?P<number>[0-9]{1,9})"
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
    storage = version_storage(version)
    for row in version.files.order_by("path"):
        info = tarfile.TarInfo(name=f"{version.model.name}-v{version.number}/{row.path}")
        info.size, info.mode = row.size, 0o644
        info.mtime = int(version.ready_at.timestamp()) if version.ready_at else 0
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        yield from _stream_file(storage, file_key(version, row.path))
        if row.size % tarfile.BLOCKSIZE:
            yield b"\0" * (tarfile.BLOCKSIZE - row.size % tarfile.BLOCKSIZE)
    yield b"\0" * (tarfile.BLOCKSIZE * 2)


class VersionActions:
    """The version routes of the model viewset."""

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
            attempt = lineage.source_attempt(actor=self.actor, attempt_id=data["source_attempt"])
            if attempt is None:
                raise ValidationError({"source_attempt": ["Job attempt not found."]})
        create = version_create
        if files is not None:
            if data.get("path"):
                raise ValidationError({"path": ["Upload files or name a path, not both."]})
            create = partial(version_create_with_files, files=files)
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
            version_update(actor=self.actor, version=version, **serializer.validated_data)
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
            size = version_upload(
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
        storage = version_storage(version)
        key = file_key(version, path)
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
        return Response({"path": path, "size": upload_status(version=version, path=path)})

    @extend_schema(request=None, responses=ModelVersionSerializer)
    @action(
        detail=True, methods=["post"], url_path=f"{VERSION}/commit", policy_action="create-version"
    )
    def commit(self, request, pk=None, number=None):
        """Close an open version: the manifest is computed from the stored bytes, the files
        sealed; the version is ready (and immutable) from then on."""
        model = self.get_object()
        version_commit(actor=self.actor, version=self._version(model, number))
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
        version = self._version(model, number, rows=lineage.versions_for_lineage(model))
        return Response(lineage.version_lineage(actor=self.actor, version=version))

    @extend_schema(request=StageSerializer, responses=ModelVersionSerializer)
    @action(detail=True, methods=["post"], url_path=f"{VERSION}/stage", policy_action="stage")
    def stage(self, request, pk=None, number=None):
        model = self.get_object()
        serializer = StageSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = self._version(model, number)
        version_stage(actor=self.actor, version=version, **serializer.validated_data)
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
