from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "apps.serving"
    label = "serving"
    verbose_name = "Model deployments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.jobs.kinds import kind_register
        from apps.jobs.models import Kind
        from apps.serving import routes, telemetry  # noqa: F401  (its series for /metrics)
        from apps.serving.models import Deployment, Replica
        from apps.serving.replicas import serve_environment, serve_prepare
        from apps.serving.services import deployment_revive, deployment_stop
        from apps.tenancy import lifecycle

        # a serve job runs only as a live replica, with its deployment's engine key
        kind_register(Kind.SERVE, prepare=serve_prepare, secrets=serve_environment)
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
