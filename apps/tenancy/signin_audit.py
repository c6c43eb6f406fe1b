"""Audit sign-ins and failed sign-ins, in every tenant the user belongs to."""

from django.contrib.auth import get_user_model, user_logged_in, user_login_failed
from django.dispatch import receiver

from apps.tenancy.audit import audit_record
from apps.tenancy.models import Membership


def _record(*, user, action: str, request, succeeded: bool) -> None:
    ip = request.META.get("REMOTE_ADDR") if request is not None else None
    for tenant_id in Membership.objects.filter(user=user).values_list("tenant_id", flat=True):
        audit_record(
            actor=None,
            user=user if succeeded else None,
            tenant_id=tenant_id,
            action=action,
            target=user,
            ip=ip,
        )


@receiver(user_logged_in)
def _on_login(sender, request, user, **kwargs):
    _record(user=user, action="auth.login", request=request, succeeded=True)


@receiver(user_login_failed)
def _on_login_failed(sender, credentials, request=None, **kwargs):
    username = credentials.get("username")
    user = get_user_model().objects.filter(username=username).first() if username else None
    if user is not None:
        _record(user=user, action="auth.login_failed", request=request, succeeded=False)
