from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "apps.serving"
    label = "serving"
    verbose_name = "Model deployments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.serving import routes
        from apps.serving.models import Deployment, Replica
        from apps.serving.services import deployment_revive, deployment_stop
        from apps.tenancy import lifecycle

        # a project member added or removed: the gateway's routes of its deployments change
        routes.connect_signals()
        # a deployment that ran replicas is archived, not deleted; a project's or a model's
        # deployments are archived (stopped) and restored with it
        lifecycle.history_register(
            "tenancy.Project", "deployments", lambda p: Deployment.objects.filter(project=p).count()
        )
        lifecycle.history_register(
            "serving.Deployment", "replicas", lambda d: Replica.objects.filter(deployment=d).count()
        )
        lifecycle.contains_register(
            "tenancy.Project", lambda p: Deployment.objects.filter(project=p)
        )
        lifecycle.contains_register(
            "registry.RegisteredModel", lambda m: Deployment.objects.filter(model=m)
        )
        lifecycle.stop_register("serving.Deployment", deployment_stop)
        lifecycle.restore_register("serving.Deployment", deployment_revive)
