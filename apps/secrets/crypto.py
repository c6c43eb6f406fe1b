"""Encryption at rest of project secrets: Fernet (AES-128-CBC + HMAC-SHA256) under keys
derived from the platform's secret material, rotatable.

settings.TORUS_SECRETS_KEYS lists the key material, newest first (default: the platform's
SECRET_KEY alone). Each entry becomes a Fernet key through HKDF-SHA256; every key decrypts
(MultiFernet), the first encrypts. Rotation: put the new material first, run
`manage.py secrets_rotate` (every value re-encrypted under it), then drop the old one."""

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

SALT = b"torus/project-secrets/v1"

__all__ = ["InvalidToken", "decrypt", "encrypt", "fernet", "reencrypt"]


def derive(material: str) -> Fernet:
    """A Fernet key from one entry of key material (a passphrase of any length)."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=SALT, info=b"fernet").derive(
        material.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def key_material() -> tuple[str, ...]:
    keys = tuple(k for k in getattr(settings, "TORUS_SECRETS_KEYS", []) if k)
    return keys or (settings.SECRET_KEY,)


@lru_cache(maxsize=4)
def _fernet(material: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([derive(entry) for entry in material])


def fernet() -> MultiFernet:
    """The keys of now (cached per key list: tests and a reload change it)."""
    return _fernet(key_material())


def encrypt(value: str) -> str:
    return fernet().encrypt(value.encode()).decode()


def decrypt(token: str) -> str:
    """The plaintext; InvalidToken when no key of now opens it."""
    return fernet().decrypt(token.encode()).decode()


def reencrypt(token: str) -> str:
    """The same value under the newest key (MultiFernet.rotate)."""
    return fernet().rotate(token.encode()).decode()
