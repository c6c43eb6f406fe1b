"""Writes for a deployment's `tsk_` keys: create (the plaintext shown once) and revoke. Each
authorises with the policy module, records the change in the audit log and republishes the
deployment's route on commit, so that a revoked key stops at the gateway at once."""

from django.db import transaction
from django.utils import timezone

from apps.core.actor import Actor
from apps.serving import keys as serving_keys
from apps.serving import routes
from apps.serving.models import Deployment, DeploymentKey
from apps.tenancy.audit import audit_record
from apps.tenancy.policies import authorize


def _may_manage_keys(actor: Actor, deployment: Deployment) -> None:
    authorize(
        actor,
        resource="deployment",
        action="keys",
        tenant_id=deployment.tenant_id,
        target=deployment,
    )


def key_create(*, actor: Actor, deployment: Deployment, name: str) -> tuple[DeploymentKey, str]:
    """A new `tsk_` key for the deployment's gateway path: (row, plaintext shown once)."""
    _may_manage_keys(actor, deployment)
    token, prefix, digest = serving_keys.new_token()
    with transaction.atomic():
        key = DeploymentKey.objects.create(
            deployment=deployment,
            name=name,
            prefix=prefix,
            token_hash=digest,
            created_by=actor.user,
        )
        audit_record(
            actor=actor,
            tenant_id=deployment.tenant_id,
            action="deployment.key.create",
            target=deployment,
            changes={"key": [None, name]},
        )
        routes.publish_on_commit(deployment_id=deployment.pk)
    return key, token


def key_revoke(*, actor: Actor, key: DeploymentKey) -> DeploymentKey:
    deployment = key.deployment
    _may_manage_keys(actor, deployment)
    with transaction.atomic():
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at", "updated_at"])
            audit_record(
                actor=actor,
                tenant_id=deployment.tenant_id,
                action="deployment.key.revoke",
                target=deployment,
                changes={"key": [key.name, None]},
            )
        routes.publish_on_commit(deployment_id=deployment.pk)
    return key
