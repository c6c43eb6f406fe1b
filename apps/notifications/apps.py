"""Notifications' AppConfig: ready() registers the announcer of jobs' state changes (jobs
never imports notifications: apps/jobs/extras.py)."""

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "apps.notifications"
    label = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.jobs import extras
        from apps.notifications import delivery  # noqa: F401  (its series for /metrics)
        from apps.notifications.events import job_events_notify, job_notices_notify

        extras.announcer_register(job_events_notify)
        extras.noticer_register(job_notices_notify)
