"""WSGI entry point (HTTP only; the ASGI application in config/asgi.py also serves websockets)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()
