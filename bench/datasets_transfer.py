"""Dataset upload and download through the real web server, beside plain file copy and plain
HTTP of the same bytes, with the web process's peak memory during a multi-GB upload.

- Torus: `uvicorn config.asgi:application` (as `make up` runs it), one file of --size-mb
  (random bytes) uploaded in ONE streamed `PUT .../upload/` (the server writes it to the
  tenant's tree and computes its sha256 on the way), then downloaded with `GET .../download/`;
  also the SDK's `upload_directory` (256 MiB PUTs, then commit) and the version as a tar.
- Plain HTTP peer: the same uvicorn serving a bare ASGI app (bench/_plain_asgi.py: the body
  written to a file as it arrives, the file streamed back; no framework, no auth, no hash),
  driven by the same httpx client code; and the same app computing the body's sha256 on the
  way (what Torus must do for the manifest), to tell the platform's overhead from hashing.
- cp peer: `cp` of the same file on the same filesystem.

Every figure is the median of --runs, measured with the source file in the page cache; the
downloaded bytes are written to a file on the same filesystem. Peak RSS is the web process's
VmHWM, reset (/proc/<pid>/clear_refs) before the upload. Needs root (the project's tree) and
the services. The last stdout line is {"benchmark": "datasets_transfer", "metrics", "peers",
"ratios"}.
"""

# ruff: noqa: S603, S607  (fixed argv of cp and this venv's uvicorn)

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "7")  # its web server's Redis databases: 7-9
import _common as common
import _transfer as transfer
import httpx

from scripts import devstack

NAME = "datasets_transfer"
PIECE = transfer.PIECE


def _put(client: httpx.Client, url: str, source: Path, *, params=None) -> float:
    size = source.stat().st_size
    started = time.perf_counter()
    response = client.put(
        url,
        params=params,
        content=transfer.pieces(source),
        headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
    )
    took = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"PUT {url}: {response.status_code} {response.text[:300]}")
    return took


def _get(client: httpx.Client, url: str, target: Path, *, params=None) -> float:
    started = time.perf_counter()
    with client.stream("GET", url, params=params) as response:
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"GET {url}: {response.status_code} {response.text[:300]}")
        with target.open("wb") as handle:
            for chunk in response.iter_raw(PIECE):
                handle.write(chunk)
    took = time.perf_counter() - started
    target.unlink()
    return took


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _median(values: list[float]) -> float:
    return statistics.median(values)


def run(args, logdir: Path) -> dict:
    common.django_setup()
    from django.conf import settings

    from apps.datasets.tasks import project_storage_ensure

    common.manage("migrate", "--verbosity", "0")
    bench = common.ensure_tenant(
        slug="bench", project_slug="transfer", owner="bench-owner", token_name="bench-transfer"
    )
    project = bench["project"]
    project_storage_ensure(str(project.pk))
    work = Path(settings.DATA_DIR) / "bench-transfer"
    shutil.rmtree(work, ignore_errors=True)
    (work / "plain").mkdir(parents=True)
    size = args.size_mb * 1024 * 1024
    source = work / "source.bin"
    common.log(NAME, f"making {args.size_mb} MiB of random bytes")
    expected = transfer.make_source(source, size)
    subprocess.run(["cat", str(source)], stdout=subprocess.DEVNULL, check=True)  # page cache

    web, port = devstack.start_web(logdir, name="web")
    env = {**common.ENV, "PLAIN_ROOT": str(work / "plain")}
    plain_argv = [str(common.BIN / "uvicorn"), "_plain_asgi:app", "--app-dir", "bench"]
    plain_port = devstack.free_port()
    plain_argv += ["--host", "127.0.0.1", "--port", str(plain_port), "--no-access-log"]
    devstack.Proc("plain", plain_argv, logdir, env=env)
    hashing_port = devstack.free_port()
    hashing_argv = [*plain_argv[:4], "--host", "127.0.0.1", "--port", str(hashing_port)]
    devstack.Proc("plain-sha256", hashing_argv, logdir, env={**env, "PLAIN_SHA256": "1"})
    time.sleep(2)

    headers = {"Authorization": f"Bearer {bench['token']}"}
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", headers=headers, timeout=600)
    peer = httpx.Client(base_url=f"http://127.0.0.1:{plain_port}", timeout=600)
    peer_hashing = httpx.Client(base_url=f"http://127.0.0.1:{hashing_port}", timeout=600)
    name = f"transfer-{int(time.time())}"
    try:
        return _measure(args, api, peer, peer_hashing, web, port, work, source, expected, name)
    finally:
        api.close()
        peer.close()
        peer_hashing.close()
        shutil.rmtree(work, ignore_errors=True)
        _cleanup(name)


def _measure(args, api, peer, peer_hashing, web, port, work, source, expected, name) -> dict:
    from apps.tenancy.models import Project

    project = Project.objects.get(tenant__slug="bench", slug="transfer")
    token = api.headers["Authorization"].split()[-1]
    size = source.stat().st_size
    dataset = api.post("/datasets/", json={"project": str(project.pk), "name": name}).json()
    version = api.post(f"/datasets/{dataset['id']}/versions/", json={}).json()
    base = f"/datasets/{dataset['id']}/versions/{version['number']}"

    cp_s, plain_up, plain_down, torus_up, torus_down, peaks = [], [], [], [], [], []
    hashing_up, retries = [], 0
    baseline_rss = transfer.rss_kib(web.popen.pid, "VmRSS")
    for number in range(args.runs):  # interleaved, so every path sees the same machine
        target = work / f"cp-{number}.bin"
        started = time.perf_counter()
        subprocess.run(["cp", str(source), str(target)], check=True)
        cp_s.append(time.perf_counter() - started)
        target.unlink()

        plain_up.append(_put(peer, f"/run-{number}.bin", source))
        plain_down.append(_get(peer, f"/run-{number}.bin", work / "got.bin"))
        (work / "plain" / f"run-{number}.bin").unlink()
        hashing_up.append(_put(peer_hashing, f"/run-{number}.bin", source))
        (work / "plain" / f"run-{number}.bin").unlink()

        params = {"path": f"run-{number}.bin", "offset": 0, "total": size}
        for attempt in range(3):  # a database connection cut by someone else: run it again
            _reset_peak(web.popen.pid)
            try:
                torus_up.append(_put(api, f"{base}/upload/", source, params=params))
                break
            except RuntimeError as exc:
                if attempt == 2:
                    raise
                retries += 1
                common.log(NAME, f"retrying after: {exc}")
                api.delete(f"{base}/upload/", params={"path": params["path"]})
        peaks.append(transfer.rss_kib(web.popen.pid, "VmHWM"))
        state = api.get(f"{base}/upload/", params={"path": f"run-{number}.bin"}).json()
        assert state["file"]["sha256"] == expected, state
        torus_down.append(
            _get(api, f"{base}/download/", work / "got.bin", params={"path": f"run-{number}.bin"})
        )
        common.log(
            NAME,
            f"run {number}: cp {cp_s[-1]:.2f}s, plain up {plain_up[-1]:.2f}s down "
            f"{plain_down[-1]:.2f}s, plain+sha256 up {hashing_up[-1]:.2f}s, "
            f"torus up {torus_up[-1]:.2f}s down {torus_down[-1]:.2f}s, "
            f"web peak RSS {peaks[-1] / 1024:.0f} MiB",
        )
    committed = api.post(f"{base}/commit/").json()
    archive_bytes = committed["size_bytes"]
    archive_s = _get(api, f"{base}/archive/", work / "got.tar")

    # the SDK as people use it: `torus datasets upload DIR` (256 MiB PUTs, then commit)
    from torus import Client
    from torus.datasets_cli import upload_directory

    sdk_dir = work / "sdk"
    sdk_dir.mkdir()
    os.link(source, sdk_dir / "file.bin")
    with Client(url=f"http://127.0.0.1:{port}", token=token, timeout=600) as client:
        started = time.perf_counter()
        upload_directory(client, sdk_dir, name=name + "-sdk", project=str(project.pk))
        sdk_s = time.perf_counter() - started

    mib = size / 2**20

    def rate(seconds: float) -> float:
        return round(mib / seconds, 1)

    metrics = {
        "bytes": size,
        "runs": args.runs,
        "torus_upload_mib_s": rate(_median(torus_up)),
        "torus_download_mib_s": rate(_median(torus_down)),
        "torus_sdk_upload_and_commit_mib_s": rate(sdk_s),
        "torus_archive_download_mib_s": round(archive_bytes / 2**20 / archive_s, 1),
        "web_rss_before_upload_mib": round(baseline_rss / 1024, 1),
        "web_peak_rss_during_upload_mib": round(max(peaks) / 1024, 1),
        "torus_upload_seconds": [round(s, 3) for s in torus_up],
        "torus_download_seconds": [round(s, 3) for s in torus_down],
        "sha256_checked": True,
        "upload_retries": retries,
        "environment": common.environment(),
        "server": "uvicorn config.asgi:application, 1 worker, as root",
    }
    peers = {
        "cp_mib_s": rate(_median(cp_s)),
        "plain_http_upload_mib_s": rate(_median(plain_up)),
        "plain_http_download_mib_s": rate(_median(plain_down)),
        "plain_http_sha256_upload_mib_s": rate(_median(hashing_up)),
        "plain_http": "bare ASGI app (bench/_plain_asgi.py) on the same uvicorn, same client",
    }
    ratios = {
        "upload_vs_plain_http": round(_median(plain_up) / _median(torus_up), 2),
        "download_vs_plain_http": round(_median(plain_down) / _median(torus_down), 2),
        "upload_vs_plain_http_sha256": round(_median(hashing_up) / _median(torus_up), 2),
        "upload_vs_cp": round(_median(cp_s) / _median(torus_up), 2),
        "download_vs_cp": round(_median(cp_s) / _median(torus_down), 2),
    }
    return {"benchmark": NAME, "metrics": metrics, "peers": peers, "ratios": ratios}


def _cleanup(name: str) -> None:
    """The bench's datasets and their files go (the tenant and project stay for next time)."""
    from apps.datasets.models import Dataset
    from apps.datasets.storage import storage_for

    for dataset in Dataset.objects.filter(name__in=[name, name + "-sdk"]):
        for kind in set(dataset.versions.values_list("storage_kind", flat=True)):
            storage_for(kind).delete(prefix=dataset.storage_prefix)
        dataset.delete()


if __name__ == "__main__":
    sys.exit(transfer.main(NAME, __doc__, run, size_mb=2048, quick_mb=256))
