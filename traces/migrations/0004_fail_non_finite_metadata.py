"""Traces whose stored metadata.json holds NaN or Infinity: what today's strict reading makes of them.

Before, such numbers were stored and the API emitted them as `Infinity`, which is not JSON
(JSON.parse and orjson reject the whole body). metadata.json is now read strictly; these
traces get the failure a new read would give them, so that no response carries them.
"""

import json
import math

from django.db import migrations

ERROR = (
    "metadata.json is not valid JSON: it holds a number JSON cannot represent (NaN or Infinity, "
    "e.g. 1e999); re-upload it without"
)


def has_non_finite(text: str) -> bool:
    found = []

    def constant(name):
        found.append(name)
        return None

    def number(text):
        value = float(text)
        if not math.isfinite(value):
            found.append(text)
        return value

    try:
        json.loads(text, parse_constant=constant, parse_float=number)
    except (ValueError, RecursionError):
        return True
    return bool(found)


def fail_non_finite_metadata(apps, schema_editor):
    Trace = apps.get_model("traces", "Trace")
    Kernel = apps.get_model("traces", "Kernel")
    suspects = Trace.objects.exclude(metadata_json=None).filter(
        metadata_json__iregex=r"(nan|infinity|e[+]?[0-9]{3})"
    )
    for trace in suspects.only("id", "metadata_json"):
        if has_non_finite(trace.metadata_json):
            Kernel.objects.filter(trace_id=trace.id).delete()
            Trace.objects.filter(pk=trace.id).update(
                state="failed", error=ERROR, metadata_json=None, kernel_count=0, kernels_without_totals=0
            )


class Migration(migrations.Migration):
    dependencies = [("traces", "0003_deleted_trace_waiting_for_recheck")]

    operations = [migrations.RunPython(fail_non_finite_metadata, migrations.RunPython.noop, elidable=True)]
