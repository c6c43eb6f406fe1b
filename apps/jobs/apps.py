from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.jobs import submit_cache
        from apps.jobs.admission import admit_tenant
        from apps.jobs.models import Job
        from apps.jobs.services import project_jobs_stop
        from apps.quotas.services import on_limits_changed
        from apps.tenancy.lifecycle import history_register, stop_register

        # A quota raised, lowered or removed: admit what now fits (quotas never import jobs).
        on_limits_changed(admit_tenant)
        submit_cache.connect_signals()  # cached placements and quota presence: invalidation
        # A project that ran jobs is archived, not deleted; archiving it cancels what still runs.
        history_register("tenancy.Project", "jobs", lambda p: Job.objects.filter(project=p).count())
        stop_register("tenancy.Project", project_jobs_stop)
