from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.jobs import submit_cache
        from apps.jobs.admission import admit_tenant
        from apps.quotas.services import on_limits_changed

        # A quota raised, lowered or removed: admit what now fits (quotas never import jobs).
        on_limits_changed(admit_tenant)
        submit_cache.connect_signals()  # cached placements and quota presence: invalidation
