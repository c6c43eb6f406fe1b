from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "apps.tenancy"
    label = "tenancy"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Sign-ins are Django's own events; auditing them is the only signal use here.
        from apps.tenancy import signin_audit  # noqa: F401
        from apps.tenancy.api import schema  # noqa: F401  (OpenAPI extension registration)
