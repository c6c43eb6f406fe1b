"""Log search endpoints: full-text search over job output, and the lines around a hit."""

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.schema import ErrorSerializer
from apps.core.api.validation import validated
from apps.logs.api.serializers import (
    LogContextQuerySerializer,
    LogContextSerializer,
    LogSearchQuerySerializer,
    LogSearchResultSerializer,
)
from apps.logs.search import SearchUnavailable, log_context, log_search
from apps.tenancy.access import actor_for

UNAVAILABLE_RESPONSE = OpenApiResponse(
    ErrorSerializer, description="Elasticsearch is unreachable; try again later."
)


def present(query_params) -> dict:
    """The parameters with a value: a search form's empty fields mean "no filter"."""
    return {key: value for key, value in query_params.items() if value != ""}


class LogSearchUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Log search is unavailable right now; try again."
    default_code = "unavailable"


class LogSearchView(APIView):
    """Search the log lines of every job in your tenants, newest first."""

    resource, policy_action = "logs", "search"

    @extend_schema(
        parameters=[LogSearchQuerySerializer],
        responses={200: LogSearchResultSerializer, 503: UNAVAILABLE_RESPONSE},
    )
    def get(self, request):
        data = validated(LogSearchQuerySerializer, present(request.query_params))
        try:
            result = log_search(
                actor=actor_for(request),
                query=data["q"],
                project=data.get("project"),
                job=data.get("job"),
                attempt=data.get("attempt"),
                stream=data.get("stream"),
                level=data.get("level"),
                node=data.get("node"),
                rank=data.get("rank"),
                since=data.get("since"),
                until=data.get("until"),
                size=data["size"],
                search_after=data.get("after"),
                histogram=data["histogram"],
                histogram_interval=data.get("interval"),
            )
        except SearchUnavailable as exc:
            raise LogSearchUnavailable(str(exc)) from exc
        return Response(result)


class LogContextView(APIView):
    """The lines before and after a search hit, in the same attempt and stream."""

    resource, policy_action = "logs", "context"

    @extend_schema(
        parameters=[LogContextQuerySerializer],
        responses={200: LogContextSerializer, 503: UNAVAILABLE_RESPONSE},
    )
    def get(self, request):
        params = LogContextQuerySerializer(data=present(request.query_params))
        params.is_valid(raise_exception=True)
        data = params.validated_data
        try:
            result = log_context(
                actor=actor_for(request),
                hit_id=data["id"],
                before=data["before"],
                after=data["after"],
            )
        except SearchUnavailable as exc:
            raise LogSearchUnavailable(str(exc)) from exc
        if result is None:
            raise Http404
        return Response(result)
