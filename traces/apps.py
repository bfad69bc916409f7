from django.apps import AppConfig
from django.conf import settings


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Traces"

    def ready(self):
        # Registers the check of CASCADE_API_RATE (`manage.py check`, and every server's start).
        from traces import throttling  # noqa: F401
        from traces.signals import trace_parsed

        trace_parsed.connect(keep_big_trace_pages, dispatch_uid="traces.keep_big_trace_pages")


def keep_big_trace_pages(sender, trace, **kwargs) -> None:
    """The admin keeps a big trace's page reads once its parse commits (a shared cache only).
    Imported here when needed: a pass without a shared cache never loads the admin."""
    if not settings.CASCADE_CACHE_URL:
        return
    from traces.admin.analysis_pages import keep_page_reads_after_parse

    keep_page_reads_after_parse(sender, trace=trace, **kwargs)
