"""The simulations' tables take the app's name, and their content types (the admin's history,
permissions) follow them, so that nothing an operator granted or did is lost in the move."""

from django.db import migrations

MOVED = {"simulation": "simulations", "simulatedkernel": "simulations", "sweepcursor": "ingest"}


def content_types_moved(apps, schema_editor):
    """The `traces` content types of the moved models take their new app's label, where the new
    one is not there already (a database migrated before this ran post_migrate)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        if not ContentType.objects.filter(app_label=app_label, model=model).exists():
            ContentType.objects.filter(app_label="traces", model=model).update(app_label=app_label)


def content_types_back(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        if not ContentType.objects.filter(app_label="traces", model=model).exists():
            ContentType.objects.filter(app_label=app_label, model=model).update(app_label="traces")


class Migration(migrations.Migration):
    dependencies = [
        ("simulations", "0001_initial"),
        ("traces", "0020_simulations_and_sweep_cursor_moved"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AlterModelTable(name="simulation", table=None),
        migrations.AlterModelTable(name="simulatedkernel", table=None),
        migrations.RunPython(content_types_moved, content_types_back),
    ]
