"""Ingestion's own bookkeeping."""

from django.db import models


class SweepCursor(models.Model):
    """Where the reconciler's sweep of a bucket's prefix stands (ingest.sweep): with S3 events
    on, each reconciling pass lists one page of keys after `after`, then moves it on; "" starts
    the prefix again."""

    bucket = models.CharField(max_length=255)
    prefix = models.CharField(max_length=1024)
    after = models.TextField(blank=True, default="", help_text="The last key the last page held.")
    swept_at = models.DateTimeField(null=True, blank=True, help_text="When the last page was listed.")
    laps = models.PositiveIntegerField(default=0, help_text="Whole sweeps of the prefix completed.")
    lap_started_at = models.DateTimeField(null=True, blank=True, help_text="When the current sweep began.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["bucket", "prefix"], name="sweep_cursor_unique")]

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix} after {self.after!r}"
