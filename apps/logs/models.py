"""Where the shipper has got to in each attempt's output files."""

from django.db import models

from apps.core.models import TenantModel


class LogCursor(TenantModel):
    """Bytes of one attempt stream that Elasticsearch has acknowledged. Written only after
    the acknowledgement, so a shipper killed at any point re-sends (same ids), never skips."""

    tenant_path = "attempt__job__tenant"

    attempt = models.ForeignKey("jobs.JobAttempt", on_delete=models.CASCADE, related_name="+")
    stream = models.CharField(max_length=8)
    offset = models.BigIntegerField(default=0)
    lines = models.BigIntegerField(default=0)
    skipping = models.BooleanField(default=False)  # inside an over-long line: drop to newline
    complete = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["attempt", "stream"], name="uniq_log_cursor")
        ]

    def __str__(self) -> str:
        return f"{self.attempt_id}:{self.stream}@{self.offset}"


class JobMetric(TenantModel):
    """One training metric value (step, name, value) a job reported in its output."""

    tenant_path = "job__tenant"

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="metrics")
    attempt = models.ForeignKey("jobs.JobAttempt", on_delete=models.CASCADE, related_name="+")
    stream = models.CharField(max_length=8)
    offset = models.BigIntegerField()  # of the line, with name: re-shipping adds nothing
    step = models.BigIntegerField()
    name = models.CharField(max_length=64)
    value = models.FloatField()
    timestamp = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["attempt", "stream", "offset", "name"], name="uniq_metric_point"
            )
        ]
        indexes = [models.Index(fields=["job", "name", "step"])]

    def __str__(self) -> str:
        return f"{self.name}@{self.step}={self.value}"
