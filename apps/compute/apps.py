from django.apps import AppConfig


class ComputeConfig(AppConfig):
    name = "apps.compute"
    label = "compute"
    default_auto_field = "django.db.models.BigAutoField"
