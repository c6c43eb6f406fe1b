"""Job list filters: ?state=RUNNING,PENDING&project=<id|slug>&user=<name>&label=team=vision."""

from django.core.exceptions import ValidationError as DjangoValidationError

from apps.jobs.models import Job
from apps.jobs.spec_fields import LABEL_KEY_RE, LABEL_VALUE_RE
from apps.jobs.states import State
from apps.tenancy.api.filters import TenantFilterMixin, TextFilter, is_uuid


class JobFilter(TenantFilterMixin):
    state = TextFilter(method="filter_state", help_text="One or more, comma separated.")
    project = TextFilter(method="filter_project", help_text="Project id or slug.")
    user = TextFilter(field_name="user__username")
    label = TextFilter(method="filter_label", help_text="key=value")
    name = TextFilter(lookup_expr="icontains")
    kind = TextFilter()
    signature = TextFilter(
        field_name="signature_matches__signature__name",
        distinct=True,
        help_text="Jobs with a failed attempt matching this failure signature (by name).",
    )

    class Meta:
        model = Job
        fields = ["tenant", "state", "project", "user", "label", "name", "kind", "signature"]

    def filter_state(self, queryset, name, value):
        states = [s.strip().upper() for s in value.split(",") if s.strip()]
        unknown = [s for s in states if s not in State.values]
        if unknown:
            raise DjangoValidationError({"state": [f"Unknown state(s): {', '.join(unknown)}."]})
        return queryset.filter(state__in=states)

    def filter_project(self, queryset, name, value):
        return queryset.filter(
            **({"project_id": value} if is_uuid(value) else {"project__slug": value})
        )

    def filter_label(self, queryset, name, value):
        key, sep, label = value.partition("=")
        if not sep or not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(label):
            raise DjangoValidationError({"label": ["Use label=key=value."]})
        return queryset.filter(labels__contains={key: label})
