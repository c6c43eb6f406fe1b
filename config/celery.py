"""The Celery application; tasks live in each app's tasks.py and are found automatically."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("torus")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
