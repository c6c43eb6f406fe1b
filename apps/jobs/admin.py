"""Jobs for operators: searchable and filterable, read-only (users act through the API)."""

from django.contrib import admin

from apps.jobs.models import Job, JobAttempt, JobEvent


class JobAttemptInline(admin.TabularInline):
    model = JobAttempt
    extra = 0
    can_delete = False
    fields = [
        "number",
        "state",
        "backend_id",
        "nodes",
        "exit_code",
        "reason",
        "started_at",
        "ended_at",
    ]
    readonly_fields = fields


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ["created_at", "from_state", "to_state", "reason"]
    readonly_fields = fields


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "project", "user", "state", "gpus", "cluster", "created_at"]
    list_filter = ["state", "kind", "tenant", "cluster"]
    search_fields = ["name", "id", "project__slug", "user__username", "state_reason"]
    date_hierarchy = "created_at"
    inlines = [JobAttemptInline, JobEventInline]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Job._meta.fields]

    def has_add_permission(self, request):
        return False
