from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "apps.serving"
    label = "serving"
    verbose_name = "Model deployments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.serving import routes

        # a project member added or removed: the gateway's routes of its deployments change
        routes.connect_signals()
