"""Tenancy endpoints: tenants, memberships, invitations, projects, project members, tokens,
audit events, sign-in."""

from django.contrib.auth import login, logout
from django.middleware.csrf import CsrfViewMiddleware, get_token
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.tenancy import invitations, services
from apps.tenancy.access import actor_for_user, client_ip
from apps.tenancy.api import filters
from apps.tenancy.api.lifecycle import LifecycleMixin
from apps.tenancy.api.serializers import (
    AccessTokenCreatedSerializer,
    AccessTokenSerializer,
    AuditEventSerializer,
    InvitationAcceptedSerializer,
    InvitationAcceptSerializer,
    InvitationCreatedSerializer,
    InvitationCreateSerializer,
    InvitationSerializer,
    LoginSerializer,
    MembershipSerializer,
    MembershipUpdateSerializer,
    MeSerializer,
    ProjectMemberSerializer,
    ProjectSerializer,
    ProjectUpdateSerializer,
    TenantSerializer,
    UserSummarySerializer,
)
from apps.tenancy.api.viewsets import PatchOnlyMixin, TenantScopedViewSet
from apps.tenancy.live import publish_access_changed
from apps.tenancy.models import (
    AccessToken,
    AuditEvent,
    Invitation,
    Membership,
    Project,
    ProjectMember,
    Tenant,
)
from apps.tenancy.selectors import member_by_username
from apps.tenancy.signin import signin


class _ReadMixin(mixins.ListModelMixin, mixins.RetrieveModelMixin):
    def get_serializer_context(self):
        return {**super().get_serializer_context(), "actor": self.actor}


class TenantViewSet(PatchOnlyMixin, _ReadMixin, TenantScopedViewSet):
    resource = "tenant"
    queryset = Tenant.objects.all()
    serializer_class = TenantSerializer
    filterset_fields = ["slug"]
    ordering_fields = ["created_at", "slug", "name"]

    def partial_update(self, request, *args, **kwargs):
        tenant = self.get_object()
        serializer = self.get_serializer(tenant, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        tenant = services.tenant_update(
            actor=self.actor, tenant=tenant, fields=serializer.validated_data, ip=self.ip
        )
        return Response(self.get_serializer(tenant).data)


class MembershipViewSet(PatchOnlyMixin, _ReadMixin, TenantScopedViewSet):
    """Members of your tenants. People join by invitation (/api/v1/invitations/), never directly."""

    resource = "membership"
    queryset = Membership.objects.select_related("user")
    serializer_class = MembershipSerializer
    filterset_class = filters.MembershipFilter
    ordering_fields = ["created_at", "role"]

    @extend_schema(request=MembershipUpdateSerializer, responses=MembershipSerializer)
    def partial_update(self, request, *args, **kwargs):
        membership = self.get_object()
        serializer = MembershipUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        membership = services.membership_update(
            actor=self.actor,
            membership=membership,
            role=serializer.validated_data["role"],
            ip=self.ip,
        )
        return Response(self.get_serializer(membership).data)

    def destroy(self, request, *args, **kwargs):
        services.membership_delete(actor=self.actor, membership=self.get_object(), ip=self.ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationViewSet(_ReadMixin, TenantScopedViewSet):
    """Invitations to your tenants (admins): create, list, revoke; the invitee accepts."""

    resource = "invitation"
    queryset = Invitation.objects.select_related("invited_by", "accepted_by")
    serializer_class = InvitationSerializer
    filterset_class = filters.InvitationFilter
    ordering_fields = ["created_at", "expires_at"]

    @extend_schema(request=InvitationCreateSerializer, responses={201: InvitationCreatedSerializer})
    def create(self, request, *args, **kwargs):
        serializer = InvitationCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        invitation, plaintext = invitations.invitation_create(
            actor=self.actor,
            tenant=self.write_scope,
            role=data["role"],
            email=data.get("email", ""),
            username=data.get("username", ""),
            ip=self.ip,
        )
        invitation.token = plaintext
        invitation.accept_url = invitations.invitation_accept_url()
        body = InvitationCreatedSerializer(invitation, context=self.get_serializer_context()).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None}, description="Revoke the invitation (it stays listed).")
    def destroy(self, request, *args, **kwargs):
        invitations.invitation_revoke(actor=self.actor, invitation=self.get_object(), ip=self.ip)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=InvitationAcceptSerializer, responses={201: InvitationAcceptedSerializer}
    )
    @action(detail=False, methods=["post"], policy_action="accept")
    def accept(self, request):
        """Accept an invitation meant for you (signed in): you become a member, with its role.
        Not a tenant role's decision (you are not a member yet): the service checks that the
        invitation names you."""
        if self.actor.read_only:
            raise PermissionDenied("This access token is read-only.")
        serializer = InvitationAcceptSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        membership = invitations.invitation_accept(
            user=request.user, token=serializer.validated_data["token"], ip=self.ip
        )
        return Response(
            InvitationAcceptedSerializer(membership).data, status=status.HTTP_201_CREATED
        )


class ProjectViewSet(LifecycleMixin, PatchOnlyMixin, _ReadMixin, TenantScopedViewSet):
    resource = "project"
    queryset = Project.objects.all()
    serializer_class = ProjectSerializer
    filterset_class = filters.ProjectFilter
    ordering_fields = ["created_at", "slug", "name"]

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        data.pop("tenant", None)
        project = services.project_create(
            actor=self.actor, tenant=self.write_scope, ip=self.ip, **data
        )
        return Response(self.get_serializer(project).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ProjectUpdateSerializer, responses=ProjectSerializer)
    def partial_update(self, request, *args, **kwargs):
        project = self.get_object()
        serializer = ProjectUpdateSerializer(project, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        project = services.project_update(
            actor=self.actor, project=project, fields=serializer.validated_data, ip=self.ip
        )
        return Response(self.get_serializer(project).data)

    def destroy(self, request, *args, **kwargs):
        """Delete a project with no history (409: one with jobs, datasets, models or
        deployments is archived instead)."""
        project = self.get_object()
        self.destroy_checked(project)
        services.project_delete(actor=self.actor, project=project, ip=self.ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ProjectMemberViewSet(_ReadMixin, TenantScopedViewSet):
    resource = "project-member"
    scope_field = "project"
    queryset = ProjectMember.objects.select_related("user", "project")
    serializer_class = ProjectMemberSerializer
    filterset_class = filters.ProjectMemberFilter
    ordering_fields = ["created_at"]

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = self.write_scope
        member = services.project_member_add(
            actor=self.actor,
            project=project,
            user=member_by_username(tenant_id=project.tenant_id, username=data["user"]),
            ip=self.ip,
        )
        return Response(self.get_serializer(member).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, *args, **kwargs):
        services.project_member_remove(actor=self.actor, member=self.get_object(), ip=self.ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AccessTokenViewSet(_ReadMixin, TenantScopedViewSet):
    """Your tokens; tenant admins also see and revoke everyone's in their tenant."""

    resource = "token"
    queryset = AccessToken.objects.select_related("user")
    serializer_class = AccessTokenSerializer
    filterset_class = filters.AccessTokenFilter
    ordering_fields = ["created_at", "last_used_at", "name"]

    @extend_schema(responses={201: AccessTokenCreatedSerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        token, plaintext = services.token_create(
            actor=self.actor,
            user=request.user,
            tenant=self.write_scope,
            name=data["name"],
            read_only=data.get("read_only", False),
            expires_at=data.get("expires_at"),
            ip=self.ip,
        )
        token.token = plaintext
        return Response(AccessTokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None}, description="Revoke the token (it stays listed).")
    def destroy(self, request, *args, **kwargs):
        services.token_revoke(actor=self.actor, token=self.get_object(), ip=self.ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AuditEventViewSet(_ReadMixin, TenantScopedViewSet):
    """The audit log of the tenants you administer. Read-only for everyone."""

    resource = "audit-event"
    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    filterset_class = filters.AuditEventFilter
    ordering_fields = ["created_at", "action"]


class CsrfView(APIView):
    """Sets the CSRF cookie and returns the token for the browser's sign-in form."""

    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(responses=inline_serializer("Csrf", {"csrf_token": serializers.CharField()}))
    def get(self, request):
        return Response({"csrf_token": get_token(request._request)})


class LoginView(APIView):
    """Session sign-in for the browser (CSRF-protected: GET /api/v1/auth/csrf first)."""

    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(request=LoginSerializer, responses=MeSerializer)
    def post(self, request):
        reason = CsrfViewMiddleware(lambda r: None).process_view(request._request, None, (), {})
        if reason is not None:
            raise PermissionDenied("CSRF check failed.")
        serializer = LoginSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # an unreachable directory raises DirectoryUnavailable: a 503 (core/api/errors.py)
        user = signin(request=request, ip=client_ip(request), **serializer.validated_data)
        if user is None:  # a wrong password and a locked account look the same
            raise AuthenticationFailed("Wrong username or password.")
        login(request._request, user)
        return Response(_me(request, user=user, token=None))

    def get_authenticate_header(self, request) -> str:
        return "Session"  # a wrong password is a 401, as for any failed authentication


class LogoutView(APIView):
    resource, policy_action = "account", "logout"

    @extend_schema(request=None, responses={204: None})
    def post(self, request):
        user_id = request.user.pk
        logout(request._request)
        publish_access_changed(user_ids=[user_id])  # this session's websockets close
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeView(APIView):
    """Who you are, your tenants and roles, and the token in use."""

    resource, policy_action = "account", "read"

    @extend_schema(responses=MeSerializer)
    def get(self, request):
        token = request.auth if isinstance(request.auth, AccessToken) else None
        return Response(_me(request, user=request.user, token=token))


def _me(request, *, user, token) -> dict:
    actor = actor_for_user(user=user, token=token)
    tenants = Tenant.objects.visible_to(actor).order_by("slug")
    return {
        "user": UserSummarySerializer(user).data,
        "tenants": [
            {"id": str(t.id), "slug": t.slug, "name": t.name, "role": actor.role_in(t.id)}
            for t in tenants
        ],
        "token": None
        if token is None
        else {"id": str(token.id), "name": token.name, "read_only": token.read_only},
    }
