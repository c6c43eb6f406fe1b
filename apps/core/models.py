"""Base models and the one place tenant scoping is applied: TenantQuerySet.visible_to()."""

import uuid

from django.conf import settings
from django.db import models

from apps.core.actor import Actor


class TenantQuerySet(models.QuerySet):
    """A queryset of tenant-owned rows. Every read of tenant data goes through visible_to()."""

    def visible_to(self, actor: Actor) -> "TenantQuerySet":
        path = self.model.tenant_path
        if not actor.tenant_ids:
            return self.none()
        return self.filter(**{f"{path}__in": actor.tenant_ids})


class BaseModel(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class TenantModel(BaseModel):
    """A row that belongs to one tenant. `tenant_path` is the lookup from the row to Tenant.id."""

    tenant_path = "tenant"

    objects = TenantQuerySet.as_manager()

    class Meta:
        abstract = True

    @property
    def tenant_id_value(self) -> uuid.UUID:
        obj = self
        for part in self.tenant_path.split("__")[:-1]:
            obj = getattr(obj, part)
        return getattr(obj, f"{self.tenant_path.split('__')[-1]}_id")


class Archivable(models.Model):
    """A thing with history is archived, never deleted: read-only, hidden from default lists,
    restorable by an admin until an operator purges it (apps/lifecycle)."""

    archived_at = models.DateTimeField(null=True, blank=True, db_index=True)
    archived_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        abstract = True

    @property
    def archived(self) -> bool:
        return self.archived_at is not None


class PassFailure(models.Model):
    """One item a periodic pass could not handle (apps/core/passes.py): open until the item
    next succeeds or ends. `count` is the failures in a row; the pass's `PassCounter` keeps
    the total."""

    pass_name = models.CharField(max_length=64)
    item_key = models.CharField(max_length=255)
    error = models.TextField(blank=True, default="")
    count = models.PositiveBigIntegerField(default=1)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pass_name", "item_key"], name="uniq_pass_failure")
        ]
        ordering = ["pass_name", "first_at"]

    def __str__(self) -> str:
        return f"{self.pass_name}:{self.item_key} x{self.count}"


class PassCounter(models.Model):
    """Every failure of a pass's items since the platform began (a counter: never goes down)."""

    pass_name = models.CharField(max_length=64, unique=True)
    failures = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.pass_name}: {self.failures}"
