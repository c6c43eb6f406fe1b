from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "apps.registry"
    label = "registry"
    verbose_name = "Model registry"
    default_auto_field = "django.db.models.BigAutoField"
