"""`torus notify` against a live portal over real HTTP: subscribe by e-mail for a project and by
webhook for all of one's jobs (its signing secret printed once), list, remove; bad input is a
message naming the problem, not a traceback."""

import json

import pytest

from apps.notifications.models import Subscription
from apps.tenancy.models import Role
from tests.sdk.cli import cli_env, run_cli

pytestmark = pytest.mark.django_db(transaction=True)


def test_subscribe_list_and_remove_from_the_cli(live_server, acme, settings):
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    env = cli_env(url=live_server.url, token=acme.tokens[Role.MEMBER])
    made = run_cli(
        "notify", "add", "--events", "failed,stalled", "--project", "acme-proj", "me@example.org",
        env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "project" in made.stdout and "failed,stalled" in made.stdout
    hook = run_cli(
        "notify", "add", "--events", "succeeded", "--channel", "webhook",
        "http://127.0.0.1:9/hook", env=env,
    )  # fmt: skip
    assert hook.returncode == 0, hook.stderr
    [secret] = [line for line in hook.stdout.splitlines() if line.startswith("signing secret")]
    assert len(secret.rsplit(" ", 1)[1]) >= 32

    listed = run_cli("--json", "notify", "ls", env=env)
    rows = json.loads(listed.stdout)
    assert sorted((r["scope"], r["channel"]) for r in rows) == [
        (f"project {acme.project.pk}", "email"), ("your jobs", "webhook"),
    ]  # fmt: skip
    assert all("secret" not in r for r in rows)
    table = run_cli("notify", "ls", env=env).stdout
    assert "me@example.org" in table and "your jobs" in table

    for args, words in [
        (["--events", "exploded", "x@example.org"], "unknown events ['exploded']"),
        (["--events", "failed", "not-an-address"], "address"),
        (["--events", "failed", "--project", "nope", "x@example.org"], "nope"),
    ]:
        bad = run_cli("notify", "add", *args, env=env)
        assert bad.returncode != 0 and words in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
    assert Subscription.objects.count() == 2
    bell = run_cli("notify", "add", "--events", "deploy_failing", "--channel", "inapp", env=env)
    assert bell.returncode == 0, bell.stderr
    Subscription.objects.filter(channel="inapp").delete()

    email = next(r for r in rows if r["channel"] == "email")
    gone = run_cli("notify", "rm", email["id"], env=env)
    assert gone.returncode == 0 and f"removed {email['id']}" in gone.stdout
    assert list(Subscription.objects.values_list("channel", flat=True)) == ["webhook"]
    # another person's subscription is not theirs to see or remove
    other = cli_env(url=live_server.url, token=acme.tokens[Role.ADMIN])
    assert json.loads(run_cli("--json", "notify", "ls", env=other).stdout) == []
    refused = run_cli(
        "notify",
        "rm",
        rows[0]["id"] if rows[0]["channel"] == "webhook" else rows[1]["id"],
        env=other,
    )
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
