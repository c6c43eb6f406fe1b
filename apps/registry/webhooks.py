"""Webhook URLs, signatures and one delivery try.

A URL may only lead to the public internet: every address its host resolves to must be a
global one, at registration and again at every try (a name that resolved to a public address
yesterday may resolve to 127.0.0.1 today: DNS rebinding). The request goes to the address
that was checked (the Host header and TLS SNI carry the name), and redirects are not followed.
The operator allows private addresses with TORUS_WEBHOOK_ALLOW_PRIVATE or a CIDR list in
TORUS_WEBHOOK_ALLOWED_CIDRS.

Signature: `X-Torus-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>` with the
Unix time in `X-Torus-Timestamp`; receivers recompute it and refuse old timestamps.
"""

import hashlib
import hmac
import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings


class UrlRefused(Exception):
    """The URL may not be called; the message says why."""


def sign(*, secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify(*, secret: str, timestamp: str, body: bytes, signature: str, tolerance: int = 300):
    """What a receiver does (and the tests): True if the signature matches and is recent."""
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    if abs(time.time() - ts) > tolerance:
        return False
    return hmac.compare_digest(sign(secret=secret, timestamp=ts, body=body), signature)


def _allowed_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if settings.TORUS_WEBHOOK_ALLOW_PRIVATE:
        return True
    for cidr in settings.TORUS_WEBHOOK_ALLOWED_CIDRS:
        if ip in ipaddress.ip_network(cidr, strict=False):
            return True
    return ip.is_global and not ip.is_multicast


def url_shape_problem(url: str) -> str | None:
    """What is wrong with a URL before any lookup (scheme, credentials, host), or None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "Not a valid URL."
    if parts.scheme not in ("http", "https"):
        return "Only http and https URLs are allowed."
    if not parts.hostname:
        return "The URL has no host."
    if parts.username or parts.password:
        return "Credentials in the URL are not allowed; use the signing secret."
    if port == 0:
        return "Not a valid port."
    if any(c in url for c in "\r\n\t\x00 "):
        return "The URL contains whitespace or control characters."
    return None


def resolve(url: str) -> list[str]:
    """The addresses the URL's host resolves to, each checked: UrlRefused if the URL is
    malformed, does not resolve, or any address is not allowed."""
    problem = url_shape_problem(url)
    if problem:
        raise UrlRefused(problem)
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UrlRefused(f"The host {parts.hostname!r} does not resolve.") from exc
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    refused = [a for a in addresses if not _allowed_address(a)]
    if refused or not addresses:
        raise UrlRefused(
            f"The host {parts.hostname!r} resolves to an address that is not public"
            f" ({', '.join(refused)}); the operator must allow it."
        )
    return addresses


@dataclass
class TryResult:
    ok: bool
    status: int | None = None
    error: str = ""
    permanent: bool = False  # do not try again (the address is refused)


def deliver_once(*, url: str, secret: str, event: str, delivery_id: str, payload: dict):
    """POST the payload once, signed, to an address checked just now. Never raises."""
    try:
        addresses = resolve(url)
    except UrlRefused as exc:
        return TryResult(ok=False, error=str(exc), permanent=True)
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    timestamp = int(time.time())
    parts = urlsplit(url)
    host = parts.hostname
    headers = {
        "Host": parts.netloc.rsplit("@", 1)[-1],
        "Content-Type": "application/json",
        "User-Agent": "torus-webhooks/1",
        "X-Torus-Event": event,
        "X-Torus-Delivery": delivery_id,
        "X-Torus-Timestamp": str(timestamp),
        "X-Torus-Signature": sign(secret=secret, timestamp=timestamp, body=body),
    }
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    response = None
    with httpx.Client(
        timeout=settings.TORUS_WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False, trust_env=False
    ) as client:
        for address in addresses:  # each checked above; the next when one cannot be reached
            netloc = f"[{address}]" if ":" in address else address
            if parts.port:
                netloc += f":{parts.port}"
            pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
            try:
                response = client.post(pinned, content=body, headers=headers, extensions=extensions)
                break
            except httpx.ConnectError as exc:
                error = f"{type(exc).__name__}: {exc}"[:500]
            except httpx.HTTPError as exc:
                return TryResult(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
    if response is None:
        return TryResult(ok=False, error=error)
    if 200 <= response.status_code < 300:
        return TryResult(ok=True, status=response.status_code)
    return TryResult(
        ok=False,
        status=response.status_code,
        error=f"HTTP {response.status_code}"
        + (" (redirects are not followed)" if response.is_redirect else ""),
    )
