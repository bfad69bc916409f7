"""Benchmarks: each figure beside a reference that does the same work without Cascade.

`python -m bench` (bench/lab.py) prints the lab-scale table, `python -m bench community`
(bench/community/) the community-scale one; the other benches run as `python -m bench.<name>`.
docs/performance.md lists every command, what it measures and the latest figures.
"""
