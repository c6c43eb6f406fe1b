"""Django admin for operators: tenants, people, projects, tokens, and a read-only audit log."""

from django.contrib import admin

from apps.tenancy.models import (
    AccessToken,
    AuditEvent,
    Invitation,
    Membership,
    Project,
    ProjectMember,
    Tenant,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__slug"]
    autocomplete_fields = ["user", "tenant"]


class ProjectMemberInline(admin.TabularInline):
    model = ProjectMember
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "tenant", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["slug", "name", "tenant__slug"]
    inlines = [ProjectMemberInline]


@admin.register(AccessToken)
class AccessTokenAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "prefix",
        "user",
        "tenant",
        "read_only",
        "expires_at",
        "revoked_at",
        "last_used_at",
    ]
    list_filter = ["read_only", "tenant", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = ["prefix", "token_hash", "last_used_at", "last_used_ip", "created_at"]
    exclude = []

    def has_add_permission(self, request):
        return False  # tokens are minted through the API, which shows the secret once


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ["created_at", "tenant", "email", "username", "role", "expires_at"]
    list_filter = ["tenant", "role"]
    search_fields = ["email", "username"]
    readonly_fields = ["token_hash", "accepted_at", "accepted_by", "invited_by"]

    def has_add_permission(self, request):
        return False  # made through the API, which shows the token once


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "tenant", "actor_repr", "action", "target_type", "target_repr"]
    list_filter = ["tenant", "action", "target_type"]
    search_fields = ["actor_repr", "action", "target_repr", "target_id"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
