"""The embedded default task: 3-digit addition, worked digit by digit, ending in `Answer: X`.

    prompt   "Q:993+681\\n"
    solution "3+1+0=4\\n9+8+0=17\\n9+6+1=16\\nAnswer: 1674"

One line per digit, ones first: `a_i+b_i+carry_in=sum`; the answer is read off the last line and the ones digits of
the earlier ones. Why this task (docs/cpu-default-notes.md, design A): the answer needs several reasoning tokens,
so a 0.8M-parameter model learns it smoothly under supervision, and stopping the warm start at ~20% held-out greedy
accuracy leaves a large greedy-vs-sampled gap that RL with a 0/1 reward closes in a few minutes on 2 CPU cores.

Splits: every pair (a, b) of 3-digit numbers belongs to exactly one split, by a fixed hash of "a+b" (train 80%,
val 10%, test 10%), so held-out problems are never trained on whatever the seeds. The reward is the same
"Answer:" check as the math benchmarks (`rpgrl.rewards.math`, strict mode) with a 1/0 value.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Literal

from rpgrl.rewards import register_reward
from rpgrl.rewards.math import MathReward

Split = Literal["train", "val", "test"]
SPLITS: tuple[str, ...] = ("train", "val", "test")

# Every character the task writes: the alphabet for `rpgrl.models.build_char_tokenizer(CHARS)`.
CHARS = "0123456789+=:\nQAnswer "

_LOW, _HIGH = 100, 999  # operands are 3-digit numbers


@dataclass(frozen=True)
class Problem:
    """One task instance: `prompt` is what the model sees, `solution` the supervised target (without EOS),
    `answer` the ground truth compared against the response's last `Answer:` line."""

    prompt: str
    answer: str
    solution: str


def split_of(a: int, b: int) -> Split:
    """The split a pair belongs to: crc32("a+b") mod 10 == 0 -> test, == 1 -> val, else train."""
    h = zlib.crc32(f"{a}+{b}".encode()) % 10
    return "test" if h == 0 else "val" if h == 1 else "train"


def make_problem(a: int, b: int) -> Problem:
    """The problem `a+b` with its digit-by-digit solution.

    >>> make_problem(993, 681).solution
    '3+1+0=4\\n9+8+0=17\\n9+6+1=16\\nAnswer: 1674'
    """
    lines, carry = [], 0
    da, db = str(a)[::-1], str(b)[::-1]
    for i in range(max(len(da), len(db))):
        x, y = int(da[i]) if i < len(da) else 0, int(db[i]) if i < len(db) else 0
        s = x + y + carry
        lines.append(f"{x}+{y}+{carry}={s}")
        carry = s // 10
    answer = str(a + b)
    return Problem(prompt=f"Q:{a}+{b}\n", answer=answer, solution="\n".join(lines) + f"\nAnswer: {answer}")


def max_problems(split: Split) -> int:
    """The most problems `make_problems` draws from `split`: half its pairs (about 10% of the 900 x 900 operand pairs
    for val and test, 80% for train), so that drawing distinct ones stays quick."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    return (648_000 if split == "train" else 81_000) // 2


def make_problems(n: int, seed: int, split: Split) -> list[Problem]:
    """`n` distinct problems of `split`, drawn uniformly from its pairs; the same (n, seed, split) gives the same list.

    Up to half of `max_problems(split)` (the default's 20,000 train and 300 val problems too) pairs are drawn one at
    a time, skipping those seen or of another split, which slows as n nears the split's size; above it the split's
    pairs are listed and sampled without replacement, in time linear in the 810,000 pairs (the largest val set:
    0.7 s, was 1.2 s; train: 1.5 s, was 2.1 s; building the problems takes longer), so a list above half is not the
    smaller one's extended.

    >>> [p.prompt for p in make_problems(2, seed=0, split="test")] == [p.prompt for p in make_problems(2, 0, "test")]
    True
    """
    if not 0 <= n <= max_problems(split):
        raise ValueError(f"make_problems: n must be in [0, {max_problems(split)}] for split {split!r}, got {n}")
    rng = random.Random(f"rpgrl-synthetic:{split}:{seed}")
    large = n > max_problems(split) // _LISTED_ABOVE
    pairs = rng.sample(_pairs_of(split), n) if large else _draw_pairs(rng, n, split)
    return [make_problem(a, b) for a, b in pairs]


_LISTED_ABOVE = 2  # n above max_problems / 2 samples the listed pairs (below it drawing is about as quick or quicker)


def _draw_pairs(rng: random.Random, n: int, split: Split) -> list[tuple[int, int]]:
    """`n` distinct pairs of `split`, drawn one at a time (skipping repeats: slow as n nears the split's size)."""
    seen: set[tuple[int, int]] = set()
    out = []
    while len(out) < n:
        a, b = rng.randint(_LOW, _HIGH), rng.randint(_LOW, _HIGH)
        if (a, b) in seen or split_of(a, b) != split:
            continue
        seen.add((a, b))
        out.append((a, b))
    return out


def _pairs_of(split: Split) -> list[tuple[int, int]]:
    """Every pair of `split`, in order."""
    span = range(_LOW, _HIGH + 1)
    return [(a, b) for a in span for b in span if split_of(a, b) == split]


# 1/0 correctness of the last `Answer:` line under the math benchmarks' strict rule (last 300 characters, last
# match, the authors' normalisation), parts `correct` and `format`: the `math01` reward in strict mode, e.g.
# synthetic_reward("Answer: 8\nAnswer: 7", "7") -> Reward(value=1.0, correct=True, parts={correct: 1, format: 1}).
synthetic_reward = register_reward("synthetic")(MathReward(mode="strict", correct_value=1.0, wrong_value=0.0))
