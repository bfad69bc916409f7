"""The browsable API's pages as a person reads them: DRF's page, whose JSON writes each small
object of a list (a kernel, a file, a step) on a line of its own, so that a page of a trace's
kernels is a screenful rather than thirty lines a kernel."""

import json

from rest_framework import renderers


def flat(value) -> bool:
    """A value that reads well on one line: a scalar, a list of scalars, an object of those."""
    if isinstance(value, dict):
        return all(flat(item) and not isinstance(item, dict) for item in value.values())
    if isinstance(value, list):
        return all(not isinstance(item, dict | list) for item in value)
    return True


def one_line(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def readable_json(value, level: int = 0) -> str:
    """`value` as JSON indented by 4, a list of flat objects one object a line."""
    inner, outer = "    " * (level + 1), "    " * level
    if isinstance(value, dict) and value:
        items = (f"{inner}{one_line(key)}: {readable_json(item, level + 1)}" for key, item in value.items())
        return "{\n" + ",\n".join(items) + f"\n{outer}}}"
    if isinstance(value, list) and value:
        if all(isinstance(item, dict) and flat(item) for item in value) or flat(value):
            return "[\n" + ",\n".join(f"{inner}{one_line(item)}" for item in value) + f"\n{outer}]"
        return (
            "[\n" + ",\n".join(f"{inner}{readable_json(item, level + 1)}" for item in value) + f"\n{outer}]"
        )
    return one_line(value)


class BrowsableAPIRenderer(renderers.BrowsableAPIRenderer):
    """DRF's browsable API, its content written by `readable_json` (the JSON clients' bytes
    are the JSON renderer's, unchanged)."""

    def get_content(self, renderer, data, accepted_media_type, renderer_context):
        if isinstance(renderer, renderers.JSONRenderer) and isinstance(data, dict | list):
            return readable_json(data)
        return super().get_content(renderer, data, accepted_media_type, renderer_context)
