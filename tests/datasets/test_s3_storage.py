"""The S3 backend against the real S3-compatible server (platform/services/components/s3,
versitygw): multipart round trips, resume after a dropped connection, listing, deletion,
sealing, presigned URLs, and keys refused before any request leaves the process."""

import hashlib
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import threading
import uuid
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings

from apps.datasets.storage.base import Sealed, StorageError, UploadOffsetMismatch
from apps.datasets.storage.s3 import S3Storage

PART = 5 * 1024 * 1024  # S3's smallest part; the tests' part size


@pytest.fixture
def s3_settings(settings, tmp_path):
    """A bucket of the tests' own (named after the test database), parts of 5 MiB, staging
    in a temporary directory."""
    database = os.environ.get("TORUS_TEST_DATABASE_NAME", "test_torus")
    settings.TORUS_S3_BUCKET = database.replace("_", "-")
    settings.TORUS_S3_PART_BYTES = PART
    settings.TORUS_S3_STAGING_DIR = str(tmp_path / "staging")
    return settings


@pytest.fixture
def s3(s3_settings):
    """(storage, a fresh prefix), emptied afterwards."""
    storage = S3Storage()
    prefix = f"t{uuid.uuid4().hex[:12]}/proj/datasets"
    yield storage, prefix
    storage.delete(prefix=prefix)
    assert list(storage.list(prefix=prefix)) == []


def read_all(storage, key: str) -> bytes:
    with storage.open(key=key) as stream:
        out = []
        while chunk := stream.read(300_001):
            out.append(chunk)
    return b"".join(out)


def pieces(data: bytes, size: int):
    for start in range(0, len(data), size):
        yield data[start : start + size]


def etag(storage, key: str) -> str:
    return storage._s3().head_object(Bucket=storage.bucket, Key=key)["ETag"].strip('"')


def test_a_file_of_three_parts_round_trips_through_a_multipart_upload(s3):
    storage, prefix = s3
    key = f"{prefix}/d1/v1/train/big.bin"
    data = os.urandom(2 * PART + 123_457)
    upload_id = storage.begin_upload(key=key)
    staged_peak = 0

    def chunks():
        nonlocal staged_peak
        for chunk in pieces(data, 777_777):
            yield chunk
            staged = storage._staging(key, upload_id)
            staged_peak = max(staged_peak, sum(p.stat().st_size for p in staged.glob("tail-*")))

    assert storage.append(key=key, upload_id=upload_id, offset=0, chunks=chunks()) == len(data)
    assert storage.upload_size(key=key, upload_id=upload_id) == len(data)
    assert storage.stat(key=key) is None  # nothing visible before finish
    storage.finish_upload(key=key, upload_id=upload_id)

    # on local disk: the part being sent and the one filling, never more
    assert 0 < staged_peak <= 2 * PART
    assert not storage._staging(key, upload_id).exists()
    assert storage.stat(key=key) == len(data)
    assert etag(storage, key).endswith("-3")  # S3 assembled it from three parts
    assert hashlib.sha256(read_all(storage, key)).digest() == hashlib.sha256(data).digest()


def test_small_and_empty_files_are_single_objects(s3):
    storage, prefix = s3
    for name, data in [("small.txt", b"hello\n"), ("empty", b"")]:
        key = f"{prefix}/d1/v1/{name}"
        upload_id = storage.begin_upload(key=key)
        storage.append(key=key, upload_id=upload_id, offset=0, chunks=[data])
        storage.finish_upload(key=key, upload_id=upload_id)
        assert storage.stat(key=key) == len(data)
        assert read_all(storage, key) == data


class Dropped(ConnectionError):
    pass


def test_an_upload_resumes_after_a_dropped_connection_in_a_new_process(s3):
    storage, prefix = s3
    key = f"{prefix}/d1/v1/resumed.bin"
    data = os.urandom(2 * PART + 4_321)
    cut = PART + 1_000_000  # one part sent, part of the next one staged
    upload_id = storage.begin_upload(key=key)

    def until_the_connection_drops():
        yield from pieces(data[:cut], 65_536)
        raise Dropped("client went away")

    with pytest.raises(Dropped):
        storage.append(key=key, upload_id=upload_id, offset=0, chunks=until_the_connection_drops())

    again = S3Storage()  # another process: what it knows comes from S3 and the staging dir
    assert again.upload_size(key=key, upload_id=upload_id) == cut
    with pytest.raises(UploadOffsetMismatch) as refused:
        again.append(key=key, upload_id=upload_id, offset=0, chunks=[data])
    assert refused.value.stored == cut
    assert again.append(key=key, upload_id=upload_id, offset=cut, chunks=[data[cut:]]) == len(data)
    again.finish_upload(key=key, upload_id=upload_id)
    assert read_all(again, key) == data


def test_a_part_sent_just_before_a_crash_is_not_counted_twice(s3):
    storage, prefix = s3
    key = f"{prefix}/d1/v1/crash.bin"
    data = os.urandom(PART + 10)
    upload_id = storage.begin_upload(key=key)
    storage.append(key=key, upload_id=upload_id, offset=0, chunks=[data[: PART - 1]])
    storage.append(key=key, upload_id=upload_id, offset=PART - 1, chunks=[data[PART - 1 : PART]])
    # the tail reached a part and was sent; now as if the process died between sending a
    # part and removing its tail file: put the tail back
    tail = storage._staging(key, upload_id) / "tail-1"
    tail.write_bytes(data[:PART])
    assert storage.upload_size(key=key, upload_id=upload_id) == PART
    assert not tail.exists()
    storage.append(key=key, upload_id=upload_id, offset=PART, chunks=[data[PART:]])
    storage.finish_upload(key=key, upload_id=upload_id)
    assert read_all(storage, key) == data


def test_staged_parts_belong_to_the_staging_directorys_owner(s3, settings):
    """Run as root (the worker), the staged files go to the platform account that owns the
    staging directory, so the web process (as that account) can continue the upload."""
    storage, prefix = s3
    torus = pwd.getpwnam("torus")
    staging = Path(settings.TORUS_S3_STAGING_DIR)
    staging.mkdir(mode=0o700)
    os.chown(staging, torus.pw_uid, torus.pw_gid)
    key = f"{prefix}/d1/v1/owned.bin"
    upload_id = storage.begin_upload(key=key)
    storage.append(key=key, upload_id=upload_id, offset=0, chunks=[b"x" * 1000])
    made = storage._staging(key, upload_id)
    for path in [made, made / "lock", made / "tail-1"]:
        assert (path.stat().st_uid, path.stat().st_gid) == (torus.pw_uid, torus.pw_gid), path
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    storage.abort_upload(key=key, upload_id=upload_id)


def test_full_parts_a_crash_left_unsent_are_sent_on_resume(s3):
    storage, prefix = s3
    key = f"{prefix}/d1/v1/pending.bin"
    data = os.urandom(2 * PART + 20)
    upload_id = storage.begin_upload(key=key)
    storage.append(key=key, upload_id=upload_id, offset=0, chunks=[data[: PART + 10]])
    # as if part 2 filled and part 3 began, and the process died before part 2 was sent
    staged = storage._staging(key, upload_id)
    (staged / "tail-2").write_bytes(data[PART : 2 * PART])
    (staged / "tail-3").write_bytes(data[2 * PART :])
    assert storage.upload_size(key=key, upload_id=upload_id) == len(data)
    more = b"tail end"
    storage.append(key=key, upload_id=upload_id, offset=len(data), chunks=[more])
    storage.finish_upload(key=key, upload_id=upload_id)
    assert etag(storage, key).endswith("-3")
    assert read_all(storage, key) == data + more


def test_an_aborted_upload_leaves_nothing(s3):
    storage, prefix = s3
    key = f"{prefix}/d1/v1/aborted.bin"
    upload_id = storage.begin_upload(key=key)
    storage.append(key=key, upload_id=upload_id, offset=0, chunks=[os.urandom(PART + 5)])
    storage.abort_upload(key=key, upload_id=upload_id)
    storage.abort_upload(key=key, upload_id=upload_id)  # twice is fine
    assert storage.stat(key=key) is None
    assert not storage._staging(key, upload_id).exists()
    with pytest.raises(StorageError, match="no upload"):
        storage.upload_size(key=key, upload_id=upload_id)


def test_listing_is_sorted_per_prefix_and_skips_unfinished_uploads(s3, tmp_path):
    storage, prefix = s3
    source = tmp_path / "f.bin"
    source.write_bytes(b"x" * 1000)
    for path in ["v1/b.txt", "v1/a/z.txt", "v1/a/b.txt", "v10/other.txt", "v2/c.txt"]:
        storage.put_file(key=f"{prefix}/d1/{path}", source=source)
    storage.begin_upload(key=f"{prefix}/d1/v1/pending.bin")

    assert list(storage.list(prefix=f"{prefix}/d1/v1")) == [
        (f"{prefix}/d1/v1/a/b.txt", 1000),
        (f"{prefix}/d1/v1/a/z.txt", 1000),
        (f"{prefix}/d1/v1/b.txt", 1000),
    ]
    assert [k for k, _ in storage.list(prefix=f"{prefix}/d1")][-1] == f"{prefix}/d1/v2/c.txt"
    assert list(storage.list(prefix=f"{prefix}/d9")) == []


def test_put_file_streams_a_large_file_in_parts(s3, tmp_path):
    storage, prefix = s3
    source = tmp_path / "big.bin"
    data = os.urandom(2 * PART + 1)
    source.write_bytes(data)
    key = f"{prefix}/d1/v1/put.bin"
    storage.put_file(key=key, source=source)
    assert storage.stat(key=key) == len(data)
    assert etag(storage, key).endswith("-3")
    assert read_all(storage, key) == data


def test_delete_removes_files_and_unfinished_uploads_under_the_prefix_only(s3, tmp_path):
    storage, prefix = s3
    source = tmp_path / "f"
    source.write_bytes(b"data")
    storage.put_file(key=f"{prefix}/d1/v1/a", source=source)
    storage.put_file(key=f"{prefix}/d1/v1/sub/b", source=source)
    storage.put_file(key=f"{prefix}/d1/v10/kept", source=source)
    pending = storage.begin_upload(key=f"{prefix}/d1/v1/pending")

    storage.delete(prefix=f"{prefix}/d1/v1")
    assert list(storage.list(prefix=f"{prefix}/d1")) == [(f"{prefix}/d1/v10/kept", 4)]
    uploads = storage._s3().list_multipart_uploads(Bucket=storage.bucket, Prefix=prefix)
    assert uploads.get("Uploads", []) == []
    with pytest.raises(StorageError, match="no upload"):
        storage.upload_size(key=f"{prefix}/d1/v1/pending", upload_id=pending)
    storage.delete(prefix=f"{prefix}/d1/v1")  # nothing left: fine
    storage.delete(prefix=f"{prefix}/d1/v10/kept")  # one file, by its own key
    assert list(storage.list(prefix=f"{prefix}/d1")) == []


def test_a_sealed_prefix_is_read_only_until_deleted(s3, tmp_path):
    storage, prefix = s3
    source = tmp_path / "f"
    source.write_bytes(b"sealed")
    key = f"{prefix}/d1/v1/a.txt"
    storage.put_file(key=key, source=source)
    pending = storage.begin_upload(key=f"{prefix}/d1/v1/late.txt")

    storage.seal(prefix=f"{prefix}/d1/v1")
    with pytest.raises(Sealed):
        storage.put_file(key=key, source=source)
    with pytest.raises(Sealed):
        storage.begin_upload(key=f"{prefix}/d1/v1/deep/new.txt")
    with pytest.raises((Sealed, StorageError)):  # sealing aborted the unfinished upload
        storage.finish_upload(key=f"{prefix}/d1/v1/late.txt", upload_id=pending)
    assert storage.stat(key=f"{prefix}/d1/v1/late.txt") is None
    assert read_all(storage, key) == b"sealed"
    storage.put_file(key=f"{prefix}/d1/v2/a.txt", source=source)  # a sibling is not sealed

    storage.delete(prefix=f"{prefix}/d1/v1")
    assert storage.stat(key=key) is None
    storage.put_file(key=key, source=source)  # the seal went with the files
    assert storage.stat(key=key) == 6


def test_a_presigned_url_serves_the_file_to_plain_httpx(s3, tmp_path):
    storage, prefix = s3
    data = os.urandom(300_000)
    source = tmp_path / "f"
    source.write_bytes(data)
    key = f"{prefix}/d1/v1/dir/weights.bin"
    storage.put_file(key=key, source=source)

    url = storage.download_url(key=key, expires_s=300)
    assert url.startswith(django_settings.TORUS_S3_ENDPOINT_URL)
    response = httpx.get(url)
    assert response.status_code == 200 and response.content == data
    ranged = httpx.get(url, headers={"Range": "bytes=10-19"})
    assert ranged.status_code == 206 and ranged.content == data[10:20]

    # the signature covers the key and the keys alone open the store
    other = url.replace("weights.bin", "weights.bio")
    assert httpx.get(other).status_code == 403
    assert httpx.get(url.split("?", 1)[0]).status_code == 403
    with pytest.raises(ValueError):
        storage.download_url(key=key, expires_s=8 * 24 * 3600)


# A job: its own uid, no groups, the system Python (jobs do not run the platform's venv).
JOB = ["setpriv", "--reuid=250000", "--regid=350000", "--clear-groups", "--"]
FETCH = r"""
import hashlib, json, sys, urllib.error, urllib.request
out = []
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            out.append([answer.status, hashlib.sha256(answer.read()).hexdigest()])
    except urllib.error.HTTPError as exc:
        out.append([exc.code, None])
print(json.dumps(out))
"""


def test_a_job_reads_through_a_presigned_url_and_nothing_else(s3, tmp_path):
    """The gateway's port is open to job uids (the stager fetches S3 versions with presigned
    URLs); every unsigned or altered request is refused."""
    storage, prefix = s3
    data = os.urandom(100_000)
    source = tmp_path / "f"
    source.write_bytes(data)
    key = f"{prefix}/d1/v1/x.bin"
    storage.put_file(key=key, source=source)
    storage.put_file(key=f"{prefix}/d1/v1/other.bin", source=source)
    url = storage.download_url(key=key, expires_s=60)
    endpoint = django_settings.TORUS_S3_ENDPOINT_URL
    urls = [
        url,
        url.split("?", 1)[0],  # the object without a signature
        url.replace("x.bin", "other.bin"),  # the signature of another object
        f"{endpoint}/{storage.bucket}?list-type=2",  # listing the bucket
        f"{endpoint}/",  # listing the buckets
    ]
    python = shutil.which("python3", path="/usr/bin:/bin")
    done = subprocess.run(
        [*JOB, python, "-c", FETCH, *urls],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        check=True,
    )
    answers = json.loads(done.stdout)
    assert answers[0] == [200, hashlib.sha256(data).hexdigest()]
    assert [status for status, _ in answers[1:]] == [403, 403, 403, 403]


def test_a_missing_object_is_not_found(s3):
    storage, prefix = s3
    with pytest.raises(FileNotFoundError):
        storage.open(key=f"{prefix}/d1/v1/nothing")
    assert storage.stat(key=f"{prefix}/d1/v1/nothing") is None


@pytest.fixture
def listener(settings):
    """The endpoint points at a TCP listener that counts connections: a key refused by the
    backend must not cause a single one."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    settings.TORUS_S3_ENDPOINT_URL = f"http://127.0.0.1:{server.getsockname()[1]}"
    yield accepted
    server.close()
    thread.join(timeout=5)


BAD_KEYS = [
    "../etc/passwd",
    "t/p/datasets/../../../other/p/datasets/x",
    "/t/p/datasets/x",
    "t/p/datasets//x",
    "t/p/datasets/./x",
    "t\\p\\datasets\\x",
    "t/p/datasets/x\x00y",
    "t/p/datasets/x\ny",
    ".torus-sealed/t/p/datasets/v1/.seal",
    "t/p",
    "",
    "t/p/datasets/" + "x" * 1100,
]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_bad_key_is_refused_before_anything_reaches_s3(listener, key, tmp_path):
    storage = S3Storage()
    calls = [
        lambda: storage.begin_upload(key=key),
        lambda: storage.upload_size(key=key, upload_id="x"),
        lambda: storage.append(key=key, upload_id="x", offset=0, chunks=[b"x"]),
        lambda: storage.finish_upload(key=key, upload_id="x"),
        lambda: storage.abort_upload(key=key, upload_id="x"),
        lambda: storage.put_file(key=key, source=tmp_path / "none"),
        lambda: storage.open(key=key),
        lambda: storage.stat(key=key),
        lambda: list(storage.list(prefix=key)),
        lambda: storage.delete(prefix=key),
        lambda: storage.seal(prefix=key),
        lambda: storage.local_path(key=key),
        lambda: storage.download_url(key=key, expires_s=60),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()
    assert listener == []


def test_the_server_refuses_wrong_keys(s3, settings):
    _, prefix = s3
    secret = settings.TORUS_S3_SECRET_KEY
    settings.TORUS_S3_SECRET_KEY = "0" * 32
    try:
        with pytest.raises(StorageError, match="S3 refused"):
            S3Storage().stat(key=f"{prefix}/d1/v1/x")
    finally:
        settings.TORUS_S3_SECRET_KEY = secret
