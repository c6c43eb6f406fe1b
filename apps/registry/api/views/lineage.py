"""Registry endpoint of a dataset version's lineage: /api/v1/lineage/dataset-versions/{id}."""

import uuid

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.registry import lineage
from apps.tenancy.access import actor_for


class DatasetVersionLineageView(APIView):
    """Every job that read a dataset version and every model version that came from it."""

    resource = "lineage"
    policy_action = "read"

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, pk: uuid.UUID):
        from apps.datasets.models import DatasetVersion
        from apps.tenancy.policies import authorize

        actor = actor_for(request)
        dv = DatasetVersion.objects.visible_to(actor).filter(pk=pk).first()
        if dv is None:
            raise Http404("Dataset version not found.")
        authorize(actor, resource="lineage", action="read", tenant_id=dv.tenant_id_value)
        return Response(lineage.dataset_version_lineage(actor=actor, dataset_version=dv))
