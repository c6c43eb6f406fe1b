"""Compute's read-side queries."""

from django.conf import settings
from django.db.models import Q, QuerySet

from apps.compute.models import Cluster

# Cluster.config key naming the control plane that drives the cluster (absent: the default one)
CONTROL_PLANE_KEY = "control_plane"


def clusters_controlled(*, plane: str | None = None) -> QuerySet:
    """The clusters this control plane (the setting TORUS_CONTROL_PLANE, or `plane`)
    reconciles, dispatches to and estimates: those whose config names it, or, for the
    default plane (""), those that name none. Several planes may share one database, each
    with its own broker and cache, and never drive the same cluster twice."""
    plane = settings.TORUS_CONTROL_PLANE if plane is None else plane
    named = Q(**{f"config__{CONTROL_PLANE_KEY}": plane})
    if plane:
        return Cluster.objects.filter(named)
    return Cluster.objects.filter(
        named | ~Q(config__has_key=CONTROL_PLANE_KEY) | Q(**{f"config__{CONTROL_PLANE_KEY}": None})
    )
