from django.apps import AppConfig


class ComputeConfig(AppConfig):
    name = "apps.compute"
    label = "compute"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.compute import (  # noqa: F401
            doctor,  # registers the deploy check of /proc (hidepid)
            health,  # registers the /readyz check
        )
