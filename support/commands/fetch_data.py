"""``python -m support fetch-data [--url URL]``: download the UCI concrete data into the user
cache once, verified by content (support/lab/data.py). Tests never download."""
from __future__ import annotations

from support.lab.data import UCI_ZIP_URL, DataError, download


def arguments(parser) -> None:
    parser.add_argument("--url", default=UCI_ZIP_URL)


def run(args) -> int:
    try:
        print(f"cached and verified: {download(args.url)}")
    except DataError as exc:
        print(f"error: {exc}")
        return 1
    return 0
