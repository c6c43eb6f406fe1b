"""/readyz check for the S3-compatible store, registered when its keys are configured. While
`make up` still builds or starts the gateway (scripts/builds s3) the store is coming, not
failing: the "builds" entry of /readyz says how far it is."""

from apps.compute.builds import still_building
from apps.core.health import check
from apps.datasets.storage import storage_for


@check("s3")
def _s3() -> None:
    try:
        storage_for("s3").ping()
    except Exception:
        if not still_building("s3"):
            raise
