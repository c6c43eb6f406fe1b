"""The Torus Python SDK and CLI. Talks HTTP only; never imports Django or the portal's apps."""

from __future__ import annotations

from torus.client import Client
from torus.errors import TorusError
from torus.metrics import log_metrics

__all__ = ["Client", "TorusError", "log_metrics"]
