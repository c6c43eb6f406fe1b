"""Lists hide archived things: a filter backend on every list (settings.REST_FRAMEWORK). For a
model with `archived_at` (apps/core/models.py::Archivable), and for one that belongs to an
archivable project, `?archived=true` lists only the archived ones (or those in an archived
project); without it, only live ones. Other lists are untouched."""

from django.db.models import Q
from rest_framework.exceptions import ValidationError
from rest_framework.filters import BaseFilterBackend

TRUE, FALSE = ("true", "1"), ("false", "0", "")


def _archived_q(model) -> Q | None:
    names = {field.name for field in model._meta.get_fields()}
    q = None
    if "archived_at" in names:
        q = Q(archived_at__isnull=False)
    if "project" in names and hasattr(model._meta.get_field("project").related_model, "archived"):
        inside = Q(project__archived_at__isnull=False)
        q = inside if q is None else q | inside
    return q


class ArchivedFilter(BaseFilterBackend):
    def filter_queryset(self, request, queryset, view):
        if getattr(view, "action", None) != "list":
            return queryset
        q = _archived_q(queryset.model)
        if q is None:
            return queryset
        value = request.query_params.get("archived", "").lower()
        if value not in TRUE + FALSE:
            raise ValidationError({"archived": ["Use true or false."]})
        return queryset.filter(q) if value in TRUE else queryset.exclude(q)

    def get_schema_operation_parameters(self, view):
        model = getattr(getattr(view, "queryset", None), "model", None)
        if model is None or _archived_q(model) is None:
            return []
        return [
            {
                "name": "archived",
                "required": False,
                "in": "query",
                "description": "true: only archived ones (or those in an archived project); "
                "false (the default): only live ones.",
                "schema": {"type": "boolean"},
            }
        ]
