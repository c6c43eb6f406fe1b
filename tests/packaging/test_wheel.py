"""The wheel runs what the checkout runs: every file the code reads at run time ships in it, and
the portal's processes (web, worker, shipper) start from a clean virtualenv that has only the
wheel's `apps` and `config` (third-party packages come from the checkout's venv through
a .pth line, which puts them after the wheel on sys.path). The processes use the real services,
this test run's database and Redis databases.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
import zipfile
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

from scripts.devstack import free_port

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("apps", "config")
# Reads of BASE_DIR that are not package data: where the platform's state lives (VAR_DIR, set by
# TORUS_VAR_DIR when installed) and the built UI (TORUS_UI_DIST; the wheel carries no UI); the
# secret key's file, under the same VAR_DIR.
BASE_DIR_READS = {"config/settings.py": 3, "config/secret_key.py": 2}


def _tree_files() -> list[str]:
    """The checkout's files as a commit would have them: tracked and new, not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def _package_files() -> list[str]:
    return [name for name in _tree_files() if name.split("/", 1)[0] in PACKAGES]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build from a copy of the tree, so the build leaves nothing in the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in _tree_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (built,) = (tmp / "dist").glob("torus-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A virtualenv with the wheel installed, and the checkout's third-party packages after it."""
    target = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    python = target / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", wheel],
        check=True,
        capture_output=True,
        timeout=300,
    )
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "checkout-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return target


def _env(venv: Path, **extra: str) -> dict:
    """An installed server's environment: its own TORUS_VAR_DIR (BASE_DIR is site-packages once
    installed), the services' connection settings and this test run's databases."""
    db = connection.settings_dict
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    (venv.parent / "var").mkdir(exist_ok=True)
    return {
        **env,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "TORUS_VAR_DIR": str(venv.parent / "var"),
        "TORUS_SERVICES_ENV": str(ROOT / ".var" / "secrets" / "services.env"),
        "TORUS_DATA_DIR": str(settings.DATA_DIR),
        "TORUS_LDAP_BIND_PASSWORD_FILE": settings.TORUS_LDAP_BIND_PASSWORD_FILE,
        "TORUS_DATABASE_URL": (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        ),
        "TORUS_REDIS_DB_BASE": str(settings.REDIS_DB_BASE),
        "PYTHONDONTWRITEBYTECODE": "1",
        **extra,
    }


def _run(venv: Path, *args: str, cwd: Path, timeout: int = 120) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), *args],
        cwd=cwd,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def _stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_every_package_file_is_in_the_wheel(wheel):
    """Modules, migrations, launchers, templates: whatever lives in a package ships."""
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in _package_files() if name not in names]
    assert not missing, f"not in the wheel (pyproject.toml package-data): {missing}"
    assert any(re.fullmatch(r"apps/\w+/migrations/0001_\w+\.py", name) for name in names)


# a path built from the module's own: Path(__file__).with_name("x") / "y",
# Path(__file__).resolve().parents[1] / "a" / "b", Path(__file__).parent / "x"
READ = re.compile(
    r"Path\(__file__\)(?:\.resolve\(\))?"
    r'(?:\.with_name\("([^"]+)"\)|\.parents\[(\d)\]|\.parent(?!\.))\)?((?: / "[^"]+")*)'
)


@pytest.mark.parametrize(
    ("line", "groups"),
    [
        ('X = (Path(__file__).with_name("launcher.sh")).read_text()', ("launcher.sh", None, "")),
        ('T = Path(__file__).with_name("data") / "t.json"', ("data", None, ' / "t.json"')),
        ('S = Path(__file__).resolve().parents[1] / "a" / "b.py"', (None, "1", ' / "a" / "b.py"')),
        ('D = Path(__file__).parent / "schema.json"', (None, None, ' / "schema.json"')),
    ],
)
def test_the_read_pattern_sees_each_form(line, groups):
    """The scan below only guards what this pattern matches."""
    match = READ.search(line)
    assert match and match.groups() == groups


def test_run_time_reads_stay_inside_the_packages():
    """A read relative to a module resolves to a file in a package; nothing else reads from the
    checkout's root (BASE_DIR) beyond what settings names for a deployment to set."""
    reads = []
    for name in _package_files():
        if not name.endswith(".py"):
            continue
        text = (ROOT / name).read_text()
        here = ROOT / name
        for match in READ.finditer(text):
            sibling, up, parts = match.group(1), match.group(2), match.group(3)
            base = here.parent / sibling if sibling else here.parents[int(up or 0)]
            target = base.joinpath(*re.findall(r'"([^"]+)"', parts))
            if sibling or parts:
                reads.append(target.relative_to(ROOT).as_posix())
        uses = len(re.findall(r"\bBASE_DIR\b", text))
        assert uses <= BASE_DIR_READS.get(name, 0), f"{name} reads from the checkout root"
    assert reads, "the pattern found no run-time reads at all"
    packaged = set(_package_files())
    assert set(reads) <= packaged, set(reads) - packaged
    assert "apps/logs/data/torus-logs.json" in reads
    assert "apps/compute/backends/kubernetes/launcher.sh" in reads


PROBE = """
import json, sys
from pathlib import Path
import django
django.setup()
import apps, config
from apps.compute.backends import slurm, slurm_request
from apps.compute.backends.base import Submission
from apps.compute.backends.kubernetes import manifests
from apps.jobs.staging import STAGER
from apps.logs import index
sub = Submission(tag="torus:1", name="probe", environment={}, nodes=1, tasks_per_node=1,
                 cpus_per_task=1, memory_mb_per_node=64, time_limit_minutes=1,
                 user="probe", uid=5000, gid=5000, account="acct")
print(json.dumps({
    "files": [m.__file__ for m in (apps, config, slurm)],
    "script": slurm_request.render_request(sub)["script"],
    "k8s_launcher": manifests.LAUNCHER,
    "stager": str(STAGER), "stager_is_file": STAGER.is_file(),
    "template": json.loads(index.TEMPLATE.read_text()),
}))
"""


def test_installed_code_reads_its_files_from_the_wheel(venv, tmp_path, db):
    probe = json.loads(_run(venv, "-c", PROBE, cwd=tmp_path))
    for file in probe["files"]:
        assert Path(file).is_relative_to(venv), file
    assert Path(probe["stager"]).is_relative_to(venv) and probe["stager_is_file"]
    assert probe["script"] == (ROOT / "apps/compute/backends/launcher.sh").read_text()
    assert probe["script"].startswith("#!")
    launcher = (ROOT / "apps/compute/backends/kubernetes/launcher.sh").read_text()
    assert probe["k8s_launcher"] == launcher
    assert probe["template"] == json.loads((ROOT / "apps/logs/data/torus-logs.json").read_text())
    assert "System check identified no issues" in _run(venv, "-m", "django", "check", cwd=tmp_path)


UI_INDEX = "<!doctype html><title>Torus</title><script src='/static/ui/assets/app-0a1b2c3d.js'>"


@pytest.mark.parametrize("ui_built", [False, True], ids=["no-ui", "ui-dist"])
def test_web_serves_from_the_wheel(venv, tmp_path, db, ui_built):
    """As the image does: collectstatic into the server's own TORUS_VAR_DIR, then uvicorn. The
    wheel carries no UI: without TORUS_UI_DIST / says so; with it, the build is served."""
    extra = {"TORUS_VAR_DIR": str(tmp_path / "var")}
    if ui_built:
        dist = tmp_path / "dist"
        (dist / "assets").mkdir(parents=True)
        (dist / "index.html").write_text(UI_INDEX)
        (dist / "assets" / "app-0a1b2c3d.js").write_text("console.log('wheel');\n")
        extra["TORUS_UI_DIST"] = str(dist)
    env = _env(venv, **extra)
    (tmp_path / "var").mkdir()
    collect = ["-m", "django", "collectstatic", "--noinput", "-v", "0"]
    done = subprocess.run([venv / "bin" / "python", *collect], cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0
    port = free_port()
    web = subprocess.Popen(
        [venv / "bin" / "python", "-m", "uvicorn", "config.asgi:application", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline, health = time.monotonic() + 60, None
        while health is None:
            assert web.poll() is None, web.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "uvicorn never answered"
            try:
                health = httpx.get(f"{base}/healthz", timeout=5)
            except httpx.TransportError:
                time.sleep(0.3)
        assert health.status_code == 200, health.text
        page = httpx.get(f"{base}/jobs/42", timeout=5)
        if ui_built:
            assert page.status_code == 200 and page.text == UI_INDEX
            asset = httpx.get(f"{base}/static/ui/assets/app-0a1b2c3d.js", timeout=5)
            assert asset.status_code == 200 and "wheel" in asset.text
        else:
            assert page.status_code == 503
            assert "TORUS_UI_DIST" in page.text
        admin_css = httpx.get(f"{base}/static/admin/css/base.css", timeout=5)
        assert admin_css.status_code == 200 and "body" in admin_css.text
    finally:
        _stop(web)


def test_worker_answers_from_the_wheel(venv, tmp_path, db):
    from config.celery import app

    app.control.purge()  # nothing left in this run's broker for the new worker to take
    name = f"wheel-{uuid.uuid4().hex[:8]}@localhost"
    celery = ("-m", "celery", "-A", "config")
    worker = subprocess.Popen(
        [venv / "bin" / "python", *celery, "worker", "--pool", "solo", "-n", name, "-l", "WARNING"],
        cwd=tmp_path,
        env=_env(venv),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline, answer = time.monotonic() + 90, None
        while answer is None:
            assert worker.poll() is None, worker.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the worker never answered a ping"
            ping = subprocess.run(
                [venv / "bin" / "python", *celery, "inspect", "ping", "-d", name, "-t", "2"],
                cwd=tmp_path,
                env=_env(venv),
                capture_output=True,
                text=True,
                timeout=60,
            )
            answer = ping.stdout if ping.returncode == 0 else None
        assert name in answer and "pong" in answer
    finally:
        _stop(worker)


def test_shipper_runs_a_pass_from_the_wheel(venv, tmp_path, db):
    """One pass installs the index template from the wheel's copy (Elasticsearch down would be
    a logged retry, not an exit code: the log says whether it reached it)."""
    from apps.logs.es import INDEX_PREFIX, client

    done = subprocess.run(
        [venv / "bin" / "python", "-m", "django", "run_shipper", "--once"],
        cwd=tmp_path,
        env={**_env(venv), "TORUS_LOG_LEVEL": "INFO"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "unavailable" not in done.stdout + done.stderr
    template = json.loads((ROOT / "apps/logs/data/torus-logs.json").read_text())
    (stored,) = client().indices.get_index_template(name=INDEX_PREFIX)["index_templates"]
    assert stored["index_template"]["index_patterns"] == template["index_patterns"]
    properties = stored["index_template"]["template"]["mappings"]["properties"]
    assert properties.keys() == template["template"]["mappings"]["properties"].keys()
