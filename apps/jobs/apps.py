"""Jobs' AppConfig: ready() registers jobs' hooks in quotas, secrets, registry and tenancy
(below it)."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.jobs import lineage, submit_cache, telemetry  # noqa: F401  (its collector)
        from apps.jobs.admission import admit_tenant
        from apps.jobs.models import Job, JobAttempt
        from apps.jobs.services import project_jobs_stop
        from apps.jobs.spec_fields import RESERVED_ENV, RESERVED_ENV_PREFIXES
        from apps.quotas.history import attempts_visible_register
        from apps.quotas.services import on_limits_changed
        from apps.registry.lineage import readers_register
        from apps.secrets.rules import reserved_register
        from apps.tenancy.lifecycle import history_register, stop_register

        # A quota raised, lowered or removed: admit what now fits (quotas never import jobs).
        on_limits_changed(admit_tenant)
        # The utilisation history counts the attempts running now (quotas never import jobs).
        attempts_visible_register(lambda actor: JobAttempt.objects.visible_to(actor))
        # A secret may not be named as a variable the platform sets in every job.
        reserved_register(
            lambda name: name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES)
        )
        # The registry's API serves lineage, which reads attempts (the registry never imports jobs).
        readers_register(
            version=lineage.version_lineage,
            versions=lineage.versions_for_lineage,
            dataset_version=lineage.dataset_version_lineage,
            attempt=lineage.attempt_visible,
        )
        submit_cache.connect_signals()  # cached placements and quota presence: invalidation
        # A project that ran jobs is archived, not deleted; archiving it cancels what still runs.
        history_register("tenancy.Project", "jobs", lambda p: Job.objects.filter(project=p).count())
        stop_register("tenancy.Project", project_jobs_stop)
