"""/metrics for operators: refused without the scrape token; no job's or person's id in it;
scraped by a real Prometheus (Debian's package, a server of the test's own) whose HTTP API
then returns the platform's series: the queue depth with a job its quota holds, admission's
decisions, the jobs' waits. The alert rules and scrape config in docs/operations.md pass
promtool."""

import re
import secrets
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from apps.core import telemetry
from apps.jobs.telemetry import pass_timed
from apps.quotas.models import Quota
from apps.tenancy.models import Role
from scripts.devstack import answers, free_port
from tests.conftest import make_world
from tests.jobs.test_admission import post

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SCRAPE_LABELS = ("__name__", "job", "instance")  # on every series Prometheus returns
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture
def scrape_token(settings, tmp_path) -> Path:
    path = tmp_path / "metrics-token"
    path.write_text(secrets.token_urlsafe(24) + "\n")
    settings.TORUS_METRICS_TOKEN_FILE = str(path)
    return path


@pytest.fixture
def prometheus(tmp_path, asgi_server, scrape_token):
    """Prometheus scraping the test's server every second, with the scrape token."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: torus\n"
        "    metrics_path: /metrics\n"
        f"    authorization: {{type: Bearer, credentials_file: {scrape_token}}}\n"
        f"    static_configs: [{{targets: ['{asgi_server.url.split('//')[1]}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not answers(f"{base}/-/ready"):
            assert server.poll() is None and time.monotonic() < deadline, (
                tmp_path / "prometheus.log"
            ).read_text()[-2000:]
            time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


def query(base: str, promql: str, *, expect, timeout: float = 60) -> dict:
    """{labels as a frozenset: value} of an instant query, once `expect(result)` holds."""
    deadline = time.monotonic() + timeout
    while True:
        body = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=5).json()
        assert body["status"] == "success", body
        result = {
            frozenset((k, v) for k, v in r["metric"].items() if k not in SCRAPE_LABELS): float(
                r["value"][1]
            )
            for r in body["data"]["result"]
        }
        if expect(result):
            return result
        assert time.monotonic() < deadline, f"{promql}: {result}"
        time.sleep(0.5)


def test_prometheus_scrapes_the_queue_and_admissions(prometheus, cluster):
    held = make_world(f"m{uuid.uuid4().hex[:7]}")
    free = make_world(f"m{uuid.uuid4().hex[:7]}")
    Quota.objects.create(tenant=held.tenant, gpus=1)
    assert post(held, Role.MEMBER, held.project, gpus=1)["state"] == "QUEUED"
    waiting = post(held, Role.MEMBER, held.project, gpus=1)
    assert waiting["state"] == "PENDING"  # over its tenant's GPU quota
    assert post(free, Role.MEMBER, free.project, gpus=0)["state"] == "QUEUED"
    with pass_timed(step="admit"):
        pass
    slug_held, slug_free = held.tenant.slug, free.tenant.slug

    depth = query(
        prometheus,
        f'torus_jobs_waiting{{tenant=~"{slug_held}|{slug_free}"}}',
        expect=lambda r: len(r) == 3,
    )
    assert depth == {
        frozenset({("tenant", slug_held), ("cluster", "test"), ("partition", "gpu"),
                   ("state", "QUEUED")}): 1.0,
        frozenset({("tenant", slug_held), ("cluster", "test"), ("partition", "gpu"),
                   ("state", "PENDING")}): 1.0,
        frozenset({("tenant", slug_free), ("cluster", "test"), ("partition", "gpu"),
                   ("state", "QUEUED")}): 1.0,
    }  # fmt: skip
    decisions = query(
        prometheus,
        f'torus_admission_decisions_total{{tenant=~"{slug_held}|{slug_free}"}}',
        expect=lambda r: len(r) == 3,
    )
    assert decisions == {
        frozenset({("tenant", slug_held), ("decision", "admitted")}): 1.0,
        frozenset({("tenant", slug_held), ("decision", "held")}): 1.0,
        frozenset({("tenant", slug_free), ("decision", "admitted")}): 1.0,
    }
    passes = query(
        prometheus,
        'torus_pass_seconds_count{step="admit"}',
        expect=lambda r: sum(r.values()) >= 1,
    )
    assert all(dict(labels).get("cluster", "") == "" for labels in passes)  # none: empty


def test_metrics_need_the_scrape_token_and_name_no_job_or_person(
    asgi_server, scrape_token, acme, cluster
):
    job = post(acme, Role.MEMBER, acme.project, gpus=0)
    url = f"{asgi_server.url}/metrics"
    assert httpx.get(url).status_code == 403
    wrong = httpx.get(url, headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 403 and "scrape token" in wrong.json()["error"]["message"]
    token = scrape_token.read_text().strip()
    response = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    text = response.text
    assert f'tenant="{acme.tenant.slug}"' in text and "torus_jobs_waiting" in text
    assert job["id"] not in text and not UUID.search(text)  # bounded labels: no ids
    assert not any(user.username in text for user in acme.users.values())
    scrape_token.unlink()  # no token configured: refused, whatever is sent
    assert httpx.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 403


def test_a_collector_that_raises_is_named_and_the_others_still_answer(db, monkeypatch):
    def broken():
        raise RuntimeError("boom")
        yield  # a generator, as collectors are

    monkeypatch.setitem(telemetry.COLLECTORS, "broken", broken)
    text = telemetry.render().decode()
    assert 'torus_metrics_collector_failed{collector="broken"} 1.0' in text
    assert "# TYPE torus_jobs_waiting gauge" in text  # the jobs' collector answered


def _docs_block(title: str) -> str:
    """The yaml block that follows the line `<!-- promtool: TITLE -->` in the docs."""
    text = DOCS.read_text()
    found = re.search(rf"<!-- promtool: {title} -->\n```yaml\n(.*?)```", text, re.S)
    assert found, f"docs/operations.md has no yaml block marked promtool: {title}"
    return found.group(1)


def test_the_docs_alert_rules_and_scrape_config_pass_promtool(tmp_path):
    rules = tmp_path / "torus-rules.yml"
    rules.write_text(_docs_block("rules"))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(rules)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 3 rules found" in checked.stdout
    token = tmp_path / "metrics-token"
    token.write_text("t\n")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        _docs_block("scrape config").replace("/etc/prometheus/torus-metrics-token", str(token))
        + f"rule_files: [{rules}]\n"
    )
    checked = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
