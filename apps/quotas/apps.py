from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "apps.quotas"
    label = "quotas"
    default_auto_field = "django.db.models.BigAutoField"
