"""Notifications' AppConfig: ready() registers the announcer of jobs' state changes, the
noticer of what else happens to jobs (apps/jobs/extras.py) and the listener of deployments'
health (apps/serving/listeners.py): neither jobs nor serving imports notifications."""

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "apps.notifications"
    label = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.jobs import extras
        from apps.notifications import delivery  # noqa: F401  (its series for /metrics)
        from apps.notifications.events import (
            deployment_health_notify,
            job_events_notify,
            job_notices_notify,
        )
        from apps.serving import listeners

        extras.announcer_register(job_events_notify)
        extras.noticer_register(job_notices_notify)
        listeners.listener_register(deployment_health_notify)
