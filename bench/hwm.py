"""Run a Python script, then write its peak resident set (VmHWM, KiB) to a file at exit.

    python -m bench.hwm OUT_FILE manage.py ingest_traces ...

The child's own high-water mark, read from /proc/self/status as it exits. wait4's
ru_maxrss is not that: Linux carries the RSS of the process image replaced by exec into it,
and a child started by vfork (subprocess's way) replaces the parent's, so a child of a large
parent reports at least the parent's size.
"""

import atexit
import runpy
import sys


def write_hwm(path: str) -> None:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                with open(path, "w") as out:
                    out.write(line.split()[1])
                return


if __name__ == "__main__":
    out, script, *args = sys.argv[1:]
    atexit.register(write_hwm, out)
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")
