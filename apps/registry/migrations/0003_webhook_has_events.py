"""A webhook names at least one event. Rows with none delivered nothing: they are kept, off,
with every event named (turning one on again is the owner's choice)."""

from django.conf import settings
from django.db import migrations, models


def name_every_event(apps, schema_editor):
    Webhook = apps.get_model("registry", "Webhook")
    Webhook.objects.filter(events=[]).update(
        events=["model_version.created", "alias.changed"], active=False
    )


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0002_version_on_success"),
        ("tenancy", "0004_default_cluster_image_registries"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(name_every_event, migrations.RunPython.noop),
        migrations.AlterField(model_name="webhook", name="events", field=models.JSONField()),
        migrations.AddConstraint(
            model_name="webhook",
            constraint=models.CheckConstraint(
                condition=~models.Q(events=[]), name="webhook_has_events"
            ),
        ),
    ]
