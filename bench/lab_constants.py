"""What the lab bench (bench/lab.py) and its whole-run figures (bench/lab_runs.py) share: the
bucket, the recorded reference and how figures are printed; here so neither imports the other."""

MB = 1e6

# The pass over new runs is judged against issue 11's recorded pass (its reference).
RECORDED_RUNS_SECONDS, RECORDED_RUNS = 148.8, 2_000

# Each run of the lab gets its own key prefix in the bucket, so each pass sees only its runs.
BUCKET = "cascade-lab"
TEMPLATE_RUN = "lab-template-run"


def mb(nbytes: float) -> str:
    """Bytes as MB, or kB and B where MB would say 0.0."""
    if nbytes >= 100_000:
        return f"{nbytes / MB:,.1f} MB"
    return f"{nbytes / 1000:,.1f} kB" if nbytes >= 1000 else f"{nbytes:,.0f} B"


def secs(seconds: float) -> str:
    return f"{seconds:,.1f} s" if seconds >= 10 else f"{seconds:,.2f} s"
