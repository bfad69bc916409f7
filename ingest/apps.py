from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingestion"

    def ready(self):
        from ingest.downloads import run_downloads
        from ingest.pushes import push_complete, push_urls
        from ingest.receivers import request_reingest, upload_completed, write_detail_bodies_soon
        from ingest.uploads import delete_simulation, upload_urls
        from simulations.signals import (
            simulation_delete_requested,
            simulation_upload_completed,
            simulation_upload_requested,
        )
        from traces.signals import (
            files_requested,
            push_completed,
            push_requested,
            reingest_requested,
            trace_parsed,
        )

        reingest_requested.connect(request_reingest, dispatch_uid="ingest.reingest")
        files_requested.connect(run_downloads, dispatch_uid="ingest.downloads")
        simulation_upload_requested.connect(upload_urls, dispatch_uid="ingest.uploads.urls")
        simulation_upload_completed.connect(upload_completed, dispatch_uid="ingest.uploads.completed")
        simulation_delete_requested.connect(delete_simulation, dispatch_uid="ingest.uploads.delete")
        push_requested.connect(push_urls, dispatch_uid="ingest.pushes.urls")
        push_completed.connect(push_complete, dispatch_uid="ingest.pushes.completed")
        trace_parsed.connect(write_detail_bodies_soon, dispatch_uid="ingest.detail_bodies")
