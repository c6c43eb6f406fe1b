"""Uploads and downloads through the real ASGI server (uvicorn): the body streams to storage
in bounded pieces (no spooling, bounded memory), a dropped connection keeps what arrived and
the upload resumes from the offset the server tells; downloads stream too."""

import hashlib
import os
import socket
import time
from urllib.parse import urlparse

import httpx
import pytest

from apps.datasets.tasks import project_storage_ensure
from apps.tenancy.models import Role
from tests.datasets.conftest import sha

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(acme, asgi_server):
    project_storage_ensure(str(acme.project.pk))
    client = httpx.Client(
        base_url=asgi_server.url + "/api/v1",
        headers={"Authorization": f"Bearer {acme.tokens[Role.MEMBER]}"},
        timeout=60,
    )
    dataset = client.post("/datasets/", json={"project": str(acme.project.pk), "name": "d"})
    assert dataset.status_code == 201, dataset.text
    dataset_id = dataset.json()["id"]
    assert client.post(f"/datasets/{dataset_id}/versions/", json={}).status_code == 201
    yield client, f"/datasets/{dataset_id}/versions/1", asgi_server.url
    client.close()


def _rss_peak_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _reset_peak() -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := current RSS
    return _rss_peak_kib()


def _pattern(size: int, block: int = 1 << 20):
    """`size` deterministic bytes, produced a block at a time (never all in memory)."""
    seed = hashlib.sha256(b"seed").digest() * (block // 32)
    sent = 0
    while sent < size:
        piece = seed[: min(block, size - sent)]
        sent += len(piece)
        yield piece


def test_a_large_body_streams_to_storage_with_bounded_memory(api):
    client, version, _ = api
    size = 256 * 1024 * 1024
    expected = hashlib.sha256()
    for piece in _pattern(size):
        expected.update(piece)
    before = _reset_peak()
    response = client.put(
        f"{version}/upload/",
        params={"path": "big.bin", "offset": 0, "total": size},
        content=_pattern(size),
        headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
    )
    grown_mib = (_rss_peak_kib() - before) / 1024
    assert response.status_code == 200, response.text
    assert response.json()["file"] == {
        "path": "big.bin",
        "size": size,
        "sha256": expected.hexdigest(),
    }
    # server and client share this process: a buffered body would add 256 MiB
    assert grown_mib < 64, f"the process grew {grown_mib:.0f} MiB while uploading 256 MiB"

    # downloads stream too (Django would read a synchronous iterator whole under ASGI)
    assert client.post(f"{version}/commit/").status_code == 200
    for url, params in ((f"{version}/download/", {"path": "big.bin"}), (f"{version}/archive/", {})):
        before = _reset_peak()
        got, received = hashlib.sha256(), 0
        with client.stream("GET", url, params=params) as response:
            assert response.status_code == 200
            for chunk in response.iter_raw(1 << 20):
                got.update(chunk)
                received += len(chunk)
        grown_mib = (_rss_peak_kib() - before) / 1024
        assert received >= size
        assert grown_mib < 64, f"the process grew {grown_mib:.0f} MiB while serving {url}"
    assert got.hexdigest() != expected.hexdigest()  # the tar: headers around the bytes


def test_a_dropped_connection_keeps_what_arrived_and_the_upload_resumes(api):
    client, version, base = api
    data = os.urandom(8 * 1024 * 1024)
    url = urlparse(base)
    path = f"/api/v1{version}/upload/?path=resumed.bin&offset=0&total={len(data)}"
    token = client.headers["Authorization"]
    with socket.create_connection((url.hostname, url.port)) as raw:
        raw.sendall(
            (
                f"PUT {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: {token}\r\n"
                f"Content-Type: application/octet-stream\r\nContent-Length: {len(data)}\r\n\r\n"
            ).encode()
        )
        raw.sendall(data[: 3 * 1024 * 1024])
    # the server tells what it kept (once it noticed the client went away)
    for _ in range(200):
        state = client.get(f"{version}/upload/", params={"path": "resumed.bin"}).json()
        if state["offset"] == 3 * 1024 * 1024:
            break
        time.sleep(0.05)
    assert state == {
        "path": "resumed.bin",
        "offset": 3 * 1024 * 1024,
        "complete": False,
        "file": None,
    }
    assert client.post(f"{version}/commit/").json()["error"]["code"] == "uploads_pending"

    offset = state["offset"]
    rest = client.put(
        f"{version}/upload/",
        params={"path": "resumed.bin", "offset": offset, "total": len(data)},
        content=data[offset:],
        headers={"Content-Type": "application/octet-stream"},
    )
    assert rest.status_code == 200, rest.text
    assert rest.json()["file"]["sha256"] == sha(data)
    assert client.post(f"{version}/commit/").json()["state"] == "committed"

    got = client.get(f"{version}/download/", params={"path": "resumed.bin"})
    assert got.status_code == 200 and got.content == data
    part = client.get(
        f"{version}/download/", params={"path": "resumed.bin"}, headers={"Range": "bytes=5-9"}
    )
    assert part.status_code == 206 and part.content == data[5:10]
    with client.stream("GET", f"{version}/archive/") as archive:
        body = b"".join(archive.iter_bytes())
    assert len(body) == int(archive.headers["Content-Length"])


def test_only_the_upload_route_escapes_the_body_size_limit(api):
    client, version, _ = api
    big = b"x" * (2 * 1024 * 1024)
    assert client.post(f"{version}/commit/", content=big).status_code == 413
    ok = client.put(
        f"{version}/upload/",
        params={"path": "two.bin", "offset": 0, "total": len(big)},
        content=big,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert ok.status_code == 200 and ok.json()["complete"]
