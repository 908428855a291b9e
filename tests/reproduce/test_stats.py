"""t intervals against tables and simulation, paired differences, comparison statuses, verdicts."""

import math
import random

import pytest

from rpgrl.reproduce.report import add_multiplicity, mixed_commits, status, status_p, verdict
from rpgrl.reproduce.stats import (
    MIN_SEEDS,
    Interval,
    holm,
    mean_interval,
    p_value,
    paired_difference,
    t_quantile,
    t_sf,
)


@pytest.mark.parametrize(
    ("p", "df", "table"),  # Student's t quantiles as printed in statistical tables (6 significant digits)
    [(0.975, 1, 12.7062), (0.975, 2, 4.30265), (0.975, 4, 2.77645), (0.975, 9, 2.26216), (0.975, 30, 2.04227),
     (0.995, 3, 5.84091), (0.9, 5, 1.47588), (0.975, 10**4, 1.96020),
     (0.9995, 1, 636.619), (0.9995, 2, 31.5991), (0.9995, 5, 6.86883), (0.995, 1, 63.6567)],  # the heavy tails
)  # fmt: skip
def test_t_quantile_matches_the_tables(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, rel=2e-5)
    with pytest.raises(ValueError):
        t_quantile(0.4, 3)


def test_mean_interval_by_hand():
    values = [0.0, 0.1, 0.35, 0.5, 0.9]
    m = sum(values) / 5
    s = math.sqrt(sum((v - m) ** 2 for v in values) / 4)
    iv = mean_interval(values)
    assert (iv.mean, iv.n) == (pytest.approx(m), 5)
    assert iv.low == pytest.approx(m - 2.776445 * s / math.sqrt(5), abs=1e-6)
    assert iv.high == pytest.approx(m + 2.776445 * s / math.sqrt(5), abs=1e-6)
    assert mean_interval([0.3, 0.3, 0.3]) == Interval(pytest.approx(0.3), pytest.approx(0.3), pytest.approx(0.3), 3)
    one = mean_interval([0.7])
    assert one.mean == 0.7 and one.n == 1 and math.isnan(one.low) and math.isnan(one.high)
    empty = mean_interval([])
    assert empty.n == 0 and math.isnan(empty.mean)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_intervals_cover_a_zero_difference_at_the_stated_rate(n):
    """Normal per-seed differences with mean 0: the interval must exclude 0 about 5% of the time at any n (the
    percentile bootstrap it replaced did at 48% for n = 2 and 17% for n = 5)."""
    rng = random.Random(n)
    trials = 4000
    wrong = sum(mean_interval([rng.gauss(0, 1) for _ in range(n)]).excludes_zero() for _ in range(trials))
    assert 0.035 < wrong / trials < 0.065, wrong / trials


def test_fewer_than_min_seeds_never_resolve():
    """Two equal differences give a zero-width interval: still no verdict below MIN_SEEDS seeds."""
    for n in range(1, MIN_SEEDS):
        d = paired_difference({s: 0.5 for s in range(n)}, {s: 0.2 for s in range(n)})
        assert status(d, "higher") == status(d, "differs") == status(d, "similar", 0.01) == "unresolved"
    d = paired_difference({s: 0.5 + 0.01 * s for s in range(MIN_SEEDS)}, {s: 0.2 for s in range(MIN_SEEDS)})
    assert status(d, "higher") == "supports"


def test_mixed_commits_names_the_seeds_whose_runs_differ():
    a = {0: {"commit": "x"}, 1: {"commit": "x"}, 2: {"commit": ""}, 3: {}}
    b = {0: {"commit": "x"}, 1: {"commit": "y"}, 2: {"commit": "y"}, 3: {"commit": "y"}}
    assert mixed_commits(a, b, {0, 1, 2, 3}) == [1]  # unknown commits are not counted as different


def test_paired_difference_pairs_by_seed():
    a = {0: 0.5, 1: 0.9, 2: 0.1, 7: 0.4}
    b = {0: 0.4, 1: 0.8, 2: 0.0, 3: 0.99}  # seed 3 and 7 have no partner
    d = paired_difference(a, b)
    assert d.n == 3
    assert (d.mean, d.low, d.high) == pytest.approx((0.1, 0.1, 0.1))  # the unpaired spread cancels
    assert d.excludes_zero()
    assert not paired_difference({0: 1.0, 1: 0.0}, {0: 0.0, 1: 1.0}).excludes_zero()


@pytest.mark.parametrize(
    ("low", "high", "expect", "want"),
    [
        (0.01, 0.2, "higher", "supports"),
        (-0.2, -0.01, "higher", "contradicts"),
        (-0.1, 0.1, "higher", "unresolved"),
        (-0.1, 0.1, "similar", "unresolved"),  # wider than the margin both ways: no evidence either way
        (-0.04, -0.01, "similar", "consistent"),  # resolved from 0 but within the margin: the same
        (0.06, 0.1, "similar", "contradicts"),
        (-0.3, -0.1, "differs", "supports"),
        (-0.1, 0.1, "differs", "unresolved"),
        # an interval that rules out the expected advantage down to the margin (was "unresolved")
        (-0.04, 0.03, "higher", "falls short"),
        (0.01, 0.04, "higher", "falls short"),  # resolved, but below the advantage that reproduces (was "supports")
        (-0.04, 0.06, "higher", "unresolved"),
        # "differs" by more than the margin: a resolved but smaller difference is not support (was "supports")
        (0.01, 0.04, "differs", "contradicts"),
        (-0.03, 0.04, "differs", "contradicts"),
        (0.03, 0.2, "differs", "unresolved"),
    ],
)
def test_status_follows_the_interval(low, high, expect, want):
    assert status(Interval((low + high) / 2, low, high, 5), expect, margin=0.05) == want


def test_verdict_words():
    assert verdict(["supports", "consistent"]) == "Reproduced at this scale"
    assert verdict(["supports", "unresolved"]) == "Partly reproduced at this scale"
    assert verdict(["unresolved", "unresolved"]) == "Not resolved at this scale"
    assert verdict(["contradicts", "unresolved"]) == "Contradicted at this scale"
    assert verdict(["contradicts", "supports"]) == "Mixed at this scale"
    assert verdict(["falls short", "unresolved"]) == "Not reproduced at this scale"
    assert verdict(["falls short", "contradicts"]) == "Contradicted at this scale"
    assert verdict(["falls short", "consistent"]) == "Mixed at this scale"
    assert verdict(["no data"]) == "No data yet"


def test_t_sf_against_closed_forms():
    """df = 1 (Cauchy): 1/2 - atan(t) / pi; df = 2: 1/2 - t / (2 sqrt(2 + t^2)); and the quantile's inverse."""
    for t in (0.0, 0.3, 1.0, 2.5, 40.0, -1.7):
        assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)
        assert t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    for p, df in ((0.975, 4), (0.9995, 1), (0.9, 30)):
        assert t_sf(t_quantile(p, df), df) == pytest.approx(1 - p, rel=1e-7)
    assert t_sf(math.inf, 3) == 0.0 and t_sf(-math.inf, 3) == 1.0


def test_p_value_by_hand_and_against_the_interval():
    """Three differences (df = 2): p = 2 sf(mean / se) from the df = 2 closed form; and over random intervals, p is
    below 5% exactly when the interval is resolved (beyond 0, or beyond +-margin for a shift)."""
    values = [0.1, 0.25, 0.4]
    mean, se = 0.25, math.sqrt(sum((v - 0.25) ** 2 for v in values) / 2) / math.sqrt(3)
    t = mean / se
    assert p_value(mean_interval(values)) == pytest.approx(2 * (0.5 - t / (2 * math.sqrt(2 + t * t))), rel=1e-9)
    shifted = (mean - 0.05) / se
    want = 2 * (0.5 - shifted / (2 * math.sqrt(2 + shifted**2)))
    assert p_value(mean_interval(values), shift=0.05) == pytest.approx(want, rel=1e-9)
    rng = random.Random(1)
    for _ in range(300):
        iv = mean_interval([rng.gauss(0.05, 0.1) for _ in range(rng.randint(3, 8))])
        assert (p_value(iv) < 0.05) == iv.excludes_zero()
        assert (p_value(iv, 0.03) < 0.05) == (iv.low > 0.03 or iv.high < -0.03)
    assert math.isnan(p_value(mean_interval([0.2])))


def test_holm_by_hand():
    adjusted = holm([0.01, 0.04, 0.03, 0.005])  # sorted: 0.005 x4, 0.01 x3, 0.03 x2, 0.04 x1, then running max
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    kept = holm([math.nan, 0.01, 0.02, 0.9])
    assert math.isnan(kept[0]) and kept[1:] == pytest.approx([0.03, 0.04, 0.9])


def _comparison(expect, values, margin=0.0):
    import dataclasses

    return {"expect": expect, "margin": margin, "difference": dataclasses.asdict(mean_interval(values)),
            "status": status(mean_interval(values), expect, margin)}  # fmt: skip


def test_status_p_is_below_alpha_exactly_when_the_status_is_resolved():
    """Each status's p-value is that of the test it rests on: below 5% exactly when its interval condition holds,
    for every expectation, with and without a margin; an unresolved comparison's smallest p is 5% or more."""
    rng = random.Random(2)
    for _ in range(400):
        iv = mean_interval([rng.gauss(rng.uniform(-0.1, 0.1), 0.05) for _ in range(rng.randint(3, 7))])
        for expect in ("higher", "similar", "differs"):
            for margin in (0.0, 0.03):
                if expect == "similar" and not margin:
                    continue
                st = status(iv, expect, margin)
                p = status_p(iv, expect, margin, st)
                assert (p < 0.05) == (st != "unresolved"), (iv, expect, margin, st, p)


def test_add_multiplicity_over_the_whole_suite():
    """A support with p near 0.03 survives alone but not in a family of five tests; a tight equivalence survives
    it; the claim's second verdict counts the lost support as unresolved."""
    weak = [0.02, 0.05, 0.08, 0.01, 0.06]  # resolved above 0, p ~ 0.03
    assert status(mean_interval(weak), "higher") == "supports" and 0.0125 < p_value(mean_interval(weak)) < 0.05
    claims = {
        "a": {"comparisons": [_comparison("higher", weak), _comparison("similar", [0.0, 0.001, -0.001], 0.05)]},
        "b": {"comparisons": [_comparison("higher", [0.01, -0.02, 0.03]) for _ in range(3)]},
    }
    add_multiplicity(claims)
    first, same = claims["a"]["comparisons"]
    assert first["family"] == 5 and first["p"] == pytest.approx(p_value(mean_interval(weak)))
    assert first["p_holm"] == pytest.approx(holm([c["p"] for r in claims.values() for c in r["comparisons"]])[0])
    assert first["p_holm"] >= 0.05 > same["p_holm"]
    assert verdict([c["status"] for c in claims["a"]["comparisons"]]) == "Reproduced at this scale"
    assert claims["a"]["verdict_holm"] == "Partly reproduced at this scale"
    alone = {"a": {"comparisons": [_comparison("higher", weak)]}}
    add_multiplicity(alone)
    assert alone["a"]["verdict_holm"] == "Reproduced at this scale"


def test_p_values_at_the_edges():
    """Arms equal on every seed: no evidence of any difference (p = 1, which was 0 under `>=`, sorting first in
    Holm's order); two values: the df = 1 closed form; an unresolved status's printed p is its smallest test's."""
    zero = mean_interval([0.0, 0.0, 0.0])
    assert p_value(zero) == 1.0 and status_p(zero, "higher", 0.0, "unresolved") == 1.0
    assert status(zero, "differs") == "unresolved"  # no margin: equal arms do not contradict "differs"
    assert p_value(mean_interval([0.1, 0.3])) == pytest.approx(1 - 2 * math.atan(2) / math.pi)
    iv = mean_interval([0.02, -0.01, 0.05])  # mean 0.02, s 0.03: t = 0.02 / (0.03 / sqrt(3)) = 1.155, df 2
    t = 0.02 / (math.sqrt(((0.0) ** 2 + 0.03**2 + 0.03**2) / 2) / math.sqrt(3))
    two_sided = 2 * (0.5 - t / (2 * math.sqrt(2 + t * t)))
    assert status_p(iv, "higher", 0.0, "unresolved") == pytest.approx(two_sided)


def test_holm_family_and_the_second_verdict_count_every_resolved_status():
    """Comparisons below MIN_SEEDS stay out of the family; a 'falls short' that does not survive Holm is
    unresolved in the second verdict, as a support is."""
    few = {
        "a": {"comparisons": [_comparison("higher", [0.02, 0.05, 0.08, 0.01, 0.06]), _comparison("higher", [0.1, 0.2])]}
    }
    add_multiplicity(few)
    first, second = few["a"]["comparisons"]
    assert first["family"] == 1 and first["p_holm"] == pytest.approx(first["p"]) and "p" not in second
    short = [-0.015, 0.015, 0.045, 0.005, 0.025]
    assert status(mean_interval(short), "higher", 0.05) == "falls short"
    claims = {"a": {"comparisons": [_comparison("higher", short, 0.05)]},
              "b": {"comparisons": [_comparison("higher", [0.01, -0.02, 0.03]) for _ in range(4)]}}  # fmt: skip
    add_multiplicity(claims)
    c = claims["a"]["comparisons"][0]
    assert c["p_holm"] == pytest.approx(5 * c["p"]) and c["p_holm"] >= 0.05
    assert claims["a"]["verdict_holm"] == "Not resolved at this scale"


def _sign_flip_p(values: list[float], bound: float) -> float:
    """The one-sided sign-flip test of mean > bound by enumeration, doubled (`p_side`'s convention): the share of
    the 2^n sign patterns of (value - bound) whose mean is at least the observed one."""
    import itertools

    d = [v - bound for v in values]
    seen = sum(d) / len(d)
    pats = list(itertools.product((1, -1), repeat=len(d)))
    return min(1.0, 2 * sum(sum(s * x for s, x in zip(p, d, strict=True)) / len(d) >= seen for p in pats) / len(pats))


@pytest.mark.parametrize("n", [3, 4, 5, 6, 8])
def test_equal_differences_resolve_only_by_the_sign_flip_test(n):
    """n equal paired differences give a zero-width t interval and p = 0 under the t test (three seeds of a
    2.5-point accuracy step 'supported' a claim at p ~ 0): their p is the sign-flip test's, enumerated here, and a
    status is resolved only where it is below 5% (from 6 seeds on); identical arms likewise (as 'consistent')."""
    step = [0.1 + 0.025 - 0.1] * n  # an accuracy step; mean_interval's rounding leaves a width of ~1e-17 or none
    iv = mean_interval(step)
    assert p_value(iv) == pytest.approx(_sign_flip_p(step, 0.0)) == pytest.approx(2.0 ** (1 - n))
    assert status(iv, "higher") == ("supports" if n >= 6 else "unresolved")
    assert status(mean_interval([-x for x in step]), "higher") == ("contradicts" if n >= 6 else "unresolved")
    assert status(iv, "higher", 0.05) == ("falls short" if n >= 6 else "unresolved")
    same = mean_interval([0.0] * n)
    assert status(same, "similar", 0.05) == ("consistent" if n >= 6 else "unresolved")
    assert status_p(same, "similar", 0.05, status(same, "similar", 0.05)) == pytest.approx(
        _sign_flip_p([0.0] * n, -0.05)
    )
    assert status(same, "differs", 0.05) == ("contradicts" if n >= 6 else "unresolved")
    assert status(mean_interval([0.2] * n), "differs", 0.05) == ("supports" if n >= 6 else "unresolved")
    for expect, margin in (("higher", 0.0), ("higher", 0.05), ("similar", 0.05), ("differs", 0.05)):
        for values in (step, [0.0] * n, [0.2] * n, [-0.2] * n):
            iv = mean_interval(values)
            st = status(iv, expect, margin)
            assert (status_p(iv, expect, margin, st) < 0.05) == (st != "unresolved"), (values, expect, st)
    nearly = mean_interval([0.025, 0.025, 0.025 + 1e-6])  # a spread, however small, is the t test's
    assert status(nearly, "higher") == "supports"


def test_a_comparison_of_equal_differences_says_why_it_is_unresolved():
    """Five equal differences of +2.5 points read "+2.5 points [+2.5, +2.5] over 5 seeds ... **unresolved**" with
    nothing saying why, where the report's own reading of the tables resolves an interval wholly above 0: the
    comparison names the sign-flip test, as a comparison over too few seeds names that."""
    from rpgrl.reproduce.report import _diff_text

    iv = mean_interval([0.025] * 5)
    c = {"a": "x", "b": "y", "metric": "final", "expect": "higher", "margin": 0.0, "difference": iv.__dict__,
         "status": status(iv, "higher")}  # fmt: skip
    assert c["status"] == "unresolved"
    assert "every seed's difference is the same: no verdict below 6 seeds, by the sign-flip test)" in _diff_text(c)
    six = mean_interval([0.025] * 6)
    c.update(difference=six.__dict__, status=status(six, "higher"))
    assert c["status"] == "supports" and "sign-flip" not in _diff_text(c)
