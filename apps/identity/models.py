"""POSIX identities on the cluster: a person is a user with a uid, a tenant and a project are
groups with a gid. Rows are never deleted, so a uid or gid is never handed out twice."""

from django.conf import settings
from django.db import models

from apps.core.models import BaseModel


class PosixAccount(BaseModel):
    """A person as the cluster knows them. Their private group has the same name."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="posix_account",
    )
    name = models.CharField(max_length=32, unique=True)
    uid = models.PositiveIntegerField(unique=True)
    gid = models.PositiveIntegerField(unique=True, help_text="The user's private group.")

    def __str__(self) -> str:
        return f"{self.name} ({self.uid})"


class GroupKind(models.TextChoices):
    TENANT = "tenant", "Tenant"
    PROJECT = "project", "Project"


class PosixGroup(BaseModel):
    """A tenant's or a project's group. `members` mirrors the directory's memberUid list."""

    kind = models.CharField(max_length=16, choices=GroupKind.choices)
    tenant = models.ForeignKey(
        "tenancy.Tenant", on_delete=models.SET_NULL, null=True, related_name="posix_groups"
    )
    project = models.OneToOneField(
        "tenancy.Project", on_delete=models.SET_NULL, null=True, related_name="posix_group"
    )
    name = models.CharField(max_length=32, unique=True)
    gid = models.PositiveIntegerField(unique=True)
    members = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"],
                condition=models.Q(kind="tenant"),
                name="uniq_tenant_group",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.gid})"


class IdCounter(models.Model):
    """The next uid or gid to try ("uid", "gid"); only ever moves up."""

    name = models.CharField(max_length=8, primary_key=True)
    next_value = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"next {self.name} {self.next_value}"


class ClusterAssociation(models.Model):
    """A user's association with a project's account on a cluster (Slurm's sacctmgr), made
    once: a row here means the cluster has it."""

    cluster = models.ForeignKey("compute.Cluster", on_delete=models.CASCADE)
    account = models.CharField(max_length=64)
    user = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "account", "user"], name="uniq_cluster_association"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.account}"
