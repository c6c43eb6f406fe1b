"""Datasets and model files in an S3-compatible object store (one bucket per platform).

A key is the object's name in settings.TORUS_S3_BUCKET. The platform alone holds the access
keys (platform/services/components/s3 writes them to services.env); clients and jobs (the
dataset stager) only get presigned GET URLs for single objects (`download_url`).

Uploads are S3 multipart uploads; the multipart upload id is the storage upload id. Appended
bytes are staged on local disk until they fill a part (apps/datasets/storage/s3_staging.py):
the resume state lives in S3 (upload id, part list) and on disk, never in memory.

Sealing: S3 has no read-only prefix short of object lock (which would also block deleting a
dataset), so `seal` records a marker object `.torus-sealed/<prefix>/.seal` and every write
first looks for a marker on the key's prefixes (a few HEAD requests), then raises Sealed;
unfinished uploads under the prefix are aborted. Only the platform holds write keys.
"""

import contextlib
import hashlib
import io
import shutil
import threading
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import BinaryIO

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from apps.compute.builds import still_building
from apps.datasets.storage import s3_staging as staging
from apps.datasets.storage.base import (
    Sealed,
    Storage,
    StorageError,
    UploadOffsetMismatch,
    check_key,
)

SEAL_ROOT = ".torus-sealed"
SEAL_NAME = ".seal"
MAX_URL_SECONDS = 7 * 24 * 3600  # SigV4's limit for a presigned URL
_MISSING = {"404", "NoSuchKey", "NotFound"}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class _ObjectReader(io.RawIOBase):
    """A raw stream over a GetObject body (read in the sizes asked for)."""

    def __init__(self, body):
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._body.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class S3Storage(Storage):
    kind = "s3"

    def __init__(self):
        self._lock = threading.Lock()
        self._clients: dict[tuple, object] = {}
        self._buckets: set[tuple[str, str]] = set()

    # -- connection -----------------------------------------------------------------------------

    def _make_client(self, endpoint: str, *, quick: bool = False):
        return boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            region_name=settings.TORUS_S3_REGION,
            aws_access_key_id=settings.TORUS_S3_ACCESS_KEY or None,
            aws_secret_access_key=settings.TORUS_S3_SECRET_KEY or None,
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": "path"},
                retries={"mode": "standard", "max_attempts": 1 if quick else 3},
                connect_timeout=2 if quick else 5,
                read_timeout=3 if quick else 60,
                # checksums only where S3 requires them (not every S3-compatible server
                # knows the newer default trailers)
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    def _client(self, *, public: bool = False, quick: bool = False):
        endpoint = settings.TORUS_S3_ENDPOINT_URL
        if public and settings.TORUS_S3_PUBLIC_URL:
            endpoint = settings.TORUS_S3_PUBLIC_URL
        if not settings.TORUS_S3_ACCESS_KEY or not settings.TORUS_S3_SECRET_KEY:
            raise StorageError(
                "TORUS_S3_ACCESS_KEY and TORUS_S3_SECRET_KEY are not set "
                "(platform/services/up s3 writes them to services.env)"
            )
        ident = (
            endpoint,
            settings.TORUS_S3_REGION,
            settings.TORUS_S3_ACCESS_KEY,
            settings.TORUS_S3_SECRET_KEY,
            quick,
        )
        with self._lock:
            client = self._clients.get(ident)
            if client is None:
                client = self._clients[ident] = self._make_client(endpoint, quick=quick)
        return client

    def ping(self) -> None:
        """Raise unless the bucket answers an authenticated HEAD (one try, short timeouts)."""
        with self._errors(f"bucket {self.bucket}"):
            self._client(quick=True).head_bucket(Bucket=self.bucket)

    @property
    def bucket(self) -> str:
        return settings.TORUS_S3_BUCKET

    def _s3(self):
        """The client, once the bucket is known to exist (made on first use)."""
        client = self._client()
        ident = (settings.TORUS_S3_ENDPOINT_URL, self.bucket)
        if ident not in self._buckets:
            with self._errors(f"bucket {self.bucket}"):
                try:
                    client.head_bucket(Bucket=self.bucket)
                except ClientError as exc:
                    if _code(exc) not in _MISSING | {"NoSuchBucket"}:
                        raise
                    try:
                        client.create_bucket(Bucket=self.bucket)
                    except ClientError as again:
                        if _code(again) not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                            raise
            self._buckets.add(ident)
        return client

    @contextlib.contextmanager
    def _errors(self, what: str):
        """S3 and connection failures become StorageError (the caller may retry)."""
        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise StorageError(
                f"S3 refused {what}: {error.get('Code', '?')} {error.get('Message', '')}".strip()
            ) from exc
        except BotoCoreError as exc:
            raise StorageError(f"S3 unreachable for {what}: {exc}{still_building('s3')}") from exc

    # -- keys -----------------------------------------------------------------------------------

    @staticmethod
    def _key(key: str) -> str:
        check_key(key)
        parts = key.split("/")
        if len(parts) < 3:
            raise ValueError(f"storage key {key!r} must start with <tenant>/<project>/<kind>")
        if parts[0].startswith("."):
            raise ValueError(f"storage key {key!r} must not start with '.'")
        if len(key.encode()) > 1024:
            raise ValueError(f"storage key {key!r} is longer than S3's 1024 bytes")
        return key

    @staticmethod
    def _seal_key(prefix: str) -> str:
        return f"{SEAL_ROOT}/{prefix}/{SEAL_NAME}"

    def _check_writable(self, key: str) -> None:
        client = self._s3()
        parts = key.split("/")
        for depth in range(3, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            with self._errors(f"checking the seal of {prefix}"):
                try:
                    client.head_object(Bucket=self.bucket, Key=self._seal_key(prefix))
                except ClientError as exc:
                    if _code(exc) in _MISSING:
                        continue
                    raise
            raise Sealed(f"{prefix} is sealed")

    # -- staging of the part being filled -------------------------------------------------------

    def _staging(self, key: str, upload_id: str) -> Path:
        if not upload_id or len(upload_id) > 256 or not upload_id.isprintable():
            raise ValueError("invalid upload id")
        digest = hashlib.sha256(f"{self.bucket}\0{key}\0{upload_id}".encode()).hexdigest()
        return Path(settings.TORUS_S3_STAGING_DIR) / digest[:40]

    def _staged(self, key: str, upload_id: str):
        """The upload's staging directory, locked against a concurrent append or finish."""
        return staging.locked(self._staging(key, upload_id), key=key)

    def _parts(self, key: str, upload_id: str) -> list[dict]:
        client = self._s3()
        parts: list[dict] = []
        with self._errors(f"listing the parts of {key}"):
            try:
                for page in client.get_paginator("list_parts").paginate(
                    Bucket=self.bucket, Key=key, UploadId=upload_id
                ):
                    parts.extend(page.get("Parts", []))
            except ClientError as exc:
                if _code(exc) in {"NoSuchUpload", "404"}:
                    raise StorageError(f"no upload {upload_id} for {key}") from None
                raise
        parts.sort(key=lambda part: part["PartNumber"])
        if [part["PartNumber"] for part in parts] != list(range(1, len(parts) + 1)):
            raise StorageError(f"upload {upload_id} of {key} has a gap in its parts")
        return parts

    def _send_part(self, key: str, upload_id: str, number: int, path: Path) -> dict:
        with self._errors(f"part {number} of {key}"), open(path, "rb") as body:
            answer = self._s3().upload_part(
                Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
            )
        return {"PartNumber": number, "ETag": answer["ETag"]}

    # -- uploads --------------------------------------------------------------------------------

    def begin_upload(self, *, key: str) -> str:
        key = self._key(key)
        self._check_writable(key)
        with self._errors(f"starting an upload of {key}"):
            answer = self._s3().create_multipart_upload(Bucket=self.bucket, Key=key)
        upload_id = answer["UploadId"]
        with self._staged(key, upload_id):
            pass
        return upload_id

    def upload_size(self, *, key: str, upload_id: str) -> int:
        key = self._key(key)
        with self._staged(key, upload_id) as directory:
            parts = self._parts(key, upload_id)
            staged = sum(staging.size_of(path) for _, path in staging.tails(directory, parts))
            return sum(part["Size"] for part in parts) + staged

    def append(self, *, key: str, upload_id: str, offset: int, chunks: Iterable[bytes]) -> int:
        key = self._key(key)
        self._check_writable(key)
        part_bytes = staging.part_bytes()
        with self._staged(key, upload_id) as directory:
            parts = self._parts(key, upload_id)
            tails = staging.tails(directory, parts)
            stored = sum(part["Size"] for part in parts)
            stored += sum(staging.size_of(path) for _, path in tails)
            if stored != offset:
                raise UploadOffsetMismatch(stored=stored, offset=offset)
            with staging.PartSender(partial(self._send_part, key, upload_id)) as sender:
                for number, path in tails[:-1]:  # full parts a crash left unsent
                    sender.send(number, path)
                number, tail = tails[-1] if tails else (len(parts) + 1, None)
                tail = tail or directory / f"tail-{number}"
                filled = staging.size_of(tail)
                out = staging.open_tail(key, tail)
                try:
                    # the chunks come from the client: their errors (a dropped connection)
                    # go up as they are, after what arrived before them is staged
                    for chunk in chunks:
                        view = memoryview(chunk)
                        while view or filled >= part_bytes:
                            if filled >= part_bytes:
                                # sent while the next part fills; one part in flight at most
                                out.close()
                                sender.send(number, tail)
                                number += 1
                                tail = directory / f"tail-{number}"
                                out = staging.open_tail(key, tail)
                                filled = 0
                            written = staging.write(key, out, view[: part_bytes - filled])
                            view = view[written:]
                            filled += written
                            stored += written
                finally:
                    out.close()
            return stored

    def finish_upload(self, *, key: str, upload_id: str) -> None:
        key = self._key(key)
        self._check_writable(key)
        client = self._s3()
        with self._staged(key, upload_id) as directory:
            parts = self._parts(key, upload_id)
            tails = [
                (n, path) for n, path in staging.tails(directory, parts) if path.stat().st_size
            ]
            if not parts and len(tails) <= 1:
                # Within one part: a plain PUT (also for an empty file, which a multipart
                # upload cannot hold), then the multipart upload is dropped.
                with self._errors(f"writing {key}"):
                    with open(tails[0][1], "rb") if tails else io.BytesIO() as body:
                        client.put_object(Bucket=self.bucket, Key=key, Body=body)
                    client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            else:
                done = [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in parts]
                done += [self._send_part(key, upload_id, n, path) for n, path in tails]
                with self._errors(f"completing {key}"):
                    client.complete_multipart_upload(
                        Bucket=self.bucket,
                        Key=key,
                        UploadId=upload_id,
                        MultipartUpload={"Parts": done},
                    )
            shutil.rmtree(directory, ignore_errors=True)

    def abort_upload(self, *, key: str, upload_id: str) -> None:
        key = self._key(key)
        with self._errors(f"aborting an upload of {key}"):
            try:
                self._s3().abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except ClientError as exc:
                if _code(exc) not in {"NoSuchUpload", "404"}:
                    raise
        shutil.rmtree(self._staging(key, upload_id), ignore_errors=True)

    def put_file(self, *, key: str, source: Path) -> None:
        key = self._key(key)
        self._check_writable(key)
        part_bytes = staging.part_bytes()
        transfer = TransferConfig(
            multipart_threshold=part_bytes, multipart_chunksize=part_bytes, max_concurrency=4
        )
        with self._errors(f"writing {key}"):
            self._s3().upload_file(str(source), self.bucket, key, Config=transfer)

    # -- reading --------------------------------------------------------------------------------

    def open(self, *, key: str) -> BinaryIO:
        key = self._key(key)
        with self._errors(f"reading {key}"):
            try:
                answer = self._s3().get_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                if _code(exc) in _MISSING:
                    raise FileNotFoundError(key) from None
                raise
        return io.BufferedReader(_ObjectReader(answer["Body"]), buffer_size=1024 * 1024)

    def stat(self, *, key: str) -> int | None:
        key = self._key(key)
        with self._errors(f"looking up {key}"):
            try:
                answer = self._s3().head_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                if _code(exc) in _MISSING:
                    return None
                raise
        return int(answer["ContentLength"])

    def _objects(self, prefix: str) -> Iterator[dict]:
        with self._errors(f"listing {prefix}"):
            pages = (
                self._s3()
                .get_paginator("list_objects_v2")
                .paginate(Bucket=self.bucket, Prefix=prefix)
            )
            for page in pages:
                yield from page.get("Contents", [])

    def list(self, *, prefix: str) -> Iterator[tuple[str, int]]:
        prefix = self._key(prefix)
        # S3 lists in UTF-8 byte order, which is code point order: already sorted by key
        for item in self._objects(prefix + "/"):
            yield item["Key"], int(item["Size"])

    # -- lifecycle ------------------------------------------------------------------------------

    def _abort_under(self, prefix: str) -> None:
        client = self._s3()
        with self._errors(f"listing the uploads under {prefix}"):
            uploads = []
            for page in client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=prefix + "/"
            ):
                uploads.extend(page.get("Uploads", []))
        for upload in uploads:
            self.abort_upload(key=upload["Key"], upload_id=upload["UploadId"])

    def _delete_keys(self, keys: Iterable[str]) -> None:
        client = self._s3()
        batch: list[str] = []

        def flush():
            with self._errors(f"deleting {len(batch)} objects"):
                answer = client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise StorageError(
                    f"S3 kept {len(answer['Errors'])} objects, e.g. {first.get('Key')}: "
                    f"{first.get('Code')} {first.get('Message', '')}"
                )
            batch.clear()

        for key in keys:
            batch.append(key)
            if len(batch) == 1000:  # DeleteObjects' limit
                flush()
        if batch:
            flush()

    def delete(self, *, prefix: str) -> None:
        prefix = self._key(prefix)
        self._abort_under(prefix)
        self._delete_keys([item["Key"] for item in self._objects(prefix + "/")])
        self._delete_keys([prefix])  # a file's own key (no error when there is none)
        seal_prefix = f"{SEAL_ROOT}/{prefix}/"
        self._delete_keys([item["Key"] for item in self._objects(seal_prefix)])

    def seal(self, *, prefix: str) -> None:
        prefix = self._key(prefix)
        with self._errors(f"sealing {prefix}"):
            self._s3().put_object(Bucket=self.bucket, Key=self._seal_key(prefix), Body=b"")
        self._abort_under(prefix)

    # -- where the bytes are --------------------------------------------------------------------

    def local_path(self, *, key: str) -> Path | None:
        self._key(key)
        return None

    def download_url(self, *, key: str, expires_s: int) -> str | None:
        key = self._key(key)
        if not 1 <= expires_s <= MAX_URL_SECONDS:
            raise ValueError(f"expires_s must be between 1 and {MAX_URL_SECONDS}")
        self._s3()
        with self._errors(f"signing a URL for {key}"):
            return self._client(public=True).generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": key},
                ExpiresIn=expires_s,
            )
