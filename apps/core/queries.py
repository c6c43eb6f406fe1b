"""Small helpers for reading rows with the ORM."""

from django.db.models import QuerySet


def unique_row(rows: QuerySet):
    """The row of `rows`, a lookup by a unique key, or None. Read without the model's default
    ordering, which `first()` would sort by: an ordering through foreign keys (a version's is
    its model's, then the model's project's and tenant's) joins each of those tables to sort
    one row."""
    return next(iter(rows.order_by()[:1]), None)
