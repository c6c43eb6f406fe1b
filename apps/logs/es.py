"""The Elasticsearch client and index naming (one index per tenant and UTC day)."""

from datetime import datetime

from django.conf import settings
from elasticsearch import Elasticsearch
from elasticsearch.serializer import OrjsonSerializer

INDEX_PREFIX = "torus-logs"
_clients: dict[tuple, Elasticsearch] = {}


def client(*, timeout: float | None = None) -> Elasticsearch:
    """One client (with its connection pool) per configured URL; with `timeout`, that
    client's copy with this request timeout (made once: `options()` costs half a
    millisecond). A cluster is its nodes' URLs, comma-separated: the client spreads the
    requests over them and sends one again to another node when its node does not answer.
    JSON is read and written by orjson (a page of hits parses several times faster)."""
    url = settings.TORUS_ELASTICSEARCH_URL
    if (url, None) not in _clients:
        nodes = [node.strip().rstrip("/") for node in url.split(",") if node.strip()]
        _clients[url, None] = Elasticsearch(
            nodes,
            request_timeout=30,
            retry_on_timeout=False,
            serializers={"application/json": OrjsonSerializer()},
        )
    if (url, timeout) not in _clients:
        _clients[url, timeout] = _clients[url, None].options(request_timeout=timeout)
    return _clients[url, timeout]


def index_name(tenant_slug: str, when: datetime) -> str:
    return f"{INDEX_PREFIX}-{tenant_slug}-{when:%Y.%m.%d}"


def index_pattern(tenant_slug: str) -> str:
    return f"{INDEX_PREFIX}-{tenant_slug}-*"
