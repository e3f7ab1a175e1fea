"""What one claim test (one variant) measured: the ``claim`` fixture's object.

::

    @pytest.mark.claim("TAPE-07")
    def test_backward_twice_doubles_the_gradient(claim):
        ratio = ...
        claim.check("ratio", ratio)   # the registry's figure: stated 2.0, tolerance exact
        assert ratio > 1.5            # the qualitative claim itself

``claim.check`` compares a value with the figure of that name in the registry (stated value,
tolerance, bounds): the registry is the one home of every figure the notes state, and a test
never writes one. ``claim.record`` keeps a value the notes do not state (reported, never
compared).
"""
from __future__ import annotations

import pytest

from support.rules import entries as reg
from support.rules.verdicts import BrokenBound


class NotApplicable(pytest.skip.Exception):
    """Raised by ``claim.not_applicable``: the claim does not apply to this environment."""


def jsonable(value):
    """``value`` as plain JSON data (NumPy and torch scalars and arrays included)."""
    try:
        import numpy as np
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    except ImportError:
        pass
    if hasattr(value, "item") and hasattr(value, "numel"):  # a torch tensor
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


class ClaimRecorder:
    """What one test (one variant) measured. Obtained through the ``claim`` fixture."""

    def __init__(self, ids: list[str], registry: dict, variant: str = ""):
        self.ids = ids
        self.variant = variant
        self._registry = registry
        self.measurements: dict[str, dict] = {}
        self.notes: list[str] = []

    # ------------------------------------------------------------------ measuring
    def record(self, name: str, value, unit: str = "", reduce: str | None = None,
               note: str = ""):
        """Record a measured value the notes do not state (reported, never compared).

        ``reduce="max"``/``"min"`` keeps the worst value over repeated calls (properties).
        Returns the value kept."""
        value = jsonable(value)
        prev = self.measurements.get(name)
        entry = {"value": value, "unit": unit}
        if prev is not None and reduce in ("max", "min"):
            entry["value"] = (max if reduce == "max" else min)(prev["value"], value)
            entry["count"] = prev.get("count", 1) + 1
        if note:
            entry["note"] = note
        self.measurements[name] = entry
        return entry["value"]

    def figure(self, name: str) -> reg.Figure:
        """The registry's figure ``name`` of this test's claim(s), for this variant."""
        owners = [c for c in self.ids if name in self._registry[c].figures]
        if len(owners) > 1:
            raise KeyError(f"figure {name!r} is stated by several claims of this test "
                           f"({owners}): give them distinct names")
        owner = self._registry[owners[0] if owners else self.ids[0]]
        return owner.figure(name, self.variant)

    def check(self, name: str, value, interval: tuple[float, float] | None = None,
              unit: str = "", note: str = "", reduce: str | None = None,
              halt: bool = False, timed: bool = False, load: dict | None = None):
        """Compare ``value`` with the registry's figure ``name`` and record both.

        ``interval`` (lo, hi) is the measurement's uncertainty (a timing's bootstrap
        interval, a mean's confidence interval): the figure is then decided only when the
        whole interval lies on one side of each bound and tolerance edge; otherwise it is
        *undecided* and the claim inconclusive. A broken bound makes the variant fail once
        the test ends (the rest of the test still runs); a stated figure outside its
        tolerance makes it drift. ``reduce="max"``/``"min"`` keeps the worst value over
        repeated calls (a property's examples) and judges that. ``halt=True`` raises the
        AssertionError at once when a bound breaks (a Hypothesis property needs that to
        shrink its counterexample). ``timed=True`` says the interval comes from timings, so
        the figure moves with the machine's load as well as with a release (``report diff``
        sets such changes apart); only a figure its entry declares ``timed`` may be checked
        so, and ``load`` (support.harness.timed.settle) says what the machine's load was
        during its trials and how its interval was widened for it. Returns the value judged."""
        fig = self.figure(name)
        if timed != fig.timed:
            raise TypeError(f"{fig.claim}'s figure {name!r} is "
                            + ("not declared timed in its entry (timed = true) but was checked "
                               "as a timing" if timed else "declared timed in its entry but "
                               "was checked without the timing method (support.machine.timing)"))
        value = jsonable(value)
        # halt judges this example alone: after one bad example the running worst would make
        # every one Hypothesis tries while shrinking "fail", and it would shrink to nonsense
        if halt and fig.judge(value, interval)[0] == "broken":
            self._keep(name, fig, value, interval, unit, note, reduce, timed, load)
            raise BrokenBound(f"{name} = {value!r} breaks its bound ({fig.rule()})")
        self._keep(name, fig, value, interval, unit, note, reduce, timed, load)
        return self.measurements[name]["value"]

    def _keep(self, name, fig, value, interval, unit, note, reduce, timed, load=None) -> None:
        prev = self.measurements.get(name)
        count = 1
        if prev is not None and reduce in ("max", "min"):
            value = (max if reduce == "max" else min)(prev["value"], value)
            count = prev.get("count", 1) + 1
        outcome, on = fig.judge(value, interval)
        entry = {"value": value, "unit": unit, "outcome": outcome, "decided_by": on,
                 "rule": fig.rule()}
        if note:
            entry["note"] = note
        if reduce:
            entry["count"] = count
        if interval is not None:
            entry["interval"] = [float(interval[0]), float(interval[1])]
            entry["timed"] = timed
        if load is not None:
            entry["load"] = jsonable(load)
        if fig.reference:
            # shown beside the measurement, never compared: no stated figure, no tolerance
            entry["reference"] = fig.stated
        elif fig.stated is not None:
            entry["stated"] = fig.stated
            entry["tolerance"] = fig.tolerance().as_dict()
            entry["within"] = {"within": True, "outside": False}.get(entry["outcome"])
        if fig.bounds:
            entry["bound"] = [str(b) for b in fig.bounds]
        self.measurements[name] = entry

    def decided(self, name: str, value, interval=None) -> bool:
        """Whether ``claim.check(name, value, interval)`` would decide the figure (used to
        stop repeating a timing once its interval resolves)."""
        return self.figure(name).judge(jsonable(value), interval)[0] != "undecided"

    # ------------------------------------------------------------------ words
    def note(self, text: str) -> None:
        """A sentence for the report (e.g. which version behaved how)."""
        self.notes.append(str(text))

    def not_applicable(self, reason: str):
        """End the test: the claim does not apply here (an API absent in this version...)."""
        raise NotApplicable(reason)

    def payload(self) -> dict:
        return {"measurements": self.measurements, "notes": self.notes}
