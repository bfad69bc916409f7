"""Benchmarks: each figure beside a reference that does the same work without Cascade.

`python -m bench` (bench/lab.py) prints the lab-scale table of issue 11; the single-figure
scripts (`ingest_bench.py`, `api_bench.py`, `analysis_bench.py`, `load.py`) still run as
`.venv/bin/python bench/<name>.py`.
"""
