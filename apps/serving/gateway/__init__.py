"""The serving gateway (apps/serving/gateway/app.py), mounted by config/asgi.py at /serve/."""

PREFIX = "/serve/"


def __getattr__(name):
    if name == "application":  # imported once Django is set up
        from apps.serving.gateway.app import application

        return application
    raise AttributeError(name)
