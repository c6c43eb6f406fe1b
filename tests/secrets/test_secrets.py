"""Project secrets (docs/security.md, Job secrets): the API per role, encryption at rest and
rotation, bad input, the spec's references, the dispatcher's read, job_params and masking.
On the real PostgreSQL; the end-to-end runs on Slurm, Elasticsearch and Kubernetes are in
test_secrets_e2e.py and test_secrets_kubernetes.py."""

import io
import json
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from apps.compute.backends.base import SubmitRejected
from apps.compute.models import Cluster
from apps.identity.services import JobIdentity
from apps.jobs.dispatch import build_submission
from apps.jobs.models import Job, JobAttempt
from apps.jobs.outputs import job_params
from apps.secrets import crypto
from apps.secrets.mask import Masker, masker_for, read_masked
from apps.secrets.models import ProjectSecret, SecretUse
from apps.secrets.services import secret_set
from apps.tenancy.access import actor_for_user
from apps.tenancy.models import AuditEvent, Role
from tests.conftest import ROLES
from tests.factories import make_job

VALUE = "hf_Zq8sVb2YtK4mN7pL0xWcR5dE"
WANDB = "wb_9f3c1e7a5b2d4c6e8f0a1b3c5d7e9f1a"
IDENTITY = JobIdentity(user="alice", uid=200001, gid=300002, tenant_gid=300001, account="p-t_p")


def list_url(project) -> str:
    return reverse("project-secret-list", kwargs={"pk": project.pk})


def secret_url(project, name: str) -> str:
    return reverse("project-secret-detail", kwargs={"pk": project.pk, "name": name})


def put(world, role, name, value, project=None):
    return world.client(role).put(
        secret_url(project or world.project, name), {"value": value}, format="json"
    )


def set_as_member(world, name="HF_TOKEN", value=VALUE):
    return secret_set(
        actor=actor_for_user(user=world.users[Role.MEMBER]),
        project=world.project,
        name=name,
        value=value,
    )[0]


# -- the API -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_set_replace_list_delete_by_a_member_never_shows_a_value(acme):
    made = put(acme, Role.MEMBER, "HF_TOKEN", VALUE)
    assert made.status_code == 201, made.content
    assert made.json() == {
        "name": "HF_TOKEN",
        "version": 1,
        "created_at": made.json()["created_at"],
        "updated_at": made.json()["updated_at"],
        "updated_by": acme.users[Role.MEMBER].username,
    }
    replaced = put(acme, Role.ADMIN, "HF_TOKEN", VALUE + "-2")
    assert replaced.status_code == 200 and replaced.json()["version"] == 2
    assert replaced.json()["updated_by"] == acme.users[Role.ADMIN].username
    for role in ROLES:  # every role lists the names, none a value
        listed = acme.client(role).get(list_url(acme.project))
        assert listed.status_code == 200, (role, listed.content)
        assert [row["name"] for row in listed.json()["results"]] == ["HF_TOKEN"]
        assert VALUE not in listed.content.decode()
        assert set(listed.json()["results"][0]) == {
            "name",
            "version",
            "created_at",
            "updated_at",
            "updated_by",
        }
    assert VALUE not in made.content.decode() + replaced.content.decode()
    gone = acme.client(Role.MEMBER).delete(secret_url(acme.project, "HF_TOKEN"))
    assert gone.status_code == 204
    assert not ProjectSecret.objects.filter(project=acme.project).exists()
    again = acme.client(Role.MEMBER).delete(secret_url(acme.project, "HF_TOKEN"))
    assert again.status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("role", ROLES)
def test_who_sets_and_deletes(acme, role):
    set_as_member(acme)
    allowed = role != Role.VIEWER
    response = put(acme, role, "HF_TOKEN", "another-value")
    assert response.status_code == (200 if allowed else 403), response.content
    response = acme.client(role).delete(secret_url(acme.project, "HF_TOKEN"))
    assert response.status_code == (204 if allowed else 403), response.content
    if not allowed:
        assert response.json()["error"]["code"] == "permission_denied"
        assert ProjectSecret.objects.get(project=acme.project).version == 1


@pytest.mark.django_db
def test_a_member_outside_the_project_may_not_set_but_an_admin_may(acme):
    from tests.factories import ProjectFactory

    elsewhere = ProjectFactory(tenant=acme.tenant, slug="elsewhere")
    refused = put(acme, Role.MEMBER, "HF_TOKEN", VALUE, project=elsewhere)
    assert refused.status_code == 403
    assert "member of project" in refused.json()["error"]["message"]
    assert put(acme, Role.ADMIN, "HF_TOKEN", VALUE, project=elsewhere).status_code == 201
    # a viewer of the tenant still lists that project's names
    listed = acme.client(Role.VIEWER).get(list_url(elsewhere))
    assert [row["name"] for row in listed.json()["results"]] == ["HF_TOKEN"]


@pytest.mark.django_db
def test_another_tenant_gets_404_and_changes_nothing(acme, globex):
    set_as_member(acme)
    intruder = globex.client(Role.OWNER)
    assert intruder.get(list_url(acme.project)).status_code == 404
    response = intruder.put(secret_url(acme.project, "HF_TOKEN"), {"value": "x" * 8}, format="json")
    assert response.status_code == 404
    assert intruder.delete(secret_url(acme.project, "HF_TOKEN")).status_code == 404
    unknown = reverse("project-secret-list", kwargs={"pk": uuid.uuid4()})
    assert intruder.get(unknown).status_code == 404
    secret = ProjectSecret.objects.get(project=acme.project)
    assert secret.version == 1 and crypto.decrypt(secret.ciphertext) == VALUE
    # the allowed control of the same kind: globex's owner in globex's own project
    assert put(globex, Role.OWNER, "HF_TOKEN", "globex-value").status_code == 201


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("1BAD", {"value": "abcd"}, "name"),
        ("TORUS_TOKEN", {"value": "abcd"}, "name"),
        ("SLURM_JOB", {"value": "abcd"}, "name"),
        ("RANK", {"value": "abcd"}, "name"),
        ("A" * 129, {"value": "abcd"}, "name"),
        ("HF_TOKEN", {"value": "x" * (64 * 1024 + 1)}, "value"),
        ("HF_TOKEN", {"value": "é" * (32 * 1024 + 1)}, "value"),  # 64 KiB + 2 bytes of UTF-8
        ("HF_TOKEN", {"value": ""}, "value"),
        ("HF_TOKEN", {"value": "a\x00b"}, "value"),
        ("HF_TOKEN", {}, "value"),
        ("HF_TOKEN", {"value": 5, "extra": 1}, "extra"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(acme, name, body, field):
    response = acme.client(Role.MEMBER).put(secret_url(acme.project, name), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.content
    assert not ProjectSecret.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="secret.").exists()


@pytest.mark.django_db
def test_the_largest_value_allowed_is_64_kib(acme):
    assert put(acme, Role.MEMBER, "BIG", "x" * (64 * 1024)).status_code == 201


@pytest.mark.django_db
def test_audit_names_who_set_and_deleted_which_version_never_the_value(acme):
    put(acme, Role.MEMBER, "HF_TOKEN", VALUE)
    put(acme, Role.MEMBER, "HF_TOKEN", VALUE + "x")
    acme.client(Role.ADMIN).delete(secret_url(acme.project, "HF_TOKEN"))
    events = list(
        AuditEvent.objects.filter(tenant=acme.tenant, action__startswith="secret.").order_by(
            "created_at"
        )
    )
    assert [(e.action, e.actor_repr, e.changes["version"]) for e in events] == [
        ("secret.set", acme.users[Role.MEMBER].username, [None, 1]),
        ("secret.set", acme.users[Role.MEMBER].username, [1, 2]),
        ("secret.delete", acme.users[Role.ADMIN].username, [2, None]),
    ]
    assert all("HF_TOKEN" in json.dumps(e.changes) for e in events)
    assert not any(VALUE in json.dumps(e.changes) + e.target_repr for e in events)
    listed = acme.client(Role.OWNER).get(reverse("audit-event-list"))
    assert "secret.set" in listed.content.decode() and VALUE not in listed.content.decode()


# -- at rest -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_database_holds_ciphertext_only(acme):
    from django.db import connection

    secret = set_as_member(acme)
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM project_secrets_projectsecret WHERE id = %s", [secret.pk])
        row = cursor.fetchone()
    assert VALUE not in repr(row)
    assert VALUE.encode() not in secret.ciphertext.encode()
    assert crypto.decrypt(secret.ciphertext) == VALUE


@pytest.mark.django_db
def test_rotation_reencrypts_under_the_new_key_and_old_values_still_decrypt(acme, settings):
    settings.TORUS_SECRETS_KEYS = ["old-key-material"]
    secret = set_as_member(acme)
    old_token = secret.ciphertext
    settings.TORUS_SECRETS_KEYS = ["new-key-material", "old-key-material"]
    assert crypto.decrypt(old_token) == VALUE  # before the rotation: the old key still opens it
    out = io.StringIO()
    call_command("secrets_rotate", stdout=out)
    assert "re-encrypted 1 value(s)" in out.getvalue()
    secret.refresh_from_db()
    assert secret.ciphertext != old_token
    settings.TORUS_SECRETS_KEYS = ["new-key-material"]  # the old key dropped
    assert crypto.decrypt(secret.ciphertext) == VALUE
    with pytest.raises(crypto.InvalidToken):
        crypto.decrypt(old_token)
    settings.TORUS_SECRETS_KEYS = ["old-key-material"]  # and the old key alone opens nothing new
    with pytest.raises(crypto.InvalidToken):
        crypto.decrypt(secret.ciphertext)


# -- the spec ----------------------------------------------------------------------------------


def submit(world, role=Role.MEMBER, **spec):
    body = {"project": str(world.project.pk), "name": "s", "command": ["true"], **spec}
    return world.client(role).post(reverse("job-list"), body, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"secrets": ["NOPE"]}, "secrets"),
        ({"env": {"WANDB_API_KEY": {"secret": "NOPE"}}}, "env"),
        ({"secrets": ["TORUS_X"]}, "secrets"),
        ({"secrets": ["1X"]}, "secrets"),
        ({"env": {"A": {"secret": "B", "extra": 1}}}, "env"),
        ({"env": {"A": {"value": "B"}}}, "env"),
        ({"secrets": ["HF_TOKEN"], "env": {"HF_TOKEN": "plain"}}, "secrets"),
    ],
)
def test_a_spec_naming_a_missing_or_bad_secret_is_a_400_and_nothing_is_made(
    acme, cluster, spec, field
):
    set_as_member(acme)
    response = submit(acme, **spec)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.content
    assert not Job.objects.filter(project=acme.project).exists()


@pytest.mark.django_db
def test_the_stored_spec_keeps_names_only_and_no_answer_shows_a_value(acme, cluster):
    set_as_member(acme)
    set_as_member(acme, name="WB", value=WANDB)
    response = submit(
        acme,
        secrets=["HF_TOKEN"],
        env={"WANDB_API_KEY": {"secret": "WB"}, "PLAIN": "visible"},
    )
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert job.spec["secrets"] == ["HF_TOKEN"]
    assert job.spec["env"] == {"WANDB_API_KEY": {"secret": "WB"}, "PLAIN": "visible"}
    stored = json.dumps(job.spec)
    assert VALUE not in stored and WANDB not in stored
    for role in ROLES:
        body = acme.client(role).get(reverse("job-detail", kwargs={"pk": job.pk})).content
        assert VALUE.encode() not in body and WANDB.encode() not in body


# -- the dispatcher's read ---------------------------------------------------------------------


def _attempt(job) -> JobAttempt:
    return JobAttempt.objects.create(
        job=job, number=1, state="SUBMITTING", stdout_path="/o", stderr_path="/e"
    )


@pytest.mark.django_db
def test_dispatch_puts_values_in_submission_secrets_only_and_audits_the_read(acme, cluster):
    set_as_member(acme)
    set_as_member(acme, name="WB", value=WANDB)
    job = make_job(
        project=acme.project,
        user=acme.users[Role.MEMBER],
        cluster=cluster,
        secrets=["HF_TOKEN"],
        env={"WANDB_API_KEY": {"secret": "WB"}, "PLAIN": "visible"},
    )
    attempt = _attempt(job)
    submission = build_submission(attempt, Cluster(name="c", config={}), IDENTITY)
    assert submission.secrets == {"HF_TOKEN": VALUE, "WANDB_API_KEY": WANDB}
    assert submission.environment["PLAIN"] == "visible"
    assert "HF_TOKEN" not in submission.environment
    assert "WANDB_API_KEY" not in submission.environment
    assert VALUE not in json.dumps(submission.environment)
    reads = AuditEvent.objects.filter(tenant=acme.tenant, action="secret.read")
    assert sorted(e.changes["name"][1] for e in reads) == ["HF_TOKEN", "WB"]
    assert all(e.changes["job"][1] == str(job.pk) for e in reads)
    assert all(e.changes["by"][1] == "dispatch" for e in reads)
    assert not any(VALUE in json.dumps(e.changes) or WANDB in json.dumps(e.changes) for e in reads)
    uses = SecretUse.objects.filter(attempt=attempt)
    assert sorted(u.name for u in uses) == ["HF_TOKEN", "WB"]
    assert all(VALUE not in u.ciphertext for u in uses)


@pytest.mark.django_db
def test_a_job_without_secrets_reads_none(acme, cluster):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    job = make_job(project=acme.project, user=acme.users[Role.MEMBER], cluster=cluster)
    attempt = _attempt(job)
    with CaptureQueriesContext(connection) as queries:
        submission = build_submission(attempt, Cluster(name="c", config={}), IDENTITY)
    assert submission.secrets == {}
    assert not [q for q in queries if "project_secrets" in q["sql"]]
    assert not AuditEvent.objects.filter(action="secret.read").exists()


@pytest.mark.django_db
def test_a_secret_deleted_after_submission_fails_the_attempt_with_the_reason(acme, cluster):
    secret = set_as_member(acme)
    job = make_job(
        project=acme.project, user=acme.users[Role.MEMBER], cluster=cluster, secrets=["HF_TOKEN"]
    )
    secret.delete()
    with pytest.raises(SubmitRejected, match=r"secret HF_TOKEN .* no longer exists"):
        build_submission(_attempt(job), Cluster(name="c", config={}), IDENTITY)


# -- job_params --------------------------------------------------------------------------------


def test_job_params_keep_no_value_of_a_secret_option():
    argv = [
        "python",
        "train.py",
        "--hf-token",
        VALUE,
        "--api_key=" + WANDB,
        "--WANDB-API-KEY",
        "k1",
        "--Secret=s",
        "--db-password",
        "pw",
        "--lr",
        "0.1",
        "--epochs=3",
        "--resume",
    ]
    params = job_params({"command": {"argv": argv}})
    assert params == {"lr": "0.1", "epochs": "3", "resume": "true"}
    assert VALUE not in json.dumps(params) and WANDB not in json.dumps(params)


# -- masking -----------------------------------------------------------------------------------


def test_masking_longest_first_short_values_left_and_cut_heads_masked():
    masker = Masker([VALUE, VALUE[:10], "abc", "line-one\nline-two"])
    assert masker.text(f"token={VALUE} again {VALUE}") == "token=*** again ***"
    assert masker.text(f"prefix {VALUE[:10]} only") == "prefix *** only"
    assert masker.text("abc is too short to mask") == "abc is too short to mask"
    assert masker.text("line-two printed alone") == "*** printed alone"
    cut = f"x {VALUE[:7]} …[truncated at 9 bytes]"
    assert masker.text(cut, cut=True) == "x *** …[truncated at 9 bytes]"


def test_a_value_across_the_edges_of_a_log_read_is_still_masked():
    data = f"head {VALUE} middle {VALUE}\ntail".encode()
    masker = Masker([VALUE])

    def read(offset, limit):
        return data[offset : offset + limit]

    start = data.index(VALUE.encode())
    pieces, offset = [], 0
    for size in (start + 5, 11, 7, 1000):  # the value split over three reads
        piece = read_masked(read, offset=offset, limit=size, masker=masker)
        pieces.append(piece)
        offset += len(piece)
    whole = b"".join(pieces)
    assert len(whole) == len(data) and VALUE[:4].encode() not in whole
    assert whole == data.replace(VALUE.encode(), b"*" * len(VALUE))


@pytest.mark.django_db
def test_the_log_api_masks_the_secrets_the_attempt_received(acme, cluster, settings):
    set_as_member(acme)
    job = make_job(
        project=acme.project, user=acme.users[Role.MEMBER], cluster=cluster, secrets=["HF_TOKEN"]
    )
    attempt = _attempt(job)
    folder = Path(settings.TORUS_JOB_ROOT) / "acme" / "logs"  # logs are read in the job root
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text(f"token is {VALUE}\n")
    JobAttempt.objects.filter(pk=attempt.pk).update(
        stdout_path=str(folder / "stdout.log"), stderr_path=str(folder / "e"), backend_id="1"
    )
    build_submission(attempt, Cluster(name="c", config={}), IDENTITY)  # records the use
    attempt.refresh_from_db()
    assert masker_for(attempt) is not None
    for role in ROLES:
        response = acme.client(role).get(reverse("job-output-logs", kwargs={"pk": job.pk}))
        assert response.status_code == 200, response.content
        assert VALUE not in response.content.decode(), response.content
        assert "token is ****" in response.json()["data"], response.json()
