"""Registry endpoints of a model's aliases: list, point, delete, and their history. Actions of
the model's viewset (apps/registry/api/views/models.py), which also gives `_version`."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.registry import selectors
from apps.registry.aliases import alias_delete, alias_set
from apps.registry.api.serializers import AliasSerializer, AliasSetSerializer


class AliasActions:
    """The alias routes of the model viewset."""

    @extend_schema(responses=AliasSerializer(many=True))
    @action(detail=True, methods=["get"], policy_action="read", pagination_class=None)
    def aliases(self, request, pk=None):
        model = self.get_object()
        rows = model.aliases.select_related("version").order_by("name")
        return Response(AliasSerializer(rows, many=True).data)

    @extend_schema(request=AliasSetSerializer, responses=AliasSerializer)
    @action(
        detail=True,
        methods=["put", "delete"],
        url_path=r"aliases/(?P<alias>[^/]{1,64})",
        policy_action="alias",
    )
    def alias(self, request, pk=None, alias=None):
        """PUT {"version": n}: point the alias at version n (audited, webhooks told).
        DELETE: remove it."""
        model = self.get_object()
        if request.method == "DELETE":
            alias_delete(actor=self.actor, model=model, name=alias)
            return Response(status=status.HTTP_204_NO_CONTENT)
        serializer = AliasSetSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = self._version(
            model,
            serializer.validated_data["version"],
            rows=model.versions.only("id", "model_id", "number", "state"),
        )
        row = alias_set(actor=self.actor, model=model, name=alias, version=version)
        return Response(AliasSerializer(row).data)

    @extend_schema(
        responses=inline_serializer(
            "AliasMove",
            fields={
                "alias": serializers.CharField(allow_null=True),
                "from_version": serializers.IntegerField(allow_null=True),
                "to_version": serializers.IntegerField(allow_null=True),
                "actor": serializers.CharField(),
                "at": serializers.DateTimeField(),
            },
            many=True,
        )
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="alias-history",
        policy_action="read",
        pagination_class=None,  # a bare array of moves
    )
    def alias_history(self, request, pk=None):
        """Every move of this model's aliases, oldest first (from the audit log)."""
        return Response(selectors.alias_history(actor=self.actor, model=self.get_object()))
