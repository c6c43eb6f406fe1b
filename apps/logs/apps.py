from django.apps import AppConfig


class LogsConfig(AppConfig):
    name = "apps.logs"
    label = "logs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.jobs import extras
        from apps.logs import health, telemetry  # noqa: F401  (the /readyz check, its series)
        from apps.logs.live import publish_states
        from apps.logs.selectors import job_latest_metrics, job_signature_names

        # what logs adds to jobs, which never imports logs (apps/jobs/extras.py)
        extras.announcer_register(publish_states)
        extras.annotation_register(name="signature_names", expression=job_signature_names)
        extras.latest_metrics_register(job_latest_metrics)
