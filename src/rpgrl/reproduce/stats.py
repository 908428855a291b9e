"""Seed statistics for the reproduction suite: means with 95% percentile-bootstrap intervals, paired differences.

Standard library only. The bootstrap draws with a fixed seed, so a report regenerated from the same runs prints
the same intervals. Runs of two arms at the same seed start from the same warm-started model, so differences are
paired by seed (the interval is over the mean of per-seed differences).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

BOOTSTRAP_SAMPLES = 10_000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its percentile-bootstrap interval; `n` = number of values."""

    mean: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile of already sorted values, linear interpolation between order statistics (numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_means(values: list[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> list[float]:
    """Sorted means of `samples` resamples (with replacement, same size) of `values`."""
    rng = random.Random(seed)
    n = len(values)
    return sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(samples))


def mean_interval(values: list[float], level: float = LEVEL, samples: int = BOOTSTRAP_SAMPLES) -> Interval:
    """Mean of `values` with its two-sided `level` percentile-bootstrap interval (NaN-free input expected).

    One value gives a zero-width interval at the value; none gives NaNs.
    """
    if not values:
        return Interval(math.nan, math.nan, math.nan, 0)
    means = bootstrap_means(values, samples)
    tail = (1 - level) / 2
    return Interval(sum(values) / len(values), quantile(means, tail), quantile(means, 1 - tail), len(values))


def paired_difference(a: dict[int, float], b: dict[int, float], level: float = LEVEL) -> Interval:
    """Mean over the seeds both arms ran of a[seed] - b[seed], with its bootstrap interval."""
    seeds = sorted(set(a) & set(b))
    return mean_interval([a[s] - b[s] for s in seeds], level)
