"""Bootstrap intervals against exact enumeration and numpy, paired differences, comparison statuses, verdicts."""

import itertools
import math

import numpy as np
import pytest

from rpgrl.reproduce.report import status, verdict
from rpgrl.reproduce.stats import Interval, bootstrap_means, mean_interval, paired_difference, quantile


def test_quantile_matches_numpy():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 13):
        x = sorted(rng.normal(size=n).tolist())
        for q in (0.0, 0.025, 0.3, 0.5, 0.975, 1.0):
            assert quantile(x, q) == pytest.approx(float(np.quantile(x, q)), abs=1e-12)


def test_bootstrap_interval_matches_the_exact_bootstrap_distribution():
    """n = 5 values: all 5^5 resamples are equally likely, so the exact percentile interval is computable; the
    Monte Carlo interval must land within a small fraction of the data's range of it."""
    values = [0.0, 0.1, 0.35, 0.5, 0.9]
    exact = sorted(sum(r) / 5 for r in itertools.product(values, repeat=5))
    iv = mean_interval(values)
    assert iv.mean == pytest.approx(sum(values) / 5)
    assert iv.low == pytest.approx(quantile(exact, 0.025), abs=0.015)
    assert iv.high == pytest.approx(quantile(exact, 0.975), abs=0.015)
    assert iv.low < iv.mean < iv.high and iv.n == 5


def test_bootstrap_is_seeded_and_degenerate_cases_are_exact():
    assert bootstrap_means([1.0, 2.0, 4.0], 500) == bootstrap_means([1.0, 2.0, 4.0], 500)
    assert mean_interval([0.3, 0.3, 0.3]) == Interval(0.3, 0.3, 0.3, 3)
    assert mean_interval([0.7]) == Interval(0.7, 0.7, 0.7, 1)
    empty = mean_interval([])
    assert empty.n == 0 and math.isnan(empty.mean)


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
    assert verdict(["no data"]) == "No data yet"
