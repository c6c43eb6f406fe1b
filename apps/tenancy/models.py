"""Tenants, their people (Membership), projects, access tokens and the audit log."""

import hashlib

from django.conf import settings
from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinValueValidator,
    RegexValidator,
)
from django.db import models
from django.utils import timezone

from apps.core.models import Archivable, BaseModel, TenantModel, TenantQuerySet

slug_validator = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?$",
    "Use 1-50 lowercase letters, digits and dashes, starting and ending with a letter or digit.",
)


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


ROLE_RANK = {Role.VIEWER: 1, Role.MEMBER: 2, Role.ADMIN: 3, Role.OWNER: 4}


class Tenant(Archivable, BaseModel):
    """An organisation. Everything else belongs to exactly one tenant."""

    tenant_path = "id"

    name = models.CharField(max_length=200)
    slug = models.CharField(max_length=50, unique=True, validators=[slug_validator])
    description = models.TextField(
        blank=True, default="", max_length=10_000, validators=[MaxLengthValidator(10_000)]
    )
    log_retention_days = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(3650)],
        help_text="Job log lines older than this many days are deleted.",
    )
    # Container images a job may name: registry hosts (with an optional path prefix, e.g.
    # "registry.example.com/team"); empty: only a cluster's default image. apps/tenancy/images.py
    image_registries = models.JSONField(default=list, blank=True)
    # Where jobs run when their spec names no cluster (a project's own default first).
    default_cluster = models.ForeignKey(
        "compute.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def tenant_id_value(self):
        return self.id


class Membership(TenantModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="uniq_membership")]
        ordering = ["tenant", "user"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class Project(Archivable, TenantModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=200)
    slug = models.CharField(max_length=50, validators=[slug_validator])
    description = models.TextField(
        blank=True, default="", max_length=10_000, validators=[MaxLengthValidator(10_000)]
    )
    default_cluster = models.ForeignKey(
        "compute.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The idle policy (apps/logs/idleness.py): a running job whose GPUs (or CPUs, where the
    # nodes report no GPU) stay idle this many minutes is told, then cancelled after the grace.
    idle_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(10080)],
        help_text="A running job whose GPUs (CPUs where there are none) stay idle this many "
        "minutes is told, then cancelled after the grace; null: no idle policy.",
    )
    idle_grace_minutes = models.PositiveIntegerField(
        default=15,
        validators=[MaxValueValidator(10080)],
        help_text="Minutes between telling an idle job and cancelling it.",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "slug"], name="uniq_project_slug")]
        ordering = ["tenant", "slug"]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.slug}"


class ProjectMember(TenantModel):
    """A tenant member who works in a project: members create and run things in theirs."""

    tenant_path = "project__tenant"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="project_memberships"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="uniq_project_member")
        ]
        ordering = ["project", "user"]

    def __str__(self) -> str:
        return f"{self.user} in {self.project}"


def hash_token(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


class AccessToken(TenantModel):
    """A personal access token for pipelines, bound to one tenant. Only its hash is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_tokens"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="access_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    read_only = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def is_active(self, *, now=None) -> bool:
        now = now or timezone.now()
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > now


class Invitation(TenantModel):
    """An offer of membership, accepted by the invited person. Only the token's hash is stored.

    Bound by username (that user) or by e-mail (the user with that e-mail); until accepted the
    person is not a member, and nothing about them is looked up or shown.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(blank=True, default="")
    username = models.CharField(max_length=150, blank=True, default="")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(email="") & ~models.Q(username=""))
                | (~models.Q(email="") & models.Q(username="")),
                name="invitation_email_xor_username",
            )
        ]

    def __str__(self) -> str:
        return f"{self.invitee} to {self.tenant.slug} ({self.role})"

    @property
    def invitee(self) -> str:
        return self.email or self.username

    def status(self, *, now=None) -> str:
        if self.accepted_at is not None:
            return "accepted"
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= (now or timezone.now()):
            return "expired"
        return "pending"


class AuditEventQuerySet(TenantQuerySet):
    def update(self, **kwargs):
        raise TypeError("audit events are immutable")

    def delete(self):
        raise TypeError("audit events are immutable")


class AuditEvent(TenantModel):
    """Append-only record of who did what to which object, and the change."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="audit_events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_repr = models.CharField(max_length=150, blank=True, default="")
    token = models.ForeignKey(AccessToken, null=True, blank=True, on_delete=models.SET_NULL)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64, blank=True, default="", db_index=True)
    target_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    target_repr = models.CharField(max_length=200, blank=True, default="")
    changes = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_repr} {self.action}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise TypeError("audit events are immutable")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError("audit events are immutable")
