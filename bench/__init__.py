"""Benchmarks: each figure beside a reference that does the same work without Cascade.

`python -m bench` (bench/lab.py) prints the lab-scale table of issue 11; the single-figure
scripts (`ingest_bench.py`, `api_bench.py`, `analysis_bench.py`, `load.py`) still run as
`.venv/bin/python bench/<name>.py`. `python -m bench.blank_lines`: blank lines against real
rows in a stats file's parse (issue 18, finding 13), beside the readings of earlier commits.
`python -m bench.simlog`: reading a 1 GB simulator log against `grep` (issue 20), peak RSS.
`python -m bench.pull`: the web server's peak memory while `cascade pull` fetches 1 GB (issue 21).
`python -m bench.events`: from a `metadata.json` upload to `ready`, with S3 events and with polling (issue 22).
"""
