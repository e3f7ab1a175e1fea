"""support.timing: the noise policy and the interleaving, on synthetic trials."""
import pytest

from support import timing


class Recorder:
    def __init__(self):
        self.m = {}

    def record(self, name, value, **kw):
        self.m[name] = (value, kw)


def cmp(a, b):
    return timing.Comparison({"a": timing.Side("a", a), "b": timing.Side("b", b)}, len(a))


def test_ratio_is_min_over_min_with_a_band():
    r = cmp([2.0, 2.2, 2.1, 2.4], [1.0, 1.1, 1.0, 1.2]).ratio("a", "b")
    assert r.value == 2.0
    assert r.lo <= 2.0 * (1 - timing.NOISE_FLOOR) and r.hi >= 2.0 * (1 + timing.NOISE_FLOOR)


def test_a_clear_ratio_is_decided_and_a_contradicted_one_fails():
    c = cmp([3.0] * 6, [1.0] * 6)
    rec = Recorder()
    assert timing.check_ratio(rec, c, "a", "b", above=2.0, name="a/b") is True
    with pytest.raises(AssertionError):
        timing.check_ratio(rec, c, "a", "b", above=4.0, name="a/b")
    with pytest.raises(AssertionError):
        timing.check_ratio(rec, c, "a", "b", below=2.0, name="a/b")


def test_a_ratio_inside_the_noise_band_is_drift_not_a_pass():
    c = cmp([1.0, 1.3, 0.9, 1.2], [1.0, 0.9, 1.2, 1.0])
    rec = Recorder()
    assert timing.check_ratio(rec, c, "a", "b", above=1.0, name="a/b") is None
    value, kw = rec.m["a/b resolved beyond noise"]
    assert value is False and kw["stated"] is True


def test_sides_are_interleaved_and_warmed_up_outside_the_clock():
    calls = []
    c = timing.compare({"x": lambda: calls.append("x"), "y": lambda: calls.append("y")},
                       repeats=3, warmup=1)
    assert calls[:2] == ["x", "y"]                       # warm-up
    assert calls[2:] == ["x", "y", "y", "x", "x", "y"]   # alternating order per round
    assert c.rounds == 3 and len(c["x"].times) == 3


def test_with_many_rounds_the_band_is_the_spread_of_the_min_ratio_over_stretches():
    a = [2.0] * 10 + [2.6] * 10        # a slower second half: the blocks disagree
    b = [1.0] * 20
    r = cmp(a, b).ratio("a", "b")
    assert r.value == 2.0 and r.hi >= 2.6
    steady = cmp([2.0, 3.0] * 10, [1.0, 1.0] * 10).ratio("a", "b")
    assert steady.hi == 2.0 * (1 + timing.NOISE_FLOOR)   # every stretch has min 2.0
