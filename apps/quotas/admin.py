"""Quotas and the usage ledger for operators (tenant admins use the API)."""

from django.contrib import admin

from apps.quotas.models import Quota, UsageRecord


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = [
        "tenant",
        "project",
        "user",
        "gpus",
        "cpus",
        "memory_mb",
        "running_jobs",
        "gpu_hours_per_month",
    ]
    list_filter = ["tenant"]
    search_fields = ["tenant__slug", "project__slug", "user__username"]


@admin.register(UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin):
    list_display = ["ended_at", "tenant", "project", "user", "gpus", "gpu_seconds", "cpu_seconds"]
    list_filter = ["tenant"]
    date_hierarchy = "ended_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
