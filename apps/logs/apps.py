from django.apps import AppConfig


class LogsConfig(AppConfig):
    name = "apps.logs"
    label = "logs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.logs import health  # noqa: F401  (registers the /readyz check)
