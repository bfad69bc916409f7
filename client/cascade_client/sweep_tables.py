"""What `cascade sweep` prints: a sweep's jobs, its accuracy table, two sweeps kernel by kernel,
and --wait's bar. Plain functions of the answers sweep.py checked; the lines hold what the
server and uploaders wrote, so the command prints them through `terminal.visible`."""

from cascade_client.progress import bar
from cascade_client.terminal import table_lines

STATES = ("queued", "running", "ready", "failed", "skipped", "cancelled")
ENDED = ("ready", "failed", "skipped", "cancelled")
KERNELS_SHOWN = 5  # of a row's worst, of a pair's better and worse


def summary(counts: dict) -> str:
    """`4 queued, 2 skipped`: the states that have jobs, in their order."""
    return ", ".join(f"{counts[state]} {state}" for state in STATES if counts[state]) or "no jobs"


def head_lines(detail: dict) -> list[str]:
    total = sum(detail["counts"][state] for state in STATES)
    return [
        f"sweep {detail['id']} {detail['name']}: {detail['state']}, {total} job{'s' * (total != 1)}: "
        f"{summary(detail['counts'])}"
    ]


def list_lines(rows: list[dict]) -> list[str]:
    table = [
        [
            str(row["id"]),
            row["name"],
            row["state"],
            summary(row["counts"]),
            ", ".join(str(c) for c in row.get("configs") or []) or "-",
            str(row.get("owner") or "-"),
            str(row.get("created_at") or "")[:16].replace("T", " "),
        ]
        for row in rows
    ]
    if not table:
        return ["no sweeps"]
    return table_lines(["ID", "NAME", "STATE", "JOBS", "CONFIGS", "OWNER", "CREATED (UTC)"], table, right={0})


def job_lines(detail: dict) -> list[str]:
    """The jobs: trace, config, state, attempts, worker, simulation, and why (a skip's reason,
    a failure's error, a running job's kernels)."""
    rows = []
    for job in detail["jobs"]:
        worker = job["worker"] or {}
        why = job["error"] or job["reason"] or ""
        if job["state"] == "running" and job["progress"]:
            why = f"{_kernels(job['progress'])} kernels"
        rows.append(
            [
                str(job["id"]),
                job["trace_id"],
                job["config"],
                job["state"],
                str(job["attempts"]),
                str(worker.get("host") or "-"),
                job["simulation"] or "-",
                shorten(why.splitlines()[0] if why else "", 100),
            ]
        )
    if not rows:
        return ["no jobs"]
    header = ["JOB", "TRACE", "CONFIG", "STATE", "ATTEMPTS", "WORKER", "SIMULATION", "WHY"]
    return table_lines(header, rows, right={0, 4})


def accuracy_lines(answer: dict) -> list[str]:
    """Per config and simulator build (`by_config`), then per (trace, config) (`cells`)."""
    rows = [
        [
            row["config"] or "-",
            shorten(row["simulator_build"] or "-", 60),
            str(row["simulations"]),
            str(row["traces"]),
            f"{row['kernels_compared']:,}",
            _pct(row.get("mape")),
            _num(row.get("pearson_r")),
            _pct(row.get("aggregate_error")),
        ]
        for row in answer["by_config"]
    ]
    lines = ["accuracy by config (pooled over every kernel compared; errors are simulated vs measured)"]
    if rows:
        header = [
            "CONFIG",
            "SIMULATOR BUILD",
            "SIMS",
            "TRACES",
            "KERNELS",
            "MAPE %",
            "PEARSON R",
            "AGGREGATE %",
        ]
        lines += table_lines(header, rows, right={2, 3, 4, 5, 6, 7})
    else:
        lines.append("  none yet: no simulation of the sweep is ready")
    for row in answer["by_config"]:
        worst = (row.get("worst") or [])[:KERNELS_SHOWN]
        if worst:
            lines.append(f"worst kernels of {row['config']} ({shorten(row['simulator_build'] or '-', 40)}):")
            lines += [f"  {kernel_line(kernel)}" for kernel in worst]
    cells = [
        [
            cell["trace_id"],
            cell["config"],
            cell["state"] or "-",
            "-" if cell["kernels_compared"] is None else f"{cell['kernels_compared']:,}",
            _pct(cell.get("mape")),
            cell["simulation"] or "-",
        ]
        for cell in answer["cells"]
    ]
    if cells:
        lines += ["", "by trace and config"]
        lines += table_lines(
            ["TRACE", "CONFIG", "STATE", "KERNELS", "MAPE %", "SIMULATION"], cells, right={3, 4}
        )
    return lines


def kernel_line(kernel: dict) -> str:
    """One launch of a `worst` list: its error, simulated against measured, where, its name."""
    where = " ".join(str(kernel[key]) for key in ("trace_id", "ctx") if kernel.get(key))
    return (
        f"{kernel['error']:+9.1f} %  {_ns(kernel.get('sim_ns'))} vs {_ns(kernel.get('measured_ns'))}  "
        f"{where} kernel {kernel['kernel_id']}  {shorten(kernel.get('name') or '', 70)}"
    ).rstrip()


def change_line(kernel: dict) -> str:
    """One launch of two sweeps: how its |error| changed (percentage points), its two errors."""
    where = f"{kernel['ctx']} " if kernel.get("ctx") else ""
    return (
        f"{kernel['change']:+8.1f} pp  {kernel['error']:+.1f} % (was {kernel['against_error']:+.1f} %)  "
        f"{where}kernel {kernel['kernel_id']}  {shorten(kernel.get('name') or '', 70)}"
    )


def against_lines(answer: dict) -> list[str]:
    """Two sweeps kernel by kernel (`?against=`): per pair of simulations of one trace, how many
    launches got closer to the measured time and how many further, and those that moved most."""
    against = answer.get("against")
    if not against:
        return []
    lines = [
        "",
        f"against sweep {against['id']} {against['name']} (paired by {against['paired_by']}): "
        f"{against['compared']:,} kernels compared in both, {against['better']:,} better, "
        f"{against['worse']:,} worse, {against['unchanged']:,} unchanged",
    ]
    if not against["pairs"]:
        return [*lines, "  no trace simulated by both"]
    rows = [
        [
            pair["trace_id"],
            pair["config"]
            if pair["config"] == pair["against_config"]
            else f"{pair['config']} vs {pair['against_config']}",
            f"{pair['compared']:,}",
            f"{pair['better']:,}",
            f"{pair['worse']:,}",
            f"{_pct(pair['mape'])} (was {_pct(pair['against_mape'])})",
            "-" if pair["mean_change"] is None else f"{pair['mean_change']:+.2f}",
        ]
        for pair in against["pairs"]
    ]
    header = ["TRACE", "CONFIG", "KERNELS", "BETTER", "WORSE", "MAPE %", "MEAN CHANGE (pp)"]
    lines += table_lines(header, rows, right={2, 3, 4})
    for pair in against["pairs"]:
        for key, what in (("better_kernels", "closer to measured"), ("worse_kernels", "further from it")):
            if pair[key]:
                lines.append(f"{pair['trace_id']} on {pair['config']}, {what} (change of |error|):")
                lines += [f"  {change_line(k)}" for k in pair[key][:KERNELS_SHOWN]]
    return lines


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _kernels(progress: dict) -> str:
    finished, listed = progress.get("kernels_finished"), progress.get("kernels_listed")
    return f"{finished or 0:,}/{'?' if listed is None else f'{listed:,}'}"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ns(value) -> str:
    return "-" if value is None else f"{value / 1000:,.1f} us"


def _num(value) -> str:
    return "-" if value is None else f"{value:.4f}"


# --- --wait's bar ----------------------------------------------------------------------------


class Bar:
    """A sweep's progress on stderr: jobs ended of all, kernels finished of listed (the running
    jobs' reports); one bar redrawn on a terminal, otherwise a line each time a job ends."""

    def __init__(self, stream, *, redraw: bool | None = None):
        self.stream = stream
        self.redraw = stream.isatty() if redraw is None else redraw
        self.said = None

    def __call__(self, detail: dict) -> None:
        counts = detail["counts"]
        total = sum(counts[state] for state in STATES)
        ended = sum(counts[state] for state in ENDED)
        finished = listed = 0
        share = float(ended)
        for job in detail["jobs"]:
            progress = job["progress"] or {}
            done, of = progress.get("kernels_finished") or 0, progress.get("kernels_listed") or 0
            if job["state"] == "ready":
                done = of  # its last report may predate its last kernel
            finished, listed = finished + done, listed + of
            if job["state"] == "running" and of:
                share += min(done / of, 1.0)  # a running job's part of its own share
        share = share / total if total else 1.0
        kernels = f"  {finished:,}/{listed:,} kernels" if listed else ""
        text = f"{ended}/{total} jobs ended{kernels}  ({summary(counts)})"
        if self.redraw:
            self.stream.write(f"\r{bar(share)} {share:4.0%}  {text}\x1b[K")
            self.stream.flush()
        elif ended != self.said:
            self.said = ended
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.redraw:
            print(file=self.stream, flush=True)
