"""Scoring responses with a reward function, each result checked: the reward is the user's code (a registered
function), so what it raises or returns wrong is named in one line with the sample, never a traceback or a NaN
that reads as a diverged run."""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch

from rpgrl.config import REWARD_LIMIT
from rpgrl.errors import UsageError, first_line


class RewardFailed(UsageError):
    """The reward function failed on a sample: it raised, returned no Reward, or a value or part that is not a finite
    number. Raised while scoring a step's rollouts (before its update: the run is kept at the step before) or an
    evaluation's responses."""


def _number(v: Any) -> float | None:
    """`v` as a float (numpy and torch scalars included), or None for what is not a number (a str, None, a list)."""
    if isinstance(v, (str, bytes)) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several values
        return None


def checked_reward(reward_fn: Callable, name: str, i: int, text: str, ans: str) -> tuple[float, bool, dict[str, float]]:
    """One sample's (value, correct, parts), each checked; RewardFailed naming the sample otherwise."""
    where = f"reward {name!r} on sample {i} (response {text[:60]!r})"
    try:
        r = reward_fn(text, ans)
    except Exception as e:  # the user's reward code: its error and where, in one line
        frame = traceback.extract_tb(e.__traceback__)[-1]
        raise RewardFailed(f"{where} raised {type(e).__name__}: {first_line(e)} ({frame.filename}:{frame.lineno})"
                           ) from None  # fmt: skip
    value, parts = _number(getattr(r, "value", None)), getattr(r, "parts", None)
    if value is None or not hasattr(r, "correct") or not isinstance(parts, Mapping):
        raise RewardFailed(f"{where} returned {first_line(repr(r))[:80]}: a reward function returns "
                           "rpgrl.rewards.Reward(value: float, correct: bool, parts: dict of floats)")  # fmt: skip
    if not abs(value) <= REWARD_LIMIT:  # NaN, inf, or so large that the advantages' float32 sums overflow
        raise RewardFailed(f"{where} returned {value}: rewards must be finite with |r| <= {REWARD_LIMIT:g} "
                           "(advantages square them in float32)")  # fmt: skip
    numbers = {k: _number(v) for k, v in parts.items()}
    bad = [k for k, v in numbers.items() if v is None or not math.isfinite(v)]
    if bad:  # it would reach the step's metrics as a NaN, and read as a diverged run
        raise RewardFailed(f"{where} returned part {bad[0]!r} = {parts[bad[0]]!r}: parts must be finite numbers")
    try:
        correct = bool(r.correct)
    except (TypeError, ValueError, RuntimeError):  # an array of several values: no truth value
        raise RewardFailed(
            f"{where} returned correct={first_line(repr(r.correct))[:60]}: correct is one bool"
        ) from None
    return value, correct, numbers


def score(reward_fn: Callable, name: str, texts: list[str], answers: list[str]):
    """Rewards (B,) float32, correctness (B,) bool and summed parts; a reward that raises, returns no Reward, or a
    value (NaN, infinite or above REWARD_LIMIT in size) or part that is not a finite number raises RewardFailed
    naming the sample."""
    values, correct, parts = [], [], {}
    for i, (text, ans) in enumerate(zip(texts, answers, strict=True)):
        value, ok, sample_parts = checked_reward(reward_fn, name, i, text, ans)
        values.append(value)
        correct.append(ok)
        for k, v in sample_parts.items():
            parts.setdefault(k, []).append(v)
    return (
        torch.tensor(values, dtype=torch.float32),
        torch.tensor(correct, dtype=torch.bool),
        {k: torch.tensor(v) for k, v in parts.items()},
    )


def correct_flags(reward_fn: Callable, name: str, texts: list[str], answers: list[str]) -> list[bool]:
    """Each response's `correct`, every result checked as `score` checks it (an evaluation's accuracy)."""
    return [checked_reward(reward_fn, name, i, t, a)[1] for i, (t, a) in enumerate(zip(texts, answers, strict=True))]
