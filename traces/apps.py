from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Traces"

    def ready(self):
        # Registers the check of CASCADE_API_RATE (`manage.py check`, and every server's start).
        from traces import throttling  # noqa: F401
