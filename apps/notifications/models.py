"""Subscriptions (who is told of what, where) and notifications (one message to send, with
its tries)."""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from apps.core.models import TenantModel


class Event(models.TextChoices):
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # and timed out; with the failure signatures and the last lines
    RESTARTING = "restarting"  # with the cause
    CANCELLED = "cancelled"
    WAITING_TOO_LONG = "waiting_too_long"  # still waiting past its first expected start's p90
    STALLED = "stalled"  # running, with no output line and no CPU use for a while
    IDLE = "idle"  # its project's idle policy: told, then cancelled after the grace
    DEPLOY_FAILING = "deploy_failing"  # a deployment that was serving no longer is
    DEPLOY_RECOVERED = "deploy_recovered"  # and serves again


class Channel(models.TextChoices):
    EMAIL = "email"
    WEBHOOK = "webhook"  # JSON, signed (X-Torus-Signature), as the registry's webhooks
    SLACK = "slack"  # the incoming-webhook formats of the chat services
    FEISHU = "feishu"
    DINGTALK = "dingtalk"
    WECOM = "wecom"
    INAPP = "inapp"  # the UI's bell only (every subscription's events reach the bell too)


class NotificationDefault(TenantModel):
    """A tenant admin's default: every member who has made no subscription of their own in the
    tenant is told of `events` of their own jobs on `channel` (their account's e-mail, or the
    bell), through a subscription made for them (Subscription.default) when first needed."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    events = ArrayField(models.CharField(max_length=16, choices=Event.choices))
    channel = models.CharField(
        max_length=16, choices=[(Channel.EMAIL, "Email"), (Channel.INAPP, "Inapp")]
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "channel"], name="uniq_notify_default")
        ]
        ordering = ["channel"]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.channel} {','.join(self.events)}"


class Subscription(TenantModel):
    """A person told of `events` of one job, of a project's jobs, or of all their own jobs
    (neither set), on one channel."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="subscriptions"
    )
    project = models.ForeignKey(
        "tenancy.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    events = ArrayField(models.CharField(max_length=16, choices=Event.choices))
    channel = models.CharField(max_length=16, choices=Channel.choices)
    address = models.CharField(max_length=2048, blank=True)  # e-mail, https URL ("": inapp)
    secret = models.CharField(max_length=64, blank=True, default="")  # signs webhook bodies
    failing_since = models.DateTimeField(null=True, blank=True)  # its last message failed
    last_error = models.CharField(max_length=500, blank=True, default="")
    # made from the tenant's default (apps/notifications/defaults.py); None: the person's own
    default = models.ForeignKey(
        NotificationDefault, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )

    class Meta:
        indexes = [models.Index(fields=["tenant", "user"])]
        ordering = ["-created_at", "id"]

    def __str__(self) -> str:
        return f"{self.user_id} {self.channel} {','.join(self.events)}"


class NotificationState(models.TextChoices):
    PENDING = "PENDING"
    SENT = "SENT"
    FAILED = "FAILED"  # tried for TORUS_NOTIFY_RETRY_HOURS, or refused for good


class Notification(TenantModel):
    """One message to a subscription: the events of one job that came within a minute of each
    other (one message per job per minute), or a digest of many jobs' events (a person past
    TORUS_NOTIFY_HOURLY_LIMIT messages in an hour). `key` is the idempotency key receivers
    see; a message is sent at least once."""

    tenant_path = "subscription__tenant"

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="notifications"
    )
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    digest = models.BooleanField(default=False)
    items = models.JSONField(default=list)  # [{event, job, name, state, reason, at, ...}]
    key = models.CharField(max_length=80, unique=True)
    state = models.CharField(
        max_length=8, choices=NotificationState.choices, default=NotificationState.PENDING
    )
    not_before = models.DateTimeField()  # the minute's or the hour's wait
    next_try_at = models.DateTimeField(null=True, blank=True)  # a retry's backoff, a lease
    tries = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=500, blank=True, default="")
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["subscription", "job", "state"]),
            models.Index(
                fields=["not_before"],
                name="notification_pending",
                condition=models.Q(state="PENDING"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} {self.state}"
