"""Query-parameter filters for tenancy lists."""

import uuid

import django_filters
from django import forms
from drf_spectacular.drainage import set_override

from apps.tenancy.models import (
    AccessToken,
    AuditEvent,
    Invitation,
    Membership,
    Project,
    ProjectMember,
    Role,
)

MAX_QUERY_TEXT = 200  # a text filter's value (names, slugs, usernames, actions)


class TextFilter(django_filters.CharFilter):
    """A text filter with a maximum length, which the schema shows: a longer value is a 400
    at the parameter."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("max_length", MAX_QUERY_TEXT)
        super().__init__(*args, **kwargs)
        schema = {"type": "string", "maxLength": kwargs["max_length"]}
        if kwargs.get("help_text"):
            schema["description"] = str(kwargs["help_text"])
        set_override(self, "field", schema)


class TenantFilterMixin(django_filters.FilterSet):
    tenant = TextFilter(method="filter_tenant", help_text="Tenant id or slug.")

    def filter_tenant(self, queryset, name, value):
        path = queryset.model.tenant_path
        field = "id" if is_uuid(value) else "slug"
        prefix = "" if path == "id" else f"{path}__"
        return queryset.filter(**{f"{prefix}{field}": value})


class StrictBooleanField(forms.Field):
    """true/false (or 1/0, any case); anything else is a 400, where Django's NullBooleanField
    would read `?revoked=nonsense` as no filter at all (and `2`, `3` as true, false)."""

    widget = forms.TextInput

    def to_python(self, value):
        text = str(value).strip().lower() if value is not None else ""
        if text == "":
            return None
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
        raise forms.ValidationError("Must be true or false.", code="invalid")


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


class MembershipFilter(TenantFilterMixin):
    role = django_filters.ChoiceFilter(choices=Role.choices)
    user = TextFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["tenant", "role", "user"]


class ProjectFilter(TenantFilterMixin):
    slug = TextFilter()
    name = TextFilter(lookup_expr="icontains")

    class Meta:
        model = Project
        fields = ["tenant", "slug", "name"]


class ProjectMemberFilter(TenantFilterMixin):
    project = django_filters.UUIDFilter(field_name="project_id")
    user = TextFilter(field_name="user__username")

    class Meta:
        model = ProjectMember
        fields = ["tenant", "project", "user"]


class AccessTokenFilter(TenantFilterMixin):
    user = TextFilter(field_name="user__username")
    revoked = StrictBooleanFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)
    read_only = StrictBooleanFilter()

    class Meta:
        model = AccessToken
        fields = ["tenant", "user", "revoked", "read_only"]


class InvitationFilter(TenantFilterMixin):
    role = django_filters.ChoiceFilter(choices=Role.choices)
    email = TextFilter(lookup_expr="iexact")
    username = TextFilter()

    class Meta:
        model = Invitation
        fields = ["tenant", "role", "email", "username"]


class AuditEventFilter(TenantFilterMixin):
    action = TextFilter()
    action_prefix = TextFilter(field_name="action", lookup_expr="startswith")
    actor = TextFilter(field_name="actor_repr")
    target_type = TextFilter()
    target_id = TextFilter()
    since = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["tenant", "action", "actor", "target_type", "target_id", "since", "until"]
