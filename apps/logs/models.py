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


class FailureSignature(TenantModel):
    """A tenant's named query (e.g. "CUDA out of memory"); failed attempts whose logs match
    it are tagged with it."""

    tenant = models.ForeignKey(
        "tenancy.Tenant", on_delete=models.CASCADE, related_name="failure_signatures"
    )
    name = models.CharField(max_length=100)
    query = models.CharField(max_length=1000, help_text="simple_query_string over messages")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="uniq_signature_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SignatureMatch(TenantModel):
    """A failed attempt whose logs matched a signature."""

    tenant_path = "job__tenant"

    signature = models.ForeignKey(
        FailureSignature, on_delete=models.CASCADE, related_name="matches"
    )
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="signature_matches")
    attempt = models.ForeignKey("jobs.JobAttempt", on_delete=models.CASCADE, related_name="+")
    lines = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["signature", "attempt"], name="uniq_signature_match")
        ]


class SignatureScan(TenantModel):
    """A failed attempt whose fully shipped logs were checked against the signatures."""

    tenant_path = "attempt__job__tenant"

    attempt = models.OneToOneField("jobs.JobAttempt", on_delete=models.CASCADE, related_name="+")
