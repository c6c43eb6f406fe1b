from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "apps.lifecycle"
    verbose_name = "Archive, restore and purge"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.lifecycle.selectors import purge_state
        from apps.tenancy.lifecycle import purge_state_register

        purge_state_register(purge_state)  # a thing being purged, or purged, is not restored
