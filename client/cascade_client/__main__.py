"""`python -m cascade_client`: the `cascade` command."""

import sys

from cascade_client.cli import main

sys.exit(main())
