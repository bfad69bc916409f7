"""`python -m bench`: the lab-scale table (bench/lab.py); `python -m bench community`: the
community table (bench/community/). `python3 run.py bench [community]` runs them in .venv."""

import sys

from bench import community, lab

try:
    if sys.argv[1:2] == ["community"]:
        sys.exit(community.main(sys.argv[2:]))
    sys.exit(lab.main())
except KeyboardInterrupt:  # what it started is stopped and dropped on the way out
    print("bench: interrupted", file=sys.stderr)
    sys.exit(130)
