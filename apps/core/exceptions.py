"""Domain errors raised by services; the API layer renders them (see core/api/errors.py).

Field errors use django.core.exceptions.ValidationError and refusals use
django.core.exceptions.PermissionDenied, so domain code never imports the API layer.
"""


class Conflict(Exception):
    """The request conflicts with the current state (HTTP 409)."""


class Unavailable(Exception):
    """A service the request needs (the directory, a cluster) did not answer; nothing was
    written; try again later (HTTP 503). `code` and `message` are what clients see (the
    exception's own text, which may name internal addresses, goes to the log only)."""

    code = "unavailable"
    message = "A service this request needs is unavailable; try again later."


class DirectoryUnavailable(Unavailable):
    """The directory (LDAP) did not answer: nothing was written; try again later. Raised by
    the POSIX directory (apps/identity/posix_directory.py) and the LDAP sign-in
    (apps/tenancy/ldap_signin.py)."""

    code = "directory_unavailable"
    message = "The directory service is unreachable; try again later."
