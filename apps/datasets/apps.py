from django.apps import AppConfig
from django.conf import settings


class DatasetsConfig(AppConfig):
    name = "apps.datasets"
    label = "datasets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.core.streaming import register_streaming_body
        from apps.datasets.models import Dataset, DatasetVersion
        from apps.datasets.selectors import storage_bytes_by_project
        from apps.quotas.selectors import on_storage_usage
        from apps.tenancy.lifecycle import history_register

        # uploads stream to storage (apps/core/streaming.py); quotas count the stored bytes
        register_streaming_body(
            r"^/api/v1/datasets/[^/]+/versions/[0-9]+/upload/?$", methods=("PUT",)
        )
        on_storage_usage(storage_bytes_by_project)
        # what makes a project or a dataset history (archived, never deleted)
        history_register(
            "tenancy.Project", "datasets", lambda p: Dataset.objects.filter(project=p).count()
        )
        history_register(
            "datasets.Dataset",
            "versions",
            lambda d: DatasetVersion.objects.filter(dataset=d).count(),
        )
        if settings.TORUS_S3_ACCESS_KEY:
            from apps.datasets import health  # noqa: F401  (registers the /readyz check)
