"""Requests that the traces app makes of the apps that feed it, without importing them.

`ingest` depends on `traces`, never the other way round: the admin asks for a re-ingest by
sending `reingest_requested` once for the traces selected, and whatever ingestion is installed
answers with a sentence saying what it did (queued; started, waiting or refused in the
background).
"""

from django.dispatch import Signal

# sender: the requester's class; trace_ids: the traces to read again from the bucket.
reingest_requested = Signal()
