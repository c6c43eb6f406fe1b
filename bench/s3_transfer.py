"""A dataset file in S3 through Torus, beside the same bytes sent to the same S3 server with
boto3 alone, with the web process's peak memory during the upload.

- Torus: `uvicorn config.asgi:application` (as `make up` runs it) and the S3 gateway of
  `platform/services/up s3`; one file of --size-mb (random bytes) uploaded in ONE streamed
  `PUT .../upload/` into a version opened with `storage_kind: s3` (the server stages at most
  one multipart part on local disk, sends parts as they fill and hashes on the way), then
  `GET .../download/` (a 302 to a presigned URL, followed, the bytes from S3).
- boto3 peer: `upload_file` / `download_file` of the same file to the same bucket with
  boto3's defaults (8 MiB parts, 10 threads), and `put_object` / `get_object` streamed on one
  connection (the single-stream equivalent of Torus's one PUT).

Every figure is the median of --runs, with the source file in the page cache; downloaded
bytes are written to a file on the same filesystem. Peak RSS is the web process's VmHWM, reset
before each upload. Needs root and the services. The last stdout line is {"benchmark":
"s3_transfer", "metrics", "peers", "ratios"}.
"""

import hashlib
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "7")  # its web server's Redis databases: 7-9
import _common as common
import _transfer as transfer
import httpx

from scripts import devstack

NAME = "s3_transfer"
PIECE = transfer.PIECE


def _timed(func) -> float:
    started = time.perf_counter()
    func()
    return time.perf_counter() - started


def _save(response: httpx.Response, target: Path) -> None:
    if response.status_code != 200:
        response.read()
        raise RuntimeError(f"GET: {response.status_code} {response.text[:300]}")
    with target.open("wb") as handle:
        for chunk in response.iter_raw(PIECE):
            handle.write(chunk)


def run(args, logdir: Path) -> dict:
    common.django_setup()
    from django.conf import settings

    from apps.datasets.storage.s3 import S3Storage

    common.manage("migrate", "--verbosity", "0")
    bench = common.ensure_tenant(
        slug="bench", project_slug="s3", owner="bench-owner", token_name="bench-s3"
    )
    project = bench["project"]
    storage = S3Storage()
    s3 = storage._s3()  # the same client settings as the backend; the bucket exists
    bucket = settings.TORUS_S3_BUCKET
    peer_prefix = f"bench/s3/peer-{int(time.time())}"

    work = Path(settings.DATA_DIR) / "bench-s3"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    size = args.size_mb * 1024 * 1024
    source = work / "source.bin"
    got = work / "got.bin"
    common.log(NAME, f"making {args.size_mb} MiB of random bytes")
    expected = transfer.make_source(source, size)
    for _ in transfer.pieces(source):  # into the page cache
        pass

    web, port = devstack.start_web(logdir, name="web")
    headers = {"Authorization": f"Bearer {bench['token']}"}
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", headers=headers, timeout=600)
    plain = httpx.Client(timeout=600)
    name = f"s3-{int(time.time())}"
    dataset = api.post("/datasets/", json={"project": str(project.pk), "name": name}).json()
    version = api.post(f"/datasets/{dataset['id']}/versions/", json={"storage_kind": "s3"}).json()
    assert version["storage_kind"] == "s3", version
    base = f"/datasets/{dataset['id']}/versions/{version['number']}"

    runs: dict[str, list[float]] = {
        key: [] for key in ("torus_up", "torus_down", "tm_up", "tm_down", "one_up", "one_down")
    }
    peaks = []
    baseline_rss = transfer.rss_kib(web.popen.pid, "VmRSS")
    for number in range(args.runs):  # interleaved, so every path sees the same machine
        key = f"{peer_prefix}/tm-{number}.bin"
        runs["tm_up"].append(_timed(lambda k=key: s3.upload_file(str(source), bucket, k)))
        runs["tm_down"].append(_timed(lambda k=key: s3.download_file(bucket, k, str(got))))
        got.unlink()
        key = f"{peer_prefix}/one-{number}.bin"

        def put_one(k=key):
            with source.open("rb") as body:
                s3.put_object(Bucket=bucket, Key=k, Body=body)

        def get_one(k=key):
            body = s3.get_object(Bucket=bucket, Key=k)["Body"]
            with got.open("wb") as handle:
                for chunk in body.iter_chunks(PIECE):
                    handle.write(chunk)

        runs["one_up"].append(_timed(put_one))
        runs["one_down"].append(_timed(get_one))
        got.unlink()

        Path(f"/proc/{web.popen.pid}/clear_refs").write_text("5")
        path = f"run-{number}.bin"

        def torus_put(p=path):
            response = api.put(
                f"{base}/upload/",
                params={"path": p, "offset": 0, "total": size},
                content=transfer.pieces(source),
                headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
            )
            if response.status_code != 200 or not response.json()["complete"]:
                raise RuntimeError(f"PUT: {response.status_code} {response.text[:300]}")
            assert response.json()["file"]["sha256"] == expected

        def torus_get(p=path):
            redirect = api.get(f"{base}/download/", params={"path": p})
            assert redirect.status_code == 302, redirect.text[:300]
            with plain.stream("GET", redirect.headers["Location"]) as response:
                _save(response, got)

        runs["torus_up"].append(_timed(torus_put))
        peaks.append(transfer.rss_kib(web.popen.pid, "VmHWM"))
        runs["torus_down"].append(_timed(torus_get))
        with got.open("rb") as handle:
            assert hashlib.file_digest(handle, "sha256").hexdigest() == expected
        got.unlink()
        common.log(
            NAME,
            f"run {number}: torus up {runs['torus_up'][-1]:.2f}s down "
            f"{runs['torus_down'][-1]:.2f}s; boto3 upload_file {runs['tm_up'][-1]:.2f}s "
            f"download_file {runs['tm_down'][-1]:.2f}s; one stream up {runs['one_up'][-1]:.2f}s "
            f"down {runs['one_down'][-1]:.2f}s; web peak RSS {peaks[-1] / 1024:.0f} MiB",
        )

    mib = size / 2**20
    med = {key: statistics.median(values) for key, values in runs.items()}

    def rate(seconds: float) -> float:
        return round(mib / seconds, 1)

    metrics = {
        "bytes": size,
        "runs": args.runs,
        "part_bytes": settings.TORUS_S3_PART_BYTES,
        "torus_upload_mib_s": rate(med["torus_up"]),
        "torus_download_mib_s": rate(med["torus_down"]),
        "web_rss_before_upload_mib": round(baseline_rss / 1024, 1),
        "web_peak_rss_during_upload_mib": round(max(peaks) / 1024, 1),
        "torus_upload_seconds": [round(s, 3) for s in runs["torus_up"]],
        "torus_download_seconds": [round(s, 3) for s in runs["torus_down"]],
        "sha256_checked": True,
        "environment": common.environment(),
        "server": "uvicorn config.asgi:application, 1 worker, as root; versitygw v1.8.0",
    }
    peers = {
        "boto3_upload_file_mib_s": rate(med["tm_up"]),
        "boto3_download_file_mib_s": rate(med["tm_down"]),
        "boto3_put_object_one_stream_mib_s": rate(med["one_up"]),
        "boto3_get_object_one_stream_mib_s": rate(med["one_down"]),
        "boto3": "the same bucket and gateway; upload_file/download_file with boto3's "
        "defaults (8 MiB parts, 10 threads); put/get_object on one connection",
    }
    ratios = {
        "upload_vs_boto3_upload_file": round(med["tm_up"] / med["torus_up"], 2),
        "download_vs_boto3_download_file": round(med["tm_down"] / med["torus_down"], 2),
        "upload_vs_boto3_one_stream": round(med["one_up"] / med["torus_up"], 2),
        "download_vs_boto3_one_stream": round(med["one_down"] / med["torus_down"], 2),
    }
    api.close()
    plain.close()
    web.stop()
    shutil.rmtree(work, ignore_errors=True)
    _cleanup(name, storage, bucket, peer_prefix)
    return {"benchmark": NAME, "metrics": metrics, "peers": peers, "ratios": ratios}


def _cleanup(name: str, storage, bucket: str, peer_prefix: str) -> None:
    """The bench's dataset and objects go (the tenant and project stay for next time)."""
    from apps.datasets.models import Dataset

    for dataset in Dataset.objects.filter(name=name):
        for version in dataset.versions.all():
            storage.delete(prefix=version.storage_prefix)
        dataset.delete()
    storage.delete(prefix=peer_prefix)


if __name__ == "__main__":
    sys.exit(transfer.main(NAME, __doc__, run, size_mb=1024, quick_mb=128))
