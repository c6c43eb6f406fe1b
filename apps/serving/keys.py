"""Secrets of deployments.

- The engine key: what the gateway and the reconciler present to a deployment's replicas
  (llama-server --api-key). Derived, never stored: an HMAC of the platform's SECRET_KEY and the
  deployment id. Replicas get it in their environment (LLAMA_API_KEY: the variable this
  llama-server reads for --api-key), never in argv,
  which `ps` shows to every user of the node.
- Deployment keys: `tsk_...` bearer tokens for one deployment's gateway path; the plaintext is
  shown once, only its sha256 is kept.
"""

import hashlib
import hmac
import secrets

from django.conf import settings

KEY_PREFIX = "tsk_"


def engine_key(*, deployment_id) -> str:
    digest = hmac.new(
        settings.SECRET_KEY.encode(), f"serving-engine:{deployment_id}".encode(), hashlib.sha256
    )
    return digest.hexdigest()


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str, str]:
    """(plaintext, display prefix, sha256) of a new deployment key."""
    token = KEY_PREFIX + secrets.token_urlsafe(32)
    return token, token[:12], token_hash(token)
