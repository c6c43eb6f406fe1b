"""Cursor pagination for every list: stable under inserts, ordering chosen with ?ordering=."""

from rest_framework import pagination
from rest_framework.exceptions import ValidationError


class CursorPagination(pagination.CursorPagination):
    ordering = "-created_at"
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request):
        """?page_size= from 1 to max_page_size; anything else is a 400 (DRF's own would fall
        back to the default silently). Empty is the same as absent."""
        raw = request.query_params.get(self.page_size_query_param, "")
        if raw == "":
            return self.page_size
        size = int(raw) if raw.isascii() and raw.isdigit() else 0
        if not 1 <= size <= self.max_page_size:
            raise ValidationError(
                {self.page_size_query_param: [f"A whole number from 1 to {self.max_page_size}."]}
            )
        return size

    def _get_position_from_instance(self, instance, ordering):
        """A row may bring its position as text (`cursor_position`: a page that PostgreSQL
        wrote, apps/core/api/json_rows.py), when it is ordered by creation."""
        if isinstance(instance, dict) and "cursor_position" in instance:
            if ordering[0].lstrip("-") != "created_at":
                raise ValueError(f"rows carry created_at as their position, not {ordering[0]}")
            return instance["cursor_position"]
        return super()._get_position_from_instance(instance, ordering)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
        return parameters
