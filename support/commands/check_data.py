"""``python -m support check-data [PATH]``: verify a concrete data file, or the one a run would
read (support/lab/data.py): its rows, its mixes and its fingerprint."""
from __future__ import annotations

from support.harness.concrete_data import named
from support.lab.data import DataError, load_concrete


def arguments(parser) -> None:
    parser.add_argument("path", nargs="?", help="a .xls/.csv or a folder (default: the cache)")


def run(args) -> int:
    try:
        d = load_concrete(named(args.path))
        print(f"{d.source}: {len(d)} rows, {len(set(d.mix_ids.tolist()))} mixes, fingerprint ok")
    except DataError as exc:
        print(f"error: {exc}")
        return 1
    return 0
