"""One ASGI application: Django for HTTP, Channels for websockets under /ws/."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

from apps.core.streaming import StreamingASGIHandler  # noqa: E402

# Django's handler, with request bodies streamed to the views that ask for it (uploads)
django_asgi = StreamingASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from apps.tenancy.websocket_auth import TorusAuthMiddlewareStack  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi,
        "websocket": AllowedHostsOriginValidator(
            TorusAuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
