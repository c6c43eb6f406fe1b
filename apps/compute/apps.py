from django.apps import AppConfig


class ComputeConfig(AppConfig):
    name = "apps.compute"
    label = "compute"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.compute import health  # noqa: F401  (registers the /readyz check)
