"""``python -m support COMMAND``: the suite's one command line (support/cli.py)."""
import sys

from .cli import main

sys.exit(main())
