"""`python -m bench`: the lab-scale table (bench/lab.py); `python3 run.py bench` runs it in .venv."""

import sys

from bench.lab import main

sys.exit(main())
