"""Request and response shapes for tenancy. Validation only; writes go through services."""

from django.contrib.auth import get_user_model
from rest_framework import serializers

from apps.core.api.serializers import StrictModelSerializer, StrictSerializer
from apps.tenancy.models import (
    AccessToken,
    AuditEvent,
    Membership,
    Project,
    ProjectMember,
    Role,
    Tenant,
)

User = get_user_model()


class UserSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = User
        fields = ["id", "username", "email", "first_name", "last_name"]
        read_only_fields = fields


class TenantSerializer(StrictModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Tenant
        fields = [
            "id",
            "name",
            "slug",
            "description",
            "log_retention_days",
            "role",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "slug", "role", "created_at", "updated_at"]

    def get_role(self, obj) -> str | None:
        actor = self.context.get("actor")
        return actor.role_in(obj.id) if actor else None


class MembershipSerializer(StrictModelSerializer):
    tenant = serializers.CharField(
        write_only=True, required=False, help_text="Tenant id or slug (default: your only one)."
    )
    tenant_id = serializers.UUIDField(read_only=True)
    user = serializers.CharField(write_only=True, help_text="Username of an existing user.")
    user_detail = UserSummarySerializer(source="user", read_only=True)
    role = serializers.ChoiceField(choices=Role.choices)

    class Meta:
        model = Membership
        fields = ["id", "tenant", "tenant_id", "user", "user_detail", "role", "created_at"]
        read_only_fields = ["id", "tenant_id", "user_detail", "created_at"]
        validators = []  # uniqueness is the service's job (409), not a 400


class MembershipUpdateSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


class ProjectSerializer(StrictModelSerializer):
    tenant = serializers.CharField(
        write_only=True, required=False, help_text="Tenant id or slug (default: your only one)."
    )
    tenant_id = serializers.UUIDField(read_only=True)

    class Meta:
        model = Project
        fields = [
            "id",
            "tenant",
            "tenant_id",
            "name",
            "slug",
            "description",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "tenant_id", "created_at", "updated_at"]
        extra_kwargs = {"slug": {"validators": []}}
        validators = []


class ProjectUpdateSerializer(StrictModelSerializer):
    class Meta:
        model = Project
        fields = ["name", "slug", "description"]
        extra_kwargs = {"slug": {"validators": []}}


class ProjectMemberSerializer(StrictModelSerializer):
    project = serializers.UUIDField(source="project_id")
    user = serializers.CharField(write_only=True, help_text="Username of a tenant member.")
    user_detail = UserSummarySerializer(source="user", read_only=True)

    class Meta:
        model = ProjectMember
        fields = ["id", "project", "user", "user_detail", "created_at"]
        read_only_fields = ["id", "user_detail", "created_at"]
        validators = []


class AccessTokenSerializer(StrictModelSerializer):
    tenant = serializers.CharField(
        write_only=True, required=False, help_text="Tenant id or slug (default: your only one)."
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


class AuditEventSerializer(serializers.ModelSerializer):
    tenant_id = serializers.UUIDField(read_only=True)
    actor = serializers.CharField(source="actor_repr", read_only=True)
    token_id = serializers.UUIDField(read_only=True)

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
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)


class MeSerializer(serializers.Serializer):
    user = UserSummarySerializer()
    tenants = serializers.ListField(child=serializers.DictField())
    token = serializers.DictField(allow_null=True)
