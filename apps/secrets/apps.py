from django.apps import AppConfig


class SecretsConfig(AppConfig):
    name = "apps.secrets"
    label = "project_secrets"  # not "secrets": the standard library's module has that name
    verbose_name = "Project secrets"
    default_auto_field = "django.db.models.BigAutoField"
