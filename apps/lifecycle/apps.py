from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "apps.lifecycle"
    verbose_name = "Archive, restore and purge"
    default_auto_field = "django.db.models.BigAutoField"
