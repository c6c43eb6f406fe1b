"""Dataset endpoints: datasets per project, versions (open -> filled -> committed), streamed
uploads (resumable), a registered directory, manifest, verify, compare, file and archive
downloads (streamed, Range supported).

Uploads: `PUT .../versions/{n}/upload?path=P&offset=O&total=T` with the raw bytes as body
(Content-Length required). The body streams to storage in bounded pieces (under ASGI through
apps/core/streaming.py). `GET .../upload?path=P` tells the stored offset to resume from;
`DELETE` drops an unfinished upload.
"""

import logging
import re
import uuid
from urllib.parse import quote

from django.core.handlers.asgi import ASGIRequest
from django.db.models import Max, Q
from django.http import Http404, HttpResponseRedirect, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError as DRFValidationError
from rest_framework.response import Response

from apps.core.api.errors import error_body
from apps.core.api.schema import ErrorSerializer
from apps.core.exceptions import Conflict
from apps.core.streaming import BodyInterrupted, async_chunks
from apps.datasets import selectors
from apps.datasets.api.serializers import (
    DatasetCompareQuerySerializer,
    DatasetCompareSerializer,
    DatasetCreateSerializer,
    DatasetFileSerializer,
    DatasetPathQuerySerializer,
    DatasetRegisterSerializer,
    DatasetSerializer,
    DatasetUpdateSerializer,
    DatasetUploadQuerySerializer,
    DatasetUploadStateSerializer,
    DatasetVerifySerializer,
    DatasetVersionCreateSerializer,
    DatasetVersionSerializer,
)
from apps.datasets.directories import version_register_directory
from apps.datasets.models import Dataset, DatasetFile, DatasetVersion, VersionState
from apps.datasets.paths import file_path_problem
from apps.datasets.storage import storage_for
from apps.datasets.storage.base import Sealed, StorageError
from apps.datasets.uploads import upload_abort, upload_append, upload_state
from apps.datasets.versions import (
    dataset_create,
    version_commit,
    version_create,
    version_discard,
)
from apps.tenancy.api.lifecycle import LifecycleMixin
from apps.tenancy.api.viewsets import PatchOnlyMixin, TenantScopedViewSet

# an upload's body is taken in pieces of this size (fewer hand-offs between threads)
UPLOAD_READ_BYTES = 4 * 1024 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
logger = logging.getLogger(__name__)


class CodedConflictMixin:
    """409s that carry a code clients act on (offset_mismatch, uploads_pending,
    storage_quota_exceeded, ...) and, for offsets, where to continue."""

    def handle_exception(self, exc):
        if isinstance(exc, Conflict) and getattr(exc, "code", None):
            body = error_body(409, str(exc), code=exc.code)
            body["error"].update(getattr(exc, "details", {}))
            return Response(body, status=409)
        if isinstance(exc, Sealed):
            body = error_body(409, "The version is committed.", code="version_committed")
            return Response(body, status=409)
        if isinstance(exc, StorageError):  # the filesystem or the object store failed
            logger.warning("dataset storage: %s", exc)
            body = error_body(503, "The storage failed; try again later.", code="storage_error")
            return Response(body, status=503, headers={"Retry-After": "30"})
        if isinstance(exc, BodyInterrupted):  # what arrived is stored; the client resumes
            body = error_body(400, f"Upload interrupted: {exc}", code="upload_interrupted")
            return Response(body, status=400)
        return super().handle_exception(exc)


def _stream_response(request, chunks, **kwargs) -> StreamingHttpResponse:
    """Under ASGI the pieces are produced in a worker thread (Django would otherwise read a
    synchronous iterator whole into memory); under WSGI they are served as they are."""
    if isinstance(request._request, ASGIRequest):
        chunks = async_chunks(chunks)
    return StreamingHttpResponse(chunks, **kwargs)


def _attachment(name: str) -> str:
    return f"attachment; filename*=UTF-8''{quote(name, safe='')}"


class DatasetViewSet(
    LifecycleMixin,
    CodedConflictMixin,
    PatchOnlyMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    TenantScopedViewSet,
):
    resource = "dataset"
    scope_field = "project"
    queryset = Dataset.objects.select_related("project", "created_by").annotate(
        latest_version=Max("versions__number", filter=Q(versions__state=VersionState.COMMITTED))
    )
    serializer_class = DatasetSerializer
    filterset_fields = ["project", "name"]
    ordering_fields = ["created_at", "name"]

    @extend_schema(request=DatasetCreateSerializer, responses={201: DatasetSerializer})
    def create(self, request, *args, **kwargs):
        body = DatasetCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        dataset = dataset_create(
            actor=self.actor,
            project=self.write_scope,
            name=body.validated_data["name"],
            description=body.validated_data["description"],
        )
        dataset.latest_version = None
        return Response(DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=DatasetUpdateSerializer, responses=DatasetSerializer)
    def partial_update(self, request, *args, **kwargs):
        dataset = self.get_object()
        body = DatasetUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        dataset.description = body.validated_data["description"]
        dataset.save(update_fields=["description", "updated_at"])
        return Response(DatasetSerializer(dataset).data)

    def destroy(self, request, *args, **kwargs):
        dataset = self.get_object()
        self.destroy_checked(dataset)  # a dataset with versions is archived instead
        for kind in set(dataset.versions.values_list("storage_kind", flat=True)):
            storage_for(kind).delete(prefix=dataset.storage_prefix)
        dataset.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "a", {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}, required=True
            ),
            OpenApiParameter(
                "b", {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}, required=True
            ),
        ],
        responses=DatasetCompareSerializer,
    )
    @action(detail=True, methods=["get"], policy_action="read")
    def compare(self, request, pk=None):
        """Files added, removed and changed (by sha256) from version a to version b."""
        dataset = self.get_object()
        params = DatasetCompareQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        a, b = params.validated_data["a"], params.validated_data["b"]
        versions = {v.number: v for v in dataset.versions.filter(number__in=[a, b])}
        missing = [n for n in (a, b) if n not in versions]
        if missing:
            raise Http404(f"Version {missing[0]} not found.")
        result = selectors.version_compare(old=versions[a], new=versions[b])
        return Response({"a": a, "b": b, **result})


class DatasetVersionViewSet(CodedConflictMixin, mixins.ListModelMixin, TenantScopedViewSet):
    resource = "dataset"
    queryset = DatasetVersion.objects.select_related(
        "dataset__project__tenant", "created_by"
    ).order_by("number")
    serializer_class = DatasetVersionSerializer
    lookup_field = "number"
    lookup_value_regex = "[0-9]+"
    ordering = ["number"]
    ordering_fields = ["number"]
    filterset_fields = ["state"]

    # by method for the list and detail routes (opening and discarding a version is "upload");
    # the actions below declare theirs
    policy_action = {"get": "read", "post": "upload", "delete": "upload"}

    def _dataset_id(self):
        try:
            return uuid.UUID(self.kwargs["dataset_pk"])
        except ValueError:
            raise Http404("Dataset not found.") from None

    def get_queryset(self):
        return super().get_queryset().filter(dataset_id=self._dataset_id())

    def get_dataset(self) -> Dataset:
        dataset = (
            Dataset.objects.visible_to(self.actor)
            .select_related("project__tenant")
            .filter(pk=self._dataset_id())
            .first()
        )
        if dataset is None:
            raise Http404("Dataset not found.")
        return dataset

    def list(self, request, *args, **kwargs):
        self.get_dataset()  # another tenant's dataset: 404, not an empty list
        return super().list(request, *args, **kwargs)

    def retrieve(self, request, *args, **kwargs):
        return Response(DatasetVersionSerializer(self.get_object()).data)

    @extend_schema(
        request=DatasetVersionCreateSerializer, responses={201: DatasetVersionSerializer}
    )
    def create(self, request, *args, **kwargs):
        """Open the next version (then upload or register files, then commit)."""
        dataset = self.get_dataset()
        self.check_object_permissions(request, dataset)
        body = DatasetVersionCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = version_create(
            actor=self.actor,
            dataset=dataset,
            notes=body.validated_data["notes"],
            storage_kind=body.validated_data.get("storage_kind"),
        )
        return Response(DatasetVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, *args, **kwargs):
        """Discard an open version and its files (a committed one never changes: 409)."""
        version_discard(actor=self.actor, version=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    # -- filling ---------------------------------------------------------------------------------

    @extend_schema(
        methods=["PUT"],
        parameters=[
            OpenApiParameter("path", OpenApiTypes.STR, required=True),
            OpenApiParameter(
                "offset", {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}, required=True
            ),
            OpenApiParameter(
                "total", {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}, required=True
            ),
        ],
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={200: DatasetUploadStateSerializer, 411: ErrorSerializer},
    )
    @extend_schema(
        methods=["GET", "DELETE"],
        parameters=[OpenApiParameter("path", OpenApiTypes.STR, required=True)],
        responses={200: DatasetUploadStateSerializer},  # DELETE too: the state after it
    )
    @action(detail=True, methods=["get", "put", "delete"], policy_action="upload")
    def upload(self, request, **kwargs):
        """PUT: append the body at `offset` to the file `path` (final size `total`); GET: the
        stored offset to resume from; DELETE: drop the unfinished upload."""
        version = self.get_object()
        if request.method == "PUT":
            params = DatasetUploadQuerySerializer(data=request.query_params)
            params.is_valid(raise_exception=True)
            raw = request.META.get("CONTENT_LENGTH")
            if not raw or not raw.isdigit():
                body = error_body(411, "Content-Length is required.", code="length_required")
                return Response(body, status=411)
            length = int(raw)
            state = upload_append(
                actor=self.actor,
                version=version,
                path=params.validated_data["path"],
                offset=params.validated_data["offset"],
                total=params.validated_data["total"],
                length=length,
                chunks=_body_chunks(request._request, length),
            )
            return Response(DatasetUploadStateSerializer(state).data)
        params = DatasetPathQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        path = params.validated_data["path"]
        if request.method == "DELETE":
            upload_abort(version=version, path=path)
        state = upload_state(version=version, path=path)
        return Response(DatasetUploadStateSerializer(state).data)

    @extend_schema(request=DatasetRegisterSerializer, responses=DatasetVersionSerializer)
    @action(detail=True, methods=["post"], policy_action="upload")
    def register(self, request, **kwargs):
        """Copy a directory of the project's tree into this open version (hashing on the way)."""
        version = self.get_object()
        body = DatasetRegisterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = version_register_directory(
            actor=self.actor, version=version, path=body.validated_data["path"]
        )
        return Response(DatasetVersionSerializer(version).data)

    @extend_schema(request=None, responses=DatasetVersionSerializer)
    @action(detail=True, methods=["post"], policy_action="commit")
    def commit(self, request, **kwargs):
        """Make the version immutable (manifest fixed, files sealed); exactly once."""
        version = version_commit(actor=self.actor, version=self.get_object())
        return Response(DatasetVersionSerializer(version).data)

    # -- reading ---------------------------------------------------------------------------------

    @extend_schema(responses=DatasetFileSerializer(many=True))
    @action(detail=True, methods=["get"], policy_action="read")
    def files(self, request, **kwargs):
        """The manifest: path, size and sha256 of every file, by path."""
        version = self.get_object()
        queryset = DatasetFile.objects.filter(version=version).order_by("path")
        self.ordering = ["path"]
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(DatasetFileSerializer(page, many=True).data)

    @extend_schema(request=None, responses=DatasetVerifySerializer)
    @action(detail=True, methods=["post"], policy_action="read")
    def verify(self, request, **kwargs):
        """Read every file back: missing, changed and unexpected files against the manifest."""
        return Response(selectors.version_verify(version=self.get_object()))

    @extend_schema(
        parameters=[OpenApiParameter("path", OpenApiTypes.STR, required=True)],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
    )
    @action(detail=True, methods=["get"], policy_action="read")
    def download(self, request, **kwargs):
        """One file, streamed; a `Range: bytes=a-b` header gets that part (206)."""
        version = self.get_object()
        params = DatasetPathQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        path = params.validated_data["path"]
        problem = file_path_problem(path)
        if problem:
            raise DRFValidationError({"path": [problem]})
        file = DatasetFile.objects.filter(version=version, path=path).first()
        if file is None:
            raise Http404("No such file in this version.")
        storage = storage_for(version.storage_kind)
        url = storage.download_url(key=version.file_key(path), expires_s=300)
        if url:
            redirect = HttpResponseRedirect(url)
            redirect["ETag"] = f'"{file.sha256}"'  # the manifest's (the store's ETag is not)
            return redirect
        start, end, partial = 0, file.size - 1, False
        header = request.headers.get("Range")
        if header and file.size:
            match = _RANGE.match(header.strip())
            if match and (match[1] or match[2]):
                if match[1]:
                    start = int(match[1])
                    end = min(int(match[2]), file.size - 1) if match[2] else file.size - 1
                else:  # the last N bytes
                    start = max(0, file.size - int(match[2]))
                partial = True
            if not match or start > end or start >= file.size:
                body = error_body(416, "Range not satisfiable.", code="range_not_satisfiable")
                return Response(body, status=416, headers={"Content-Range": f"*/{file.size}"})
        chunks = selectors.file_chunks(version=version, path=path, start=start, end=end)
        response = _stream_response(
            request,
            chunks,
            status=206 if partial else 200,
            content_type="application/octet-stream",
        )
        response["Content-Length"] = str(max(0, end - start + 1))
        response["Accept-Ranges"] = "bytes"
        response["ETag"] = f'"{file.sha256}"'
        response["Content-Disposition"] = _attachment(path.rsplit("/", 1)[-1])
        if partial:
            response["Content-Range"] = f"bytes {start}-{end}/{file.size}"
        return response

    @extend_schema(responses={(200, "application/x-tar"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"], policy_action="read")
    def archive(self, request, **kwargs):
        """The whole version as a tar, streamed (`<dataset>-v<n>/<path>` members)."""
        version = self.get_object()
        files = list(DatasetFile.objects.filter(version=version).order_by("path"))
        chunks = selectors.archive_chunks(version=version, files=files)
        response = _stream_response(request, chunks, content_type="application/x-tar")
        response["Content-Length"] = str(selectors.archive_size(version=version, files=files))
        name = f"{version.dataset.name}-v{version.number}.tar"
        response["Content-Disposition"] = _attachment(name)
        return response


def _body_chunks(request, length: int):
    """The request body in bounded pieces, exactly `length` bytes (a shorter body is an
    interrupted upload: what arrived stays stored, the client resumes). A streamed body
    (apps/core/streaming.py) hands over its pieces as they arrived, without copying."""
    stream = getattr(request, "_stream", None)
    parts = getattr(stream, "read_parts", None)
    left = length
    while left > 0:
        try:
            pieces = (
                parts(min(UPLOAD_READ_BYTES, left))
                if parts
                else [request.read(min(UPLOAD_READ_BYTES, left))]
            )
        except BodyInterrupted:
            raise
        except OSError as exc:  # WSGI servers report a dropped client this way
            raise BodyInterrupted(str(exc)) from exc
        if not pieces or not pieces[0]:
            raise BodyInterrupted("the body ended before its Content-Length")
        for piece in pieces:
            left -= len(piece)
            yield piece
