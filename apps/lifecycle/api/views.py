"""Purges, for the platform's staff only (Django `is_staff`): list them, request one (run by
the worker: 202 with the purge; 409 with the reason when it may not run)."""

from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response

from apps.lifecycle.api.serializers import PurgeRequestSerializer, PurgeSerializer
from apps.lifecycle.models import Purge
from apps.lifecycle.purge import purge_request
from apps.lifecycle.tasks import purge_run_task


class PurgeViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    permission_classes = [IsAdminUser]
    serializer_class = PurgeSerializer
    queryset = Purge.objects.select_related("requested_by").order_by("-created_at")
    filterset_fields = ["state", "kind"]

    @extend_schema(request=PurgeRequestSerializer, responses={202: PurgeSerializer})
    def create(self, request, *args, **kwargs):
        data = PurgeRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        with transaction.atomic():
            purge = purge_request(
                kind=data.validated_data["kind"],
                target_id=data.validated_data["id"],
                requested_by=request.user,
            )
            purge_id = str(purge.pk)
            transaction.on_commit(lambda: purge_run_task.delay(purge_id))
        return Response(PurgeSerializer(purge).data, status=status.HTTP_202_ACCEPTED)
