"""Exactly-once dispatch and a reconciler whose cost does not grow with the number of jobs."""

import os
import socket
import threading
import time

import pytest
from django.db import connection
from django.urls import reverse

from apps.compute.backends import for_cluster
from apps.compute.backends.base import ClusterUnavailable
from apps.core.exceptions import DirectoryUnavailable
from apps.identity.storage import project_root
from apps.jobs import dispatch, extras, paths, reconcile
from apps.jobs.models import AttemptState, Job, JobAttempt
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, sdiag_rpcs, slurm, slurm_jobs_tagged, submit


def _queued(acme, count: int, command=("sleep", "30")) -> list[str]:
    client = acme.client(Role.ADMIN)
    return [submit(client, acme.project, command=list(command))["id"] for _ in range(count)]


def test_duplicated_dispatch_submits_each_attempt_once(acme, slurm_cluster):
    ids = _queued(acme, 10, command=("true",))
    start = threading.Barrier(3)

    def run():
        start.wait()
        try:
            dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    attempts = JobAttempt.objects.filter(job_id__in=ids)
    assert all(a.state == AttemptState.SUBMITTED for a in attempts)
    for attempt in attempts:
        assert slurm_jobs_tagged(attempt.tag) == [attempt.backend_id]


def test_a_dispatch_asked_for_during_a_pass_is_run_by_its_holder_at_once(
    acme, slurm_cluster, monkeypatch
):
    """A job admitted while a pass runs: its own task finds the lock held and returns; the
    holder runs the next pass as soon as it lets go, instead of a retry half a second later."""
    from apps.jobs import tasks

    (first,) = _queued(acme, 1, command=("true",))
    real_pass, later, nested = dispatch.dispatch_cluster, [], []

    def pass_with_an_admission_during_it(*, cluster_id, **run):
        done = real_pass(cluster_id=cluster_id, **run)
        if not later:  # the first pass: a job is admitted, its task runs while the lock is held
            later.extend(_queued(acme, 1, command=("true",)))
            nested.append(tasks.dispatch_cluster(str(cluster_id)))
        return done

    monkeypatch.setattr(dispatch, "dispatch_cluster", pass_with_an_admission_during_it)
    assert tasks.dispatch_cluster(str(slurm_cluster.pk)) == 2
    assert nested == [0]  # the held lock: that task left the request to the holder
    for job_id in (first, *later):
        attempt = JobAttempt.objects.get(job_id=job_id)
        assert attempt.state == AttemptState.SUBMITTED
        assert slurm_jobs_tagged(attempt.tag) == [attempt.backend_id]


def test_the_passes_of_one_run_prepare_each_identity_once_while_it_is_fresh(
    acme, slurm_cluster, monkeypatch
):
    real, prepared = dispatch.prepare_identity, []

    def prepare_identity(**kwargs):
        prepared.append(kwargs["job"].pk)
        if len(prepared) == 1:
            raise DirectoryUnavailable("the directory is away")  # not kept for a later pass
        return real(**kwargs)

    monkeypatch.setattr(dispatch, "prepare_identity", prepare_identity)
    identities, ids = {}, _queued(acme, 2, command=("true",))

    def run_pass(**run) -> None:
        dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk, identities=identities, **run)

    run_pass()  # the identity fails: both attempts go back to the queue
    assert len(prepared) == 1 and identities == {}
    run_pass(recover=False)  # prepared, then kept
    ids += _queued(acme, 2, command=("true",))
    run_pass(recover=False)  # the same user and project: reused
    assert len(prepared) == 2
    monkeypatch.setattr(dispatch, "IDENTITY_REUSE_SECONDS", 0.0)
    ids += _queued(acme, 1, command=("true",))
    run_pass(recover=False)  # too old: prepared again
    assert len(prepared) == 3
    for attempt in JobAttempt.objects.filter(job_id__in=ids):
        assert attempt.state == AttemptState.SUBMITTED
        assert slurm_jobs_tagged(attempt.tag) == [attempt.backend_id]


def test_an_orphan_accepted_by_slurm_is_adopted_not_resubmitted(acme, slurm_cluster, settings):
    settings.TORUS_DISPATCH_GRACE_SECONDS = 1
    (job_id,) = _queued(acme, 1, command=("true",))
    claimed = dispatch.claim(cluster=slurm_cluster, limit=10)
    assert len(claimed) == 1
    attempt = JobAttempt.objects.select_related("job__tenant", "job__project__tenant").get(
        pk=claimed[0]
    )
    # The dispatcher "dies" after Slurm accepted the job, before recording its id.
    backend = for_cluster(slurm_cluster)
    identity = dispatch.prepare_identity(job=attempt.job, cluster=slurm_cluster, backend=backend)
    dispatch.prepare(attempt, cluster=slurm_cluster, identity=identity)
    backend_id = backend.submit(dispatch.build_submission(attempt, slurm_cluster, identity))
    attempt.refresh_from_db()
    assert attempt.state == AttemptState.SUBMITTING and attempt.backend_id == ""
    time.sleep(1.2)
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    attempt.refresh_from_db()
    assert (attempt.state, attempt.backend_id) == (AttemptState.SUBMITTED, backend_id)
    assert slurm_jobs_tagged(attempt.tag) == [backend_id]
    assert "adopted" in Job.objects.get(pk=job_id).events.get(to_state="SUBMITTED").reason
    assert drive(job_id).state == "SUCCEEDED"


def test_a_claim_slurm_never_saw_is_submitted_again(acme, slurm_cluster, settings):
    settings.TORUS_DISPATCH_GRACE_SECONDS = 1
    _queued(acme, 1, command=("true",))
    (attempt_id,) = dispatch.claim(cluster=slurm_cluster, limit=10)  # then the worker dies
    time.sleep(1.2)
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    attempt = JobAttempt.objects.get(pk=attempt_id)
    assert attempt.state == AttemptState.SUBMITTED
    assert slurm_jobs_tagged(attempt.tag) == [attempt.backend_id]


def _prepared_submission(acme, cluster):
    _queued(acme, 1, command=("true",))
    (attempt_id,) = dispatch.claim(cluster=cluster, limit=10)
    attempt = JobAttempt.objects.select_related("job__tenant", "job__project__tenant").get(
        pk=attempt_id
    )
    identity = dispatch.prepare_identity(
        job=attempt.job, cluster=cluster, backend=for_cluster(cluster)
    )
    dispatch.prepare(attempt, cluster=cluster, identity=identity)
    return attempt, dispatch.build_submission(attempt, cluster, identity)


def test_slurmrestd_not_reached_falls_back_to_sbatch_one_that_timed_out_does_not(
    acme, slurm_cluster
):
    # a port where nothing listens: the request was never sent, sbatch submits it
    slurm_cluster.config = {**slurm_cluster.config, "restd_url": "http://127.0.0.1:9"}
    attempt, submission = _prepared_submission(acme, slurm_cluster)
    backend_id = for_cluster(slurm_cluster).submit(submission)
    assert slurm_jobs_tagged(attempt.tag) == [backend_id]

    # a server that takes the request and never answers: it may have been done, so sbatch
    # must not submit it again (it stays SUBMITTING for the dispatcher's recovery)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        slurm_cluster.config = {
            **slurm_cluster.config,
            "restd_url": f"http://127.0.0.1:{port}",
            "timeout": 1,
        }
        attempt, submission = _prepared_submission(acme, slurm_cluster)
        with pytest.raises(ClusterUnavailable, match="timed out"):
            for_cluster(slurm_cluster).submit(submission)
    assert slurm_jobs_tagged(attempt.tag) == []


class _ResettingProxy:
    """A TCP relay to slurmrestd that can reset the next request sent on a kept-alive
    connection, as a slurmrestd restarted or timing out idle clients does."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.reset_next = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._back, args=(upstream, client), daemon=True).start()

    def _relay(self, client, upstream):
        first = True
        while data := client.recv(65536):
            if not first and self.reset_next.is_set():
                self.reset_next.clear()
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                client.close()
                upstream.close()
                return
            first = False
            upstream.sendall(data)

    @staticmethod
    def _back(upstream, client):
        try:
            while data := upstream.recv(65536):
                client.sendall(data)
        except OSError:
            pass


def test_a_read_on_a_connection_slurmrestd_reset_is_sent_again_a_write_is_not(slurm_cluster):
    proxy = _ResettingProxy(("127.0.0.1", 16820))
    slurm_cluster.config = {**slurm_cluster.config, "restd_url": f"http://127.0.0.1:{proxy.port}"}
    backend = for_cluster(slurm_cluster)
    backend.ping()  # the connection is now kept alive in the pool
    proxy.reset_next.set()
    backend.ping()  # reset on the kept connection: sent again on a fresh one
    assert not proxy.reset_next.is_set()

    # a write's outcome is unknown after a reset: it is not sent twice, the caller is told
    proxy.reset_next.set()
    with pytest.raises(ClusterUnavailable, match="slurmrestd"):
        backend.clear_nice("999999")
    proxy.server.close()


def test_reconciler_rpcs_do_not_grow_with_the_number_of_jobs(acme, slurm_cluster):
    def rpcs_of_one_pass() -> tuple[int, int]:
        # The fewest over three passes: anything else reading the controller meanwhile can
        # only add to a pass's count, never take from it.
        seen = []
        for _ in range(3):
            slurm("sdiag", "--reset")
            stats = reconcile.reconcile_cluster(cluster_id=slurm_cluster.pk)
            seen.append((sdiag_rpcs(), stats["rpcs"]))
        return min(seen)

    _queued(acme, 2)
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    reconcile.reconcile_cluster(cluster_id=slurm_cluster.pk)
    few = rpcs_of_one_pass()
    _queued(acme, 14)
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    reconcile.reconcile_cluster(cluster_id=slurm_cluster.pk)
    assert JobAttempt.objects.filter(state__in=["SUBMITTED", "RUNNING"]).count() == 16
    many = rpcs_of_one_pass()
    assert few == many, (few, many)
    assert many[1] == 3


def test_a_controller_that_does_not_answer_fails_no_job(acme, slurm_cluster):
    (job_id,) = _queued(acme, 1, command=("sleep", "20"))
    drive(job_id, until={"RUNNING"})
    slurm_cluster.config = {**slurm_cluster.config, "restd_url": "http://127.0.0.1:9"}
    slurm_cluster.save()
    for _ in range(3):
        stats = reconcile.reconcile_cluster(cluster_id=slurm_cluster.pk)
        assert stats["updated"] == 0
    slurm_cluster.refresh_from_db()
    assert not slurm_cluster.healthy and "127.0.0.1:9" in slurm_cluster.last_error
    assert Job.objects.get(pk=job_id).state == "RUNNING"
    clusters = acme.client(Role.VIEWER).get(reverse("cluster-list")).json()["results"]
    assert clusters[0]["healthy"] is False


def test_readyz_reports_a_cluster_whose_controller_does_not_answer(slurm_cluster, celery_worker):
    from django.test import Client

    assert Client().get("/readyz").json()["checks"]["clusters"]["status"] == "ok"
    slurm_cluster.config = {**slurm_cluster.config, "restd_url": "http://127.0.0.1:9"}
    slurm_cluster.save()
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["clusters"]["error"].startswith("RuntimeError: local: ")


def test_a_tree_that_cannot_be_made_holds_that_job_back_not_the_pass(acme, slurm_cluster):
    blocked, fine = _queued(acme, 2, command=("true",))
    tenant_dir = project_root(acme.project).parent
    tenant_dir.mkdir(parents=True)  # made by something else, with the wrong mode: put right
    os.chmod(tenant_dir, 0o777)
    squatter = paths.job_dir(Job.objects.get(pk=blocked))
    squatter.parent.mkdir(parents=True)
    squatter.write_text("not a directory")
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    assert JobAttempt.objects.get(job_id=blocked).state == AttemptState.QUEUED  # back in line
    assert JobAttempt.objects.get(job_id=fine).state == AttemptState.SUBMITTED
    assert os.stat(tenant_dir).st_mode & 0o7777 == 0o2750
    squatter.unlink()
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    assert drive(blocked).state == "SUCCEEDED"


def test_a_directory_left_half_made_by_a_killed_dispatcher_is_finished(acme, slurm_cluster):
    """Killed between the mkdir and the chown: the job's directory is the platform's, mode
    0700 (02700 under the setgid project tree). The next pass hands it to the job's user."""
    (job_id,) = _queued(acme, 1, command=("true",))
    job = Job.objects.select_related("tenant", "project__tenant").get(pk=job_id)
    identity = dispatch.prepare_identity(
        job=job, cluster=slurm_cluster, backend=for_cluster(slurm_cluster)
    )
    job_dir = paths.job_dir(job)
    os.mkdir(job_dir, 0o700)
    assert os.stat(job_dir).st_mode & 0o7777 == 0o2700  # the setgid bit came from the parent
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    assert os.stat(job_dir).st_uid == identity.uid
    assert drive(job_id).state == "SUCCEEDED"


def test_recording_a_pass_moves_each_claimed_job_once_and_announces_it(
    acme, cluster, monkeypatch, django_assert_num_queries, django_capture_on_commit_callbacks
):
    """What a pass records after the cluster accepted its attempts: each attempt SUBMITTED
    with its backend id, each job still QUEUED moved with its event, published to its live
    viewers. A job cancelled meanwhile stays cancelled; an attempt not claimed is left."""
    ids = [submit(acme.client(Role.MEMBER), acme.project, command=["true"])["id"] for _ in range(3)]
    claimed = dispatch.claim(cluster=cluster, limit=2)
    attempts = {a.pk: a for a in JobAttempt.objects.filter(pk__in=claimed)}
    cancelled = next(iter(attempts.values())).job
    Job.objects.filter(pk=cancelled.pk).update(state="CANCELLED")
    published = []
    monkeypatch.setattr(extras, "_announcers", {"test": lambda *, events: published.extend(events)})
    accepted = {pk: f"{100 + n}" for n, pk in enumerate(attempts)}
    with django_capture_on_commit_callbacks(execute=True), django_assert_num_queries(1):
        dispatch.mark_submitted_many(submitted=accepted, via="Slurm")
    for pk, backend_id in accepted.items():
        attempt = JobAttempt.objects.select_related("job").get(pk=pk)
        assert (attempt.state, attempt.backend_id) == ("SUBMITTED", backend_id)
        assert attempt.submitted_at is not None
        events = list(attempt.job.events.filter(to_state="SUBMITTED"))
        if attempt.job_id == cancelled.pk:
            assert attempt.job.state == "CANCELLED" and events == []
            continue
        reason = f"submitted as Slurm job {backend_id}"
        assert (attempt.job.state, attempt.job.state_reason) == ("SUBMITTED", reason)
        [event] = events
        assert (event.from_state, event.attempt_id, event.reason) == ("QUEUED", pk, reason)
        [sent] = published
        assert (sent.pk, sent.job_id, sent.job.tenant_id, sent.job.project_id) == (
            event.pk,
            attempt.job_id,
            acme.tenant.pk,
            acme.project.pk,
        )
        assert (sent.attempt.number, sent.from_state, sent.to_state, sent.reason) == (
            1,
            "QUEUED",
            "SUBMITTED",
            reason,
        )
        assert sent.created_at == event.created_at
    (left,) = set(ids) - {str(a.job_id) for a in attempts.values()}
    assert Job.objects.get(pk=left).state == "QUEUED"
    assert JobAttempt.objects.get(job_id=left).state == "QUEUED"


def test_an_association_the_cluster_lost_is_made_again_and_the_job_runs(acme, slurm_cluster):
    from apps.identity.models import ClusterAssociation

    first = drive(_queued(acme, 1, command=("true",))[0])
    assert first.state == "SUCCEEDED", first.state_reason
    made = ClusterAssociation.objects.get(cluster=slurm_cluster)
    # behind the platform's back (an accounting database reset, an operator's sacctmgr)
    slurm("sacctmgr", "-i", "delete", "user", made.user, f"account={made.account}")
    second = drive(_queued(acme, 1, command=("true",))[0], timeout=120)
    assert second.state == "SUCCEEDED", second.state_reason
    assert (
        made.user
        in slurm(
            "sacctmgr", "-n", "-P", "show", "assoc", f"account={made.account}", "format=user"
        ).split()
    )
