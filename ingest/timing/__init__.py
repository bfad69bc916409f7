"""A run's steps (`timeline.json`) and measured kernel times (`timing.csv`): pure readers.

Three readers, one module each, answering the questions a parse asks of a launch (its step,
its duration: `step_of`, `duration_of`, then `unmatched` once every launch is asked):

- ingest.timing.timeline: timeline.json's steps, `parse_timeline` and `StepIndex`.
- ingest.timing.timing_csv: timing.csv, `read_timing`, which tells the two formats apart and
  reads Cascade's own, `ctx,kernel_id,start_ns,end_ns,duration_ns`, one row per launch, keyed by
  the launch's context and kernel id.
- ingest.timing.nsys: Nsight Systems' export (docs/formats.md#nsight-exports), matched to the
  launches in correlation-id order per context.

Memory is what ingestion's stays flat with: each reader holds launches in arrays, never a
Python object per step or kernel. Timing or a timeline that cannot be read never fails a trace:
the reader raises TimingError, and ingestion keeps the kernels, says what was wrong, and serves
them without it.
"""

INT64 = range(-(2**63), 2**63)


class TimingError(ValueError):
    """timeline.json or timing.csv cannot be used; the message says why (and where)."""
