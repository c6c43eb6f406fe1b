"""Request and response shapes for tenancy. Validation only; writes go through services."""

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.serializers import (
    RenderableJSONField,
    StrictModelSerializer,
    StrictSerializer,
)
from apps.tenancy.models import (
    AccessToken,
    AuditEvent,
    Invitation,
    Membership,
    Project,
    ProjectMember,
    Role,
    Tenant,
)
from apps.tenancy.policies import MATRIX, has_role

User = get_user_model()
# a tenant named in a body: its id (36 characters) or its slug (at most 50)
TENANT_REF_MAX = 64


class UserSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = User
        fields = ["id", "username", "email", "first_name", "last_name"]
        read_only_fields = fields


class MemberSummarySerializer(serializers.ModelSerializer):
    """What every member sees of another member: who they are, not how to reach them."""

    class Meta:
        model = User
        fields = ["id", "username"]
        read_only_fields = fields


def member_detail(serializer: serializers.Serializer, *, user, tenant_id) -> dict:
    """A member's e-mail and name for those who manage the tenant's people (admins), and for
    the member themself; the username for everyone else."""
    actor = serializer.context.get("actor")
    manager = MATRIX[("membership", "update")]
    if actor is not None and (
        actor.user == user or has_role(actor, tenant_id=tenant_id, minimum=manager)
    ):
        return UserSummarySerializer(user).data
    return MemberSummarySerializer(user).data


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": 50})
class ClusterNameField(serializers.SlugRelatedField):
    """A cluster by name, or null; "" is refused (DRF would take it as null, which the schema
    does not say: a name has at least one character)."""

    default_error_messages = {"blank": "Name a cluster, or send null for none."}

    def run_validation(self, data=serializers.empty):
        if data == "":
            self.fail("blank")
        if isinstance(data, str) and len(data) > 50:
            raise serializers.ValidationError("A cluster's name is at most 50 characters.")
        return super().run_validation(data)


def _cluster_field() -> serializers.SlugRelatedField:
    # the cluster model from the tenant's own field (compute sits above tenancy)
    cluster = Tenant._meta.get_field("default_cluster").related_model
    return ClusterNameField(
        slug_field="name",
        queryset=cluster.objects.all(),
        allow_null=True,
        required=False,
        help_text="The cluster jobs run on when their spec names none (a cluster's name).",
    )


class TenantSerializer(StrictModelSerializer):
    role = serializers.SerializerMethodField()
    image_registries = serializers.ListField(
        child=serializers.CharField(max_length=255),
        max_length=50,
        required=False,
        help_text="Registries (host, optional path prefix) jobs' container images may come"
        " from; empty: only a cluster's default image.",
    )
    default_cluster = _cluster_field()

    class Meta:
        model = Tenant
        fields = [
            "id",
            "name",
            "slug",
            "description",
            "log_retention_days",
            "image_registries",
            "default_cluster",
            "role",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "slug", "role", "created_at", "updated_at"]

    def get_role(self, obj) -> str | None:
        actor = self.context.get("actor")
        return actor.role_in(obj.id) if actor else None

    def validate_image_registries(self, value):
        from apps.tenancy.images import registry_entry_problem

        value = [entry.strip().lower().rstrip("/") for entry in value]
        problems = {str(i): registry_entry_problem(entry) for i, entry in enumerate(value)}
        errors = {index: [problem] for index, problem in problems.items() if problem}
        if errors:
            raise serializers.ValidationError(errors)
        return sorted(set(value))


class MembershipSerializer(StrictModelSerializer):
    """Read-only: people join through invitations (/api/v1/invitations/)."""

    tenant_id = serializers.UUIDField(read_only=True)
    user_detail = serializers.SerializerMethodField(
        help_text="id, username; also email, first_name, last_name for the tenant's admins."
    )
    role = serializers.ChoiceField(choices=Role.choices, read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "tenant_id", "user_detail", "role", "created_at"]
        read_only_fields = fields

    def get_user_detail(self, obj) -> dict:
        return member_detail(self, user=obj.user, tenant_id=obj.tenant_id)


class MembershipUpdateSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


class ProjectSerializer(StrictModelSerializer):
    tenant = serializers.CharField(
        write_only=True,
        required=False,
        max_length=TENANT_REF_MAX,
        help_text="Tenant id or slug (default: your only one).",
    )
    tenant_id = serializers.UUIDField(read_only=True)
    default_cluster = serializers.SlugRelatedField(
        slug_field="name",
        read_only=True,
        allow_null=True,
        help_text="Set with PATCH; null: the tenant's.",
    )
    archived_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="Set while archived."
    )

    class Meta:
        model = Project
        fields = [
            "id",
            "tenant",
            "tenant_id",
            "name",
            "slug",
            "description",
            "default_cluster",
            "idle_minutes",
            "idle_grace_minutes",
            "created_at",
            "updated_at",
            "archived_at",
        ]
        read_only_fields = [
            "id", "tenant_id", "idle_minutes", "idle_grace_minutes", "created_at", "updated_at",
        ]  # fmt: skip
        extra_kwargs = {"slug": {"validators": []}}
        validators = []


class ProjectUpdateSerializer(StrictModelSerializer):
    default_cluster = _cluster_field()

    class Meta:
        model = Project
        fields = [
            "name", "slug", "description", "default_cluster", "idle_minutes", "idle_grace_minutes",
        ]  # fmt: skip
        extra_kwargs = {"slug": {"validators": []}}


class ProjectMemberSerializer(StrictModelSerializer):
    project = serializers.UUIDField(source="project_id")
    user = serializers.CharField(
        write_only=True, max_length=150, help_text="Username of a tenant member."
    )
    user_detail = serializers.SerializerMethodField(
        help_text="id, username; also email, first_name, last_name for the tenant's admins."
    )

    class Meta:
        model = ProjectMember
        fields = ["id", "project", "user", "user_detail", "created_at"]
        read_only_fields = ["id", "user_detail", "created_at"]
        validators = []

    def get_user_detail(self, obj) -> dict:
        return member_detail(self, user=obj.user, tenant_id=obj.project.tenant_id)


class AccessTokenSerializer(StrictModelSerializer):
    tenant = serializers.CharField(
        write_only=True,
        required=False,
        max_length=TENANT_REF_MAX,
        help_text="Tenant id or slug (default: your only one).",
    )
    tenant_id = serializers.UUIDField(read_only=True)
    user = UserSummarySerializer(read_only=True)
    active = serializers.SerializerMethodField()

    class Meta:
        model = AccessToken
        fields = [
            "id",
            "name",
            "tenant",
            "tenant_id",
            "user",
            "prefix",
            "read_only",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "last_used_ip",
            "active",
            "created_at",
        ]
        read_only_fields = [
            "id",
            "tenant_id",
            "user",
            "prefix",
            "revoked_at",
            "last_used_at",
            "last_used_ip",
            "active",
            "created_at",
        ]

    def get_active(self, obj) -> bool:
        return obj.is_active()


class AccessTokenCreatedSerializer(AccessTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(AccessTokenSerializer.Meta):
        fields = [*AccessTokenSerializer.Meta.fields, "token"]


class InvitationSerializer(StrictModelSerializer):
    tenant_id = serializers.UUIDField(read_only=True)
    # e-mail or username: the other is "" (the e-mail's is no address, so no email format)
    email = serializers.CharField(read_only=True, help_text="Empty when invited by username.")
    invited_by = serializers.CharField(
        source="invited_by.username", read_only=True, default=None, allow_null=True
    )
    accepted_by = serializers.CharField(
        source="accepted_by.username", read_only=True, default=None, allow_null=True
    )
    status = serializers.SerializerMethodField(help_text="pending, accepted, revoked or expired")

    class Meta:
        model = Invitation
        fields = [
            "id",
            "tenant_id",
            "email",
            "username",
            "role",
            "status",
            "invited_by",
            "expires_at",
            "accepted_at",
            "accepted_by",
            "revoked_at",
            "created_at",
        ]
        read_only_fields = fields

    def get_status(self, obj) -> str:
        return obj.status()


class InvitationCreateSerializer(StrictSerializer):
    tenant = serializers.CharField(
        required=False,
        max_length=TENANT_REF_MAX,
        help_text="Tenant id or slug (default: your only one).",
    )
    email = serializers.EmailField(required=False, max_length=254, help_text="Invite by e-mail, or")
    username = serializers.CharField(required=False, max_length=150, help_text="by username.")
    role = serializers.ChoiceField(choices=Role.choices)

    def validate(self, attrs):
        if attrs.get("email") and attrs.get("username"):
            raise serializers.ValidationError(
                {"username": ["Give either email or username, not both."]}
            )
        if not attrs.get("email") and not attrs.get("username"):
            raise serializers.ValidationError(
                {"email": ["Required: the e-mail or the username of the person to invite."]}
            )
        return attrs


class InvitationCreatedSerializer(InvitationSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; pass it to the invitee.")
    accept_url = serializers.CharField(
        read_only=True, help_text="The invitee, signed in, POSTs {token} here."
    )

    class Meta(InvitationSerializer.Meta):
        fields = [*InvitationSerializer.Meta.fields, "token", "accept_url"]
        read_only_fields = fields


class InvitationAcceptSerializer(StrictSerializer):
    token = serializers.CharField(max_length=200)


class InvitationAcceptedSerializer(serializers.Serializer):
    membership_id = serializers.UUIDField(source="id")
    tenant_id = serializers.UUIDField()
    tenant_slug = serializers.CharField(source="tenant.slug")
    role = serializers.CharField()


class AuditEventSerializer(serializers.ModelSerializer):
    tenant_id = serializers.UUIDField(read_only=True)
    actor = serializers.CharField(source="actor_repr", read_only=True)
    token_id = serializers.UUIDField(read_only=True, allow_null=True)  # none for a session
    changes = RenderableJSONField(read_only=True)

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "tenant_id",
            "created_at",
            "actor",
            "token_id",
            "action",
            "target_type",
            "target_id",
            "target_repr",
            "changes",
            "ip",
        ]
        read_only_fields = fields


class LoginSerializer(StrictSerializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(
        max_length=4096, style={"input_type": "password"}, trim_whitespace=False
    )


class MeSerializer(serializers.Serializer):
    user = UserSummarySerializer()
    tenants = serializers.ListField(child=serializers.DictField())
    token = serializers.DictField(allow_null=True)
