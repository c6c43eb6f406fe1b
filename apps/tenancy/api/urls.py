"""Tenancy routes, registered on the /api/v1 router."""

from rest_framework.routers import SimpleRouter

from apps.tenancy.api import views


def register(router: SimpleRouter) -> None:
    router.register("tenants", views.TenantViewSet, basename="tenant")
    router.register("memberships", views.MembershipViewSet, basename="membership")
    router.register("invitations", views.InvitationViewSet, basename="invitation")
    router.register("projects", views.ProjectViewSet, basename="project")
    router.register("project-members", views.ProjectMemberViewSet, basename="project-member")
    router.register("tokens", views.AccessTokenViewSet, basename="token")
    router.register("audit-events", views.AuditEventViewSet, basename="audit-event")
