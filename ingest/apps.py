from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingestion"

    def ready(self):
        from ingest.reingest import request_reingest
        from traces.signals import reingest_requested

        reingest_requested.connect(request_reingest, dispatch_uid="ingest.reingest")
