"""A ready trace's detail as the API sends it, written once per coding (`traces.detail_bodies`).

`DetailBody` is one coding of one version of the detail: the trace's `updated_at` it was read
at (the detail's ETag follows from it, `http.trace_digest`), its coding and its size.
`DetailBodyChunk` holds its bytes in pieces of `detail_bodies.CHUNK_BYTES` (the last one
shorter), numbered from 0, so that a range of bytes is a range of pieces. Both go with their
trace (CASCADE), and a body is published by the commit that writes its last piece.
"""

from django.db import models

from traces.models.trace import Trace


class DetailBody(models.Model):
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="+")
    # The trace row's updated_at when the detail was read: the body is served only while the
    # row still has it, so a changed trace never gets an old body.
    updated_at = models.DateTimeField()
    coding = models.CharField(max_length=16)
    size = models.BigIntegerField()
    written_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["trace", "coding", "updated_at"], name="detail_body_once"),
        ]

    def __str__(self) -> str:
        return f"{self.trace_id} {self.coding}, {self.size:,} bytes"


class DetailBodyChunk(models.Model):
    body = models.ForeignKey(DetailBody, on_delete=models.CASCADE, related_name="+")
    seq = models.IntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["body", "seq"], name="detail_body_chunk_once")]

    def __str__(self) -> str:
        return f"piece {self.seq} of body {self.body_id}"
