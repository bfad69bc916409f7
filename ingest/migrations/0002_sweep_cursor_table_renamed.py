"""SweepCursor's table takes the app's name (its content type moves in simulations 0002)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0001_initial"),
        ("traces", "0020_simulations_and_sweep_cursor_moved"),
    ]

    operations = [
        migrations.AlterModelTable(name="sweepcursor", table=None),
    ]
