"""Log state for operators: shipper cursors and failure signatures."""

from django.contrib import admin

from apps.logs.models import FailureSignature, LogCursor


@admin.register(LogCursor)
class LogCursorAdmin(admin.ModelAdmin):
    list_display = ["attempt", "stream", "offset", "lines", "complete", "updated_at"]
    list_filter = ["complete", "stream"]
    readonly_fields = ["attempt", "stream", "offset", "lines", "skipping", "complete"]


@admin.register(FailureSignature)
class FailureSignatureAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "query", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "query"]
