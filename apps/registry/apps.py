from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "apps.registry"
    label = "registry"
    verbose_name = "Model registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.registry.models import ModelVersion, RegisteredModel
        from apps.tenancy.lifecycle import history_register

        # what makes a project or a model history (archived, never deleted)
        history_register(
            "tenancy.Project",
            "models",
            lambda p: RegisteredModel.objects.filter(project=p).count(),
        )
        history_register(
            "registry.RegisteredModel",
            "versions",
            lambda m: ModelVersion.objects.filter(model=m).count(),
        )
