"""``python -m support check-claim ID [ID ...] [--notes PATH ...]``: the checks a new or changed
claim must pass, in seconds (support/commands/claim_checks.py): its entry, its order, its
placement, its fingerprint, its control. Exit status 0 when every check passes (a check that
cannot run here, the fingerprint without the notes, is said with the reason), 1 when one
fails, 2 for a usage error.
"""
from __future__ import annotations

import time

from support.commands.claim_checks import CHECKS, check_claims, notes_docs
from support.rules import entries as reg


def arguments(parser) -> None:
    notes = ("a notes file, plain text or Markdown (repeat; lecture=PATH names it); default: "
             "../shared/notes beside the checkout")
    parser.add_argument("ids", nargs="+", metavar="ID", help="the claim(s) to check")
    parser.add_argument("--notes", action="append", metavar="PATH", help=notes)


def run(args) -> int:
    start = time.perf_counter()
    try:
        registry = reg.load_entries()
    except reg.EntryError as exc:
        print(f"entry  FAIL  {exc}")
        return 1
    docs, why = notes_docs(args.notes, registry)
    try:
        found = check_claims(args.ids, docs, why)
    except KeyError as exc:
        print(f"check-claim: no claim {exc.args[0]} in the section files")
        return 2
    failed = 0
    for cid, findings in found.items():
        c = registry[cid]
        print(f"{cid}  {c.file}, {c.source}")
        for f in findings:
            print(f"  {f.check:<12} {f.status:<5} {f.text}")
        bad = sum(f.status == "FAIL" for f in findings)
        failed += bad > 0
        print(f"  -> {'FAILS: ' + str(bad) + ' to fix' if bad else 'passes'}")
    print(f"{len(found) - failed} of {len(found)} claim(s) pass ({', '.join(CHECKS)}) in "
          f"{time.perf_counter() - start:.1f} s")
    return 1 if failed else 0
