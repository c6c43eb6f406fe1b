"""Domain errors raised by services; the API layer renders them (see core/api/errors.py).

Field errors use django.core.exceptions.ValidationError and refusals use
django.core.exceptions.PermissionDenied, so domain code never imports the API layer.
"""


class Conflict(Exception):
    """The request conflicts with the current state (HTTP 409)."""
