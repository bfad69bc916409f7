from django.apps import AppConfig


class ToolsConfig(AppConfig):
    """The generator, the samples and the demo: not part of Cascade, above it. An app only so that
    `manage.py generate_trace` and `load_samples` live beside what they call (ingest never
    imports tools); installed by cascade.settings_demo, not by a deployment's settings."""

    name = "tools"
    verbose_name = "Cascade's tools"
