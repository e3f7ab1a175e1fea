"""``python -m support COMMAND``: the suite's commands that are not a module of their own.

    stability   run the README's test command N times and report what was not stable
                (support/stability.py)
"""
from __future__ import annotations

import sys

COMMANDS = {"stability": "support.stability"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    import importlib
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
