"""The Elasticsearch client and index naming (one index per tenant and UTC day)."""

from datetime import datetime

from django.conf import settings
from elasticsearch import Elasticsearch

INDEX_PREFIX = "torus-logs"
_clients: dict[str, Elasticsearch] = {}


def client() -> Elasticsearch:
    """One client (with its connection pool) per configured URL."""
    url = settings.TORUS_ELASTICSEARCH_URL.rstrip("/")
    if url not in _clients:
        _clients[url] = Elasticsearch(url, request_timeout=30, retry_on_timeout=False)
    return _clients[url]


def index_name(tenant_slug: str, when: datetime) -> str:
    return f"{INDEX_PREFIX}-{tenant_slug}-{when:%Y.%m.%d}"


def index_pattern(tenant_slug: str) -> str:
    return f"{INDEX_PREFIX}-{tenant_slug}-*"
