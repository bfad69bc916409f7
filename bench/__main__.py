"""`python -m bench`: the lab-scale table (bench/lab.py); `python -m bench community`: the
community table (bench/community/); `python -m bench sweep`: a sweep's throughput with one and
two `cascade worker`s (bench/sweep.py). `python3 run.py bench [community|sweep]` runs them in .venv."""

import sys

from bench import community, lab, sweep

try:
    if sys.argv[1:2] == ["community"]:
        sys.exit(community.main(sys.argv[2:]))
    if sys.argv[1:2] == ["sweep"]:
        sys.exit(sweep.main(sys.argv[2:]))
    sys.exit(lab.main())
except KeyboardInterrupt:  # what it started is stopped and dropped on the way out
    print("bench: interrupted", file=sys.stderr)
    sys.exit(130)
