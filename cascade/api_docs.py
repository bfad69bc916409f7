"""docs/api.md's JSON examples and lists of keys, written from the apps' declarations: each
```json block after a `<!-- example: NAME -->` line from the examples of `traces.api_examples`
and `simulations.api_examples`, each list after `<!-- keys: NAME -->` from the shapes.
`python -m cascade.api_docs` rewrites them; tests/traces/test_api_docs_examples.py checks that
the docs hold exactly these."""

import json
import re
import sys
import textwrap
from pathlib import Path

from simulations import api_examples as simulation_examples
from simulations import sweep_shapes
from traces import api_examples as trace_examples
from traces import shapes

DOCS_EXAMPLES = {**trace_examples.DOCS_EXAMPLES, **simulation_examples.DOCS_EXAMPLES}
DOCS_KEYS = {
    **trace_examples.DOCS_KEYS,
    "sweep": sweep_shapes.SWEEP_DETAIL.fields,
    "sweep-job": sweep_shapes.SWEEP_JOB.fields,
}
DOCS_BLOCK = re.compile(r"(<!-- example: (?P<name>[a-z-]+) -->\n```json\n)(?P<body>.*?)(\n```)", re.DOTALL)
DOCS_WIDTH = 100


def docs_json(value, indent: str = "") -> str:
    """`value` as JSON a reader can scan: on one line where it fits DOCS_WIDTH, else its keys
    (or items) packed into lines of that width, a long one on lines of its own."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(indent) + len(flat) <= DOCS_WIDTH or not isinstance(value, dict | list) or not value:
        return flat
    inner = indent + "  "
    if isinstance(value, dict):
        parts = [f"{json.dumps(key)}: {docs_json(item, inner)}" for key, item in value.items()]
    else:
        parts = [docs_json(item, inner) for item in value]
    lines, line = [], ""
    for part in parts:
        if line and ("\n" in part or len(inner) + len(line) + len(part) + 2 > DOCS_WIDTH):
            lines.append(line)
            line = ""
        line = f"{line}, {part}" if line else part
    lines.append(line)
    opening, closing = "{}" if isinstance(value, dict) else "[]"
    return f"{opening}\n{inner}" + f",\n{inner}".join(lines) + f"\n{indent}{closing}"


DOCS_KEY_LIST = re.compile(r"(<!-- keys: (?P<name>[a-z-]+) -->\n)(?P<body>(?:(?:- |  ).*\n)*)")


def docs_keys(fields: tuple[shapes.Field, ...]) -> str:
    """A Markdown item per field, its doc wrapped at DOCS_WIDTH."""
    items = (f"`{field.name}`" + (f": {field.doc}" if field.doc else "") for field in fields)
    return "".join(
        textwrap.fill(item, DOCS_WIDTH, initial_indent="- ", subsequent_indent="  ", break_on_hyphens=False)
        + "\n"
        for item in items
    )


def docs_with_examples(text: str) -> str:
    """docs/api.md's text with each example block rewritten from DOCS_EXAMPLES, each list of
    keys from DOCS_KEYS."""
    text = DOCS_BLOCK.sub(lambda block: block[1] + docs_json(DOCS_EXAMPLES[block["name"]]) + block[4], text)
    return DOCS_KEY_LIST.sub(lambda keys: keys[1] + docs_keys(DOCS_KEYS[keys["name"]]), text)


if __name__ == "__main__":  # python -m cascade.api_docs [docs/api.md]
    docs = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/api.md")
    docs.write_text(docs_with_examples(docs.read_text()))
