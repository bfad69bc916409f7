"""The demo's settings (`python3 run.py demo` runs every process on them), which the test suite
and `manage.py load_samples` and `generate_trace` use too: Cascade's settings and the `tools`
app, where those two commands live. A deployment runs cascade.settings, without tools."""

from cascade.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tools"]  # noqa: F405
