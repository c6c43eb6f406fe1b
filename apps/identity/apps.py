"""Identity's AppConfig: ready() hooks identity into the tenancy writes below it."""

from django.apps import AppConfig


class IdentityConfig(AppConfig):
    name = "apps.identity"
    label = "identity"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.identity.services import member_remove
        from apps.tenancy.services import member_removed_register

        # a person leaving a tenant or project leaves its groups on the cluster too
        member_removed_register(member_remove)
