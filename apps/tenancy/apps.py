from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "apps.tenancy"
    label = "tenancy"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Sign-ins are Django's own events (audited); the token cache listens for changes.
        from apps.tenancy import signin_audit  # noqa: F401
        from apps.tenancy.api import schema  # noqa: F401  (OpenAPI extension registration)
        from apps.tenancy.token_cache import connect_signals

        connect_signals()  # cached tokens re-read after a change to what they depend on
