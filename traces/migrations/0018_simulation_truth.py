from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("traces", "0017_kernelname_demangled")]

    operations = [
        migrations.AlterField(
            model_name="simulation",
            name="interrupted",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="The launches that did not finish (a cycle limit, a kill, a deadlock): left out of the pairs.",
            ),
        ),
        migrations.AddField(
            model_name="simulation",
            name="reason",
            field=models.TextField(
                blank=True,
                help_text="Why it waits, or why fewer kernels than simulated were compared.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="simulation",
            name="fatal",
            field=models.JSONField(
                blank=True, help_text="The simulator's fatal line in the log: {line, text}.", null=True
            ),
        ),
        migrations.AddField(
            model_name="simulation",
            name="left_out",
            field=models.JSONField(
                blank=True, help_text="The kernels left out of every total: {kernels, why}.", null=True
            ),
        ),
        migrations.AddField(
            model_name="simulation",
            name="run",
            field=models.JSONField(
                blank=True,
                help_text="simulation.json's facts of the run (host, times, builds, selection).",
                null=True,
            ),
        ),
    ]
