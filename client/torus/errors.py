"""Errors raised by the SDK, carrying the API's error envelope."""

from __future__ import annotations


class TorusError(Exception):
    """An API error: HTTP status, error code, message and per-field messages."""

    def __init__(self, message: str, *, status: int = 0, code: str = "error", fields=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.fields = fields or {}

    def __str__(self) -> str:
        text = super().__str__()
        for name, messages in self.fields.items():
            text += f"\n  {name}: {'; '.join(str(m) for m in messages)}"
        return text
