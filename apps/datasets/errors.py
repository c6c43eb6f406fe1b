"""The datasets' errors that clients act on: a conflict with a code (409), storage that could
not be prepared (503)."""

from apps.core.exceptions import Conflict, Unavailable


class DatasetConflict(Conflict):
    """A conflict with a code clients can act on (HTTP 409)."""

    code = "conflict"

    def __init__(self, message: str, *, code: str | None = None, **details):
        super().__init__(message)
        if code:
            self.code = code
        self.details = details


class StorageUnavailable(Unavailable):
    code = "storage_unavailable"
    message = "The project's storage could not be prepared (no worker answered); try again later."
