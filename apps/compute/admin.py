"""Operators configure clusters here; partitions and nodes are synced from the cluster."""

from django.contrib import admin

from apps.compute.models import AcceleratorType, Cluster, Node, Partition


class PartitionInline(admin.TabularInline):
    model = Partition
    extra = 0
    readonly_fields = ["name", "is_default", "state", "max_time_minutes", "node_names"]
    can_delete = False


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "is_default", "healthy", "last_reconciled_at"]
    list_filter = ["backend", "healthy"]
    search_fields = ["name"]
    readonly_fields = ["healthy", "last_error", "last_synced_at", "last_reconciled_at"]
    inlines = [PartitionInline]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "state", "cpus", "memory_mb", "accelerators", "reason"]
    list_filter = ["cluster", "state"]
    search_fields = ["name", "reason"]
    readonly_fields = [f.name for f in Node._meta.fields]


@admin.register(AcceleratorType)
class AcceleratorTypeAdmin(admin.ModelAdmin):
    list_display = ["name", "vendor", "gres_name", "resource_name", "visible_devices_env"]
    search_fields = ["name", "gres_name"]
