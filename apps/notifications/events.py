"""Jobs' state changes become notifications: the announcer jobs calls after each commit
(apps/jobs/extras.py) finds the subscriptions that want each change and adds it to a pending
notification, one per subscription and job: changes within a minute of the last message about
that job go into one message, and a person past TORUS_NOTIFY_HOURLY_LIMIT messages in an hour
gets the rest in one digest at the end of that hour."""

from datetime import timedelta
from typing import NamedTuple

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from apps.jobs.models import Job, JobEvent
from apps.jobs.states import State
from apps.notifications.bell import bell_publish
from apps.notifications.defaults import defaults_apply
from apps.notifications.models import Event, Notification, NotificationState, Subscription
from apps.serving.models import Deployment
from apps.tenancy.models import Membership

EVENT_OF_STATE = {
    State.RUNNING: Event.STARTED,
    State.SUCCEEDED: Event.SUCCEEDED,
    State.FAILED: Event.FAILED,
    State.TIMEOUT: Event.FAILED,
    State.RESTARTING: Event.RESTARTING,
    State.CANCELLED: Event.CANCELLED,
}
MESSAGE_GAP = timedelta(minutes=1)  # at most one message per job per minute to a person
HOUR = timedelta(hours=1)


def job_events_notify(*, events: list[JobEvent]) -> None:
    """The announcer: called once the state changes are committed (a failure here is logged by
    the caller's on-commit machinery and loses only notifications, never a state)."""
    wanted = [(e, EVENT_OF_STATE[e.to_state]) for e in events if e.to_state in EVENT_OF_STATE]
    if not wanted:
        return
    jobs = {e.job_id: e.job for e, _ in wanted}
    items = [
        (jobs[e.job_id], kind, item_of(event=e, kind=kind, job=jobs[e.job_id]))
        for e, kind in wanted
    ]
    _notify(jobs=jobs, items=items)


def job_notices_notify(*, kind: str, reasons: dict[str, str], occurrence: str = "") -> None:
    """What happened to jobs besides a state change (apps/jobs/extras.py notice): waiting
    past the p90 first predicted for the start, stalled, idle; `reasons` by job id (empty:
    the job's own state reason)."""
    jobs = {
        str(j.pk): j for j in Job.objects.filter(pk__in=list(reasons)).select_related("project")
    }
    now = timezone.now().isoformat()
    suffix = f"-{occurrence}" if occurrence else ""
    items = [
        (job, kind, _item(
            kind=kind, event_id=f"{kind}-{pk}{suffix}", job=job, state=job.state,
            reason=reasons[pk] or job.state_reason or f"in the cluster's queue ({job.state})",
            at=now,
        ))
        for pk, job in jobs.items()
    ]  # fmt: skip
    _notify(jobs={job.pk: job for job in jobs.values()}, items=items)


class Owner(NamedTuple):
    """What a deployment's item is matched by, as a job's is: its project, tenant, creator."""

    pk: object
    project_id: object
    tenant_id: object
    user_id: object


def deployment_health_notify(*, deployment_id, kind: str, event_id, reason: str) -> None:
    """A deployment started failing or recovered (apps/serving/listeners.py): told to the
    subscriptions of its project and its creator's own, as `deploy_failing` or
    `deploy_recovered`."""
    deployment = Deployment.objects.filter(pk=deployment_id).select_related("project").first()
    if deployment is None:
        return
    event = Event.DEPLOY_FAILING if kind == "failing" else Event.DEPLOY_RECOVERED
    owner = Owner(
        deployment.pk, deployment.project_id, deployment.tenant_id, deployment.created_by_id
    )
    item = _item(
        kind=event.value, event_id=f"{event.value}-{event_id}", job=deployment,
        state=deployment.state, reason=reason, at=timezone.now().isoformat(),
    )  # fmt: skip
    item |= {"job": "", "deployment": str(deployment.pk)}
    _notify(jobs={deployment.pk: owner}, items=[(owner, event.value, item)])


def _notify(*, jobs: dict, items: list[tuple]) -> None:
    """Each (job, event kind, item) to the subscriptions that want it (a deployment's: an
    Owner, no job of its own)."""
    if not items:
        return
    defaults_apply(owners={(j.tenant_id, j.user_id) for j in jobs.values()})
    scope = Q(job_id__in=list(jobs)) | Q(
        job=None, project_id__in={j.project_id for j in jobs.values()}
    )
    scope |= Q(job=None, project=None, user_id__in={j.user_id for j in jobs.values()})
    # only people still in the tenant (and active): one removed is told nothing more
    member = Membership.objects.filter(tenant_id=OuterRef("tenant_id"), user_id=OuterRef("user_id"))
    subscriptions = list(
        Subscription.objects.filter(
            scope, tenant_id__in={j.tenant_id for j in jobs.values()}
        ).filter(Exists(member), user__is_active=True)
    )
    if not subscriptions:
        return
    made, bell = [], {}
    for job, kind, item in items:
        for subscription in subscriptions:
            if kind in subscription.events and _covers(subscription, job):
                of = job if isinstance(job, Job) else None
                made.append(_add(subscription=subscription, job=of, item=item))
                bell[(subscription.user_id, item["event_id"])] = (job.tenant_id, item)
    for pk in {pk for pk in made if pk}:
        current_app.send_task("notifications.deliver", args=[str(pk)])
    bell_publish(items=bell)


def _covers(subscription: Subscription, job) -> bool:
    if subscription.job_id:
        return subscription.job_id == job.pk
    if subscription.project_id:
        return subscription.project_id == job.project_id
    return subscription.user_id == job.user_id


def item_of(*, event: JobEvent, kind: str, job) -> dict:
    at = event.created_at.isoformat() if event.created_at else timezone.now().isoformat()
    return _item(
        kind=kind, event_id=str(event.pk), job=job, state=event.to_state, reason=event.reason,
        at=at,
    )  # fmt: skip


def _item(*, kind: str, event_id: str, job, state: str, reason: str, at: str) -> dict:
    """One event of a message, as messages.py and the webhooks' JSON read it."""
    return {
        "event": kind,
        "event_id": event_id,
        "job": str(job.pk),
        "name": job.name,
        "project": job.project.slug,
        "state": state,
        "reason": reason,
        "at": at,
    }


def _add(*, subscription: Subscription, job, item: dict):
    """The item as one of the subscription's pending message about this job (or of its
    digest); a new message when there is none. Returns the notification's id."""
    now = timezone.now()
    sent = Notification.objects.filter(subscription=subscription, state=NotificationState.SENT)
    hour = list(sent.filter(sent_at__gte=now - HOUR).order_by("sent_at").values_list("sent_at"))
    digest = len(hour) >= settings.TORUS_NOTIFY_HOURLY_LIMIT
    with transaction.atomic():
        pending = (
            Notification.objects.select_for_update()
            .filter(subscription=subscription, state=NotificationState.PENDING, digest=digest)
            .filter(Q(digest=True) | Q(job=job))
            .first()
        )
        if pending is not None:
            if all(i["event_id"] != item["event_id"] for i in pending.items):
                pending.items = [*pending.items, item]
                pending.save(update_fields=["items", "updated_at"])
            return pending.pk
        if digest:
            not_before = hour[0][0] + HOUR  # the end of the hour the limit was reached in
        else:
            last = sent.filter(job=job).order_by("-sent_at").values_list("sent_at", flat=True)
            last = last.first()
            not_before = max(now, last + MESSAGE_GAP) if last else now
        event_id = item["event_id"].replace("-", "")
        key = f"{subscription.pk.hex[:16]}-{'digest' if digest else 'job'}-{event_id}"
        try:
            with transaction.atomic():
                made = Notification.objects.create(
                    subscription=subscription,
                    job=None if digest else job,
                    digest=digest,
                    items=[item],
                    key=key,
                    not_before=not_before,
                )
        except IntegrityError:  # this change was announced twice: it is in that message
            return None
    return made.pk
