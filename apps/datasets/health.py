"""/readyz check for the S3-compatible store, registered when its keys are configured."""

from apps.core.health import check
from apps.datasets.storage import storage_for


@check("s3")
def _s3() -> None:
    storage_for("s3").ping()
