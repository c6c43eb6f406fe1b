"""Retire the project groups an older cascade left without their project (the rows stay, so
their gids are never handed out again; renamed r-<gid> so the name is free for a new project,
which gets a fresh gid: apps/identity/services.py::group_ensure replaces the directory entry)."""

from django.db import migrations


def retire(apps, schema_editor):
    PosixGroup = apps.get_model("identity", "PosixGroup")
    for group in PosixGroup.objects.filter(kind="project", project__isnull=True).exclude(
        name__startswith="r-"
    ):
        group.name, group.tenant, group.members = f"r-{group.gid}", None, []
        group.save(update_fields=["name", "tenant", "members"])


class Migration(migrations.Migration):
    dependencies = [("identity", "0001_posix_identities")]

    operations = [migrations.RunPython(retire, migrations.RunPython.noop)]
