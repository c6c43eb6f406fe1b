"""Installing the index template, and deleting a tenant's indices past their retention."""

import json
import re
from datetime import timedelta
from pathlib import Path

from django.utils import timezone
from elasticsearch import NotFoundError

from apps.logs.es import INDEX_PREFIX, client, index_pattern

# package data (pyproject.toml): the wheel carries it, bench/ingest.py reads the same file
TEMPLATE = Path(__file__).with_name("data") / "torus-logs.json"


def template_install() -> None:
    """The template for new indices; existing ones get its replica rule too (made before it,
    they would have no copy on another node of a cluster)."""
    body = json.loads(TEMPLATE.read_text())
    client().indices.put_index_template(name=INDEX_PREFIX, **body)
    replicas = body["template"]["settings"]["auto_expand_replicas"]
    for attempt in range(3):
        try:
            client().indices.put_settings(
                index=f"{INDEX_PREFIX}-*",
                settings={"index.auto_expand_replicas": replicas},
                allow_no_indices=True,
                ignore_unavailable=True,
                expand_wildcards="open",
            )
            return
        except NotFoundError:  # an index the pattern named was deleted meanwhile (retention)
            if attempt == 2:
                raise


def retention_apply(*, tenant_slug: str, days: int) -> list[str]:
    """Delete the tenant's daily indices older than `days`; the names deleted."""
    cutoff = (timezone.now() - timedelta(days=days)).strftime("%Y.%m.%d")
    names = client().indices.get(
        index=index_pattern(tenant_slug), allow_no_indices=True, ignore_unavailable=True
    )
    # the pattern also reaches tenants whose slug extends this one (acme -> acme-labs):
    # only names that are exactly this tenant's prefix and a day are this tenant's
    own = re.compile(rf"{re.escape(index_pattern(tenant_slug)[:-1])}(\d{{4}}\.\d{{2}}\.\d{{2}})")
    days = {name: match.group(1) for name in names if (match := own.fullmatch(name))}
    expired = [name for name, day in days.items() if day < cutoff]
    for name in expired:
        client().indices.delete(index=name)
    return expired
