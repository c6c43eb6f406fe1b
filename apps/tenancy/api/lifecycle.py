"""Archive and restore on every archivable resource's viewset, and the history rule for its
DELETE (apps/tenancy/lifecycle.py): POST .../{id}/archive/ {"confirm": name},
POST .../{id}/restore/."""

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.exceptions import Conflict
from apps.tenancy import lifecycle


class ArchiveSerializer(serializers.Serializer):
    confirm = serializers.CharField(
        max_length=200, help_text="The slug (a project) or name (the others), typed to confirm."
    )


class LifecycleMixin:
    """For a TenantScopedViewSet of an Archivable model. `shown(thing)` renders the answer.
    (The methods' names leave `archive` to views that have one: a model version's download.)"""

    def shown(self, thing) -> dict:
        return self.get_serializer(thing).data

    def destroy_checked(self, thing) -> None:
        """Refuse (409) to delete a thing with history: archive it instead."""
        lifecycle.delete_refusal(thing)

    @extend_schema(request=ArchiveSerializer)
    @action(
        detail=True,
        methods=["post"],
        policy_action="archive",
        url_path="archive",
        url_name="archive",
    )
    def lifecycle_archive(self, request, *args, **kwargs):
        """Archive it (read-only, hidden from lists, its running work stopped); type its name
        in `confirm`. An admin restores it until an operator purges it."""
        thing = self.get_object()
        body = ArchiveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        thing = lifecycle.archive(
            actor=self.actor, thing=thing, confirm=body.validated_data["confirm"], ip=self.ip
        )
        return Response(self.shown(thing))

    @extend_schema(request=None)
    @action(
        detail=True,
        methods=["post"],
        policy_action="restore",
        url_path="restore",
        url_name="restore",
    )
    def lifecycle_restore(self, request, *args, **kwargs):
        """Restore an archived one (409 if it is not archived, or is being or was purged)."""
        try:
            thing = self.get_object()
        except Http404:
            kind = lifecycle.kind_of(self.get_queryset().model)
            state = lifecycle.purge_state(
                kind=kind, pk=self.kwargs.get("pk"), tenant_ids=self.actor.tenant_ids
            )
            if state == "done":
                raise Conflict(lifecycle.PURGED.format(kind=kind)) from None
            raise
        thing = lifecycle.restore(actor=self.actor, thing=thing, ip=self.ip)
        return Response(self.shown(thing))
