from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingestion"

    def ready(self):
        from ingest.downloads import run_downloads
        from ingest.reingest import request_reingest
        from traces.signals import files_requested, reingest_requested

        reingest_requested.connect(request_reingest, dispatch_uid="ingest.reingest")
        files_requested.connect(run_downloads, dispatch_uid="ingest.downloads")
