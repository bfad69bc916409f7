"""`python -m bench`: the lab-scale table (bench/lab.py); `python3 run.py bench` runs it in .venv."""

import sys

from bench.lab import main

try:
    sys.exit(main())
except KeyboardInterrupt:  # what it started is stopped and dropped on the way out
    print("bench: interrupted", file=sys.stderr)
    sys.exit(130)
