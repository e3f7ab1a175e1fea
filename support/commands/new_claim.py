"""``python -m support new-claim SECTION --source L:90 --paraphrase "..." [--id ID | --prefix P]``:
a new claim's entry, pinned to its sentence, and its test stub, in its section's files.

It plans the entry (support/rules/scaffold.py: the section, the ID given or the next free one,
marked suite-added where the catalogue lacks it), reads the claim's sentence from the notes
(support/notes/pin.py: the files ``--notes`` names, else the copies beside the checkout) and
only then writes the entry, with that sentence's fingerprint, and the test stub; the other
entries stay as they were, byte for byte. Where no notes can be read it writes the entry
unpinned and says how to pin it. Exit status 0 when written, 2 for a usage error.
"""
from __future__ import annotations

from support.commands.claim_checks import notes_docs
from support.notes import pin
from support.paths import ROOT
from support.rules import entries as reg
from support.rules import scaffold


def arguments(parser) -> None:
    notes = ("a notes file, plain text or Markdown (repeat; lecture=PATH names it); default: "
             "../shared/notes beside the checkout")
    parser.add_argument("section", help="the section: its file (08_pytorch_records_a_tape, "
                        "lecture/08, sheet/01_key_ideas_07) or its heading or part")
    parser.add_argument("--source", required=True, help="its line in the notes: L:123 or S:12")
    parser.add_argument("--paraphrase", required=True, help="the claim in one line")
    parser.add_argument("--id", default=None, help="an ID the catalogue lists (PREFIX-NN); "
                        "default: the next free ID of the section's prefix, marked suite-added")
    parser.add_argument("--prefix", default=None, help="the prefix of the ID to assign, where "
                        "not the one most of the section's claims have (TAPE, JIT, ...)")
    parser.add_argument("--kind", default="a", help="a exact API (default) ... h not testable "
                        "(claims/README.md)")
    parser.add_argument("--tier", default="fast", help="fast (default), slow, gpu or bench")
    parser.add_argument("--test-name", default=None, help="the test's name (default: test_ and "
                        "the paraphrase's words, its marks spelled out)")
    parser.add_argument("--notes", action="append", metavar="PATH", help=notes)


def run(args) -> int:
    try:
        planned = scaffold.plan(args.section, args.source, args.paraphrase, args.id,
                                args.prefix, args.kind, args.tier)
    except (scaffold.ScaffoldError, reg.EntryError) as exc:
        print(f"new-claim: {exc}")
        return 2
    cid = planned["id"]
    docs, why = notes_docs(args.notes, reg.load_entries())
    fp, said = "", f"not pinned: {why}; then python -m support pin --claim {cid} --write"
    if docs is not None:
        claim = reg.Claim(id=cid, document=planned["document"], section="",
                          source=planned["source"], paraphrase=planned["paraphrase"],
                          kind=planned["kind"], tier=planned["tier"])
        got = pin.sentence_of(claim, docs)
        if isinstance(got, str):
            print(f"new-claim: {planned['source']}: {got} (nothing written)")
            return 2
        fp, line, text = got
        said = f"line {line}: {text}\n               fingerprint {fp}"
    try:
        toml, module, name = scaffold.write(planned, fp, args.test_name)
    except (scaffold.ScaffoldError, reg.EntryError) as exc:
        print(f"new-claim: {exc}")
        return 2
    how = "given" if args.id else f"the next free {cid.split('-')[0]} ID"
    if planned["suite_added"]:
        how += ", marked suite-added: a sentence the catalogue does not list"
    print(f"{cid} ({how})\n"
          f"  entry        {toml.relative_to(ROOT)}\n"
          f"  sentence     {said}\n"
          f"  test stub    {module.relative_to(ROOT)}::{name}, and its control "
          f"{cid.lower().replace('-', '_')}_sentence_made_false\n"
          "next: write the entry's figures, the test's measurement and the control "
          "(claims/README.md), then\n"
          f"  python -m support check-claim {cid}\n"
          f"  python -m pytest --claim {cid}\n"
          f"  python -m support controls --claim {cid}")
    return 0
