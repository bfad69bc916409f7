"""Tools around Cascade, not part of it: what a profiling harness would do, and the demo.

`tracer_format` is the one definition of the stats rows the NVBit tracer writes; `generator`
writes whole run folders with it (the tests, the samples and the benchmarks use it);
`simulation` writes a simulator run of a generated run (Accel-Sim's stdout for its kernelslists);
`upload` puts a run folder into the bucket the way the harness does; `samples` is the spec
of the shipped `samples/`; `demo` is `python3 run.py demo`. What Cascade runs (the poller,
the tasks, the API, the admin) never imports from here. The operator commands
`generate_trace` and `load_samples` live here (`tools/management/commands/`; `tools` is an app
for that alone, installed by the demo's settings, cascade.settings_demo, which the tests use too,
and by no deployment's), each calling one function of tools.
"""
