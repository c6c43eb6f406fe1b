"""Cursor pagination for every list: stable under inserts, ordering chosen with ?ordering=."""

from rest_framework import pagination


class CursorPagination(pagination.CursorPagination):
    ordering = "-created_at"
    page_size_query_param = "page_size"
    max_page_size = 500
