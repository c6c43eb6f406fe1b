"""One ASGI application: the serving gateway under /serve/, Django for the rest of HTTP,
Channels for websockets under /ws/."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

from apps.core.streaming import StreamingASGIHandler  # noqa: E402

# Django's handler, with request bodies streamed to the views that ask for it (uploads)
django_asgi = StreamingASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from apps.core import plain_http  # noqa: E402
from apps.serving.gateway import PREFIX as SERVE_PREFIX  # noqa: E402
from apps.serving.gateway.app import application as serving_gateway  # noqa: E402
from apps.tenancy.websocket_auth import TokenOrSessionActorMiddleware  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402


async def http(scope, receive, send):
    """Model deployments' OpenAI paths go to the gateway before Django sees them; the hot
    plain API calls to Django's WSGI handler in a thread pool (apps/core/plain_http.py)."""
    if scope["path"].startswith(SERVE_PREFIX):
        return await serving_gateway(scope, receive, send)
    if plain_http.takes(scope):
        return await plain_http.serve(scope, receive, send)
    return await django_asgi(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http,
        "websocket": AllowedHostsOriginValidator(
            TokenOrSessionActorMiddleware(URLRouter(websocket_urlpatterns))
        ),
    }
)
