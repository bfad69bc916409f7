"""What the two tables share (`python -m bench`: bench/lab.py; `python -m bench community`):
the command line, Django in this process, each figure taken apart from the others, and the
Markdown table, printed and also written where `--output` and `--json` say."""

import argparse
import json
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import common
from bench.common import log


@dataclass
class Row:
    key: str
    figure: str
    measured: str
    reference: str
    ratio: str
    target: str
    met: bool | None  # None: nothing to judge (the figure could not be taken)
    values: dict = field(default_factory=dict)  # the raw numbers, for --json


def arguments(prog: str, doc: str, scales, figures) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    parser.add_argument("--scale", choices=scales, default="full", help="sizes (default: full, the issue's)")
    parser.add_argument(
        "--only", default=",".join(figures), help=f"comma-separated, of: {', '.join(figures)}"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every value here")
    parser.add_argument("--output", metavar="FILE", help="also write the table here (Markdown)")
    parser.add_argument(
        "--server",
        default=common.server_url(os.environ.get("BENCH_DATABASE_URL", common.DEFAULT_SERVER_URL)),
        help="the PostgreSQL server for the scratch databases (default: BENCH_DATABASE_URL's, else %(default)s)",
    )
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None, figures) -> argparse.Namespace:
    args = parser.parse_args(argv)
    args.figures = {name.strip() for name in args.only.split(",") if name.strip()}
    if unknown := args.figures - set(figures):
        parser.error(f"unknown figures {', '.join(sorted(unknown))}; choose among {', '.join(figures)}")
    return args


def configure_django(server: str) -> None:
    """Django in this process only for the models' table names and the API's own queries;
    pointed at the maintenance database, never at a scratch one it would hold open."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="cascade.settings",
        DATABASE_URL=common.database_url(server, "postgres"),
        DJANGO_SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY", "bench-not-a-secret"),
    )
    import django

    django.setup()


class Steps:
    """Runs each step; one that fails leaves the others, its figures noted with the reason."""

    def __init__(self):
        self.failures: dict[str, str] = {}

    def __call__(self, names: set[str], run) -> None:
        if not names:
            return
        try:
            run()
        except Exception as error:
            log(f"failed: {''.join(traceback.format_exception(error)).rstrip()}")
            self.failures.update(dict.fromkeys(names, f"{type(error).__name__}: {error}".splitlines()[0]))


def table(rows: list[Row]) -> str:
    """The rows as Markdown, with a ratio column where any row has one."""
    ratios = any(row.ratio for row in rows)
    head = ["figure", "measured", "reference", *(["ratio"] if ratios else []), "target", "met?"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        met = "—" if row.met is None else ("yes" if row.met else "**no**")
        cells = [row.figure, row.measured, row.reference, *([row.ratio] if ratios else []), row.target, met]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def report(args: argparse.Namespace, heading: str, rows: list[Row], started: float, **extra) -> str:
    """Print the table under its heading; write it to --output, and everything to --json."""
    output = f"{heading}\n\n{table(rows)}\n"
    print(output)
    log(f"done in {time.perf_counter() - started:.0f} s")
    if args.output:
        Path(args.output).write_text(output)
    if args.json:
        document = {"scale": args.scale, **extra, "rows": [asdict(r) for r in rows], "markdown": output}
        document["seconds"] = time.perf_counter() - started
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
    return output


def machine_line(machine: dict) -> str:
    load = machine["load_average"]
    return (
        f"Machine: {machine['cores']} cores ({machine['cpu']}), {machine['ram_bytes'] / 2**30:.1f} GiB RAM"
        + (f", load average {load[0]:.1f} at the start" if load else "")
        + f"; Python {machine['python']}, PostgreSQL {machine['postgresql']}, Django {machine['django']}, "
        f"psycopg {machine['psycopg']} (libpq {machine['libpq']})."
    )
