"""The embedded synthetic task: worked solutions re-checked by independent arithmetic, disjoint splits, the reward."""

from __future__ import annotations

import hashlib
import random
import re
from types import SimpleNamespace

import pytest

from rpgrl.models import build_char_tokenizer
from rpgrl.rewards import get_reward, synthetic
from rpgrl.rewards.synthetic import CHARS, make_problem, make_problems, max_problems, split_of, synthetic_reward


@pytest.mark.parametrize(
    "a,b,solution",
    [
        (993, 681, "3+1+0=4\n9+8+0=17\n9+6+1=16\nAnswer: 1674"),  # carries into every column
        (100, 100, "0+0+0=0\n0+0+0=0\n1+1+0=2\nAnswer: 200"),  # no carry at all
        (999, 999, "9+9+0=18\n9+9+1=19\n9+9+1=19\nAnswer: 1998"),  # largest sum
        (505, 495, "5+5+0=10\n0+9+1=10\n5+4+1=10\nAnswer: 1000"),  # every column sums to exactly 10
    ],
)
def test_worked_examples(a, b, solution):
    p = make_problem(a, b)
    assert p.prompt == f"Q:{a}+{b}\n"
    assert p.solution == solution
    assert p.answer == solution.rsplit(" ", 1)[1]


def check_solution(p) -> None:
    """Independent re-derivation: operands from the prompt, then every line's arithmetic and carry."""
    a, b = map(int, re.fullmatch(r"Q:(\d+)\+(\d+)\n", p.prompt).groups())
    *steps, last = p.solution.split("\n")
    assert last == f"Answer: {a + b}" and p.answer == str(a + b)
    carry = 0
    for k, line in enumerate(steps):
        x, y, c, s = map(int, re.fullmatch(r"(\d)\+(\d)\+(\d)=(\d+)", line).groups())
        assert (x, y, c) == ((a // 10**k) % 10, (b // 10**k) % 10, carry)
        assert s == x + y + c
        carry = s // 10
    assert len(steps) == 3


def test_generated_solutions_are_correct_and_use_the_charset():
    tok = build_char_tokenizer(CHARS)
    for split in ("train", "val", "test"):
        for p in make_problems(300, seed=1, split=split):
            check_solution(p)
            text = p.prompt + p.solution
            assert set(text) <= set(CHARS)
            assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text


def test_splits_are_disjoint_deterministic_and_sized():
    sets = {s: {p.prompt for p in make_problems(2000, seed=0, split=s)} for s in ("train", "val", "test")}
    assert all(len(v) == 2000 for v in sets.values())  # distinct within a split
    assert not (sets["train"] & sets["val"]) and not (sets["train"] & sets["test"]) and not (sets["val"] & sets["test"])
    for s, prompts in sets.items():
        for q in prompts:
            a, b = map(int, q[2:-1].split("+"))
            assert split_of(a, b) == s
    # membership is a property of the pair, not of the seed: another seed draws other problems of the same split
    other = {p.prompt for p in make_problems(2000, seed=1, split="test")}
    assert other != sets["test"] and all(split_of(*map(int, q[2:-1].split("+"))) == "test" for q in other)
    assert [p.prompt for p in make_problems(50, 3, "val")] == [p.prompt for p in make_problems(50, 3, "val")]
    # about 80 / 10 / 10 over all 810,000 pairs
    counts = {"train": 0, "val": 0, "test": 0}
    for a in range(100, 1000, 7):
        for b in range(100, 1000):
            counts[split_of(a, b)] += 1
    total = sum(counts.values())
    assert abs(counts["test"] / total - 0.1) < 0.01 and abs(counts["val"] / total - 0.1) < 0.01


def test_make_problems_bad_input():
    with pytest.raises(ValueError, match="split"):
        make_problems(3, 0, "dev")
    with pytest.raises(ValueError, match="n must be"):
        make_problems(10**6, 0, "test")


@pytest.mark.parametrize(
    "completion,answer,correct,fmt",
    [
        ("3+1+0=4\n9+8+0=17\n9+6+1=16\nAnswer: 1674", "1674", True, True),  # the reference solution
        ("Answer:1674", "1674", True, True),  # no space after the colon
        ("Answer: 1675", "1674", False, True),  # wrong number, right format
        ("Answer: 1674\nAnswer: 1675", "1674", False, True),  # the last answer counts
        ("Answer: 1675\nAnswer: 1674", "1674", True, True),
        ("Answer: 1674\n9+9", "1674", True, False),  # correct but trailing junk after the answer line
        ("Answer: 01674", "1674", False, True),  # no numeric equivalence: exact strings
        ("1674", "1674", False, False),  # no answer line
        ("", "1674", False, False),  # empty output
        ("Answer: ", "1674", False, False),  # empty answer
    ],
)
def test_reward_table(completion, answer, correct, fmt):
    r = synthetic_reward(completion, answer)
    assert r.correct is correct
    assert r.value == float(correct)
    assert r.parts == {"correct": float(correct), "format": float(fmt)}


def test_reward_is_registered_and_accepts_every_reference_solution():
    fn = get_reward("synthetic")
    assert fn is synthetic_reward
    for p in make_problems(200, seed=2, split="test"):
        assert fn(p.solution, p.answer).correct
        assert not fn(p.solution, str(int(p.answer) + 1)).correct


class _CountingRandom(random.Random):
    draws = 0

    def _randbelow(self, n):
        _CountingRandom.draws += 1
        return super()._randbelow(n)


def test_a_large_draw_takes_one_random_number_per_problem(monkeypatch):
    """Near the split's size, drawing pairs and skipping repeats and other splits took ~28 random numbers per val
    problem (1.1 million for 40,500): a large n samples the split's listed pairs, one number per problem."""
    monkeypatch.setattr(synthetic, "random", SimpleNamespace(Random=_CountingRandom))
    n = max_problems("val")
    problems = make_problems(n, seed=4, split="val")
    assert _CountingRandom.draws == n
    pairs = {tuple(map(int, p.prompt[2:-1].split("+"))) for p in problems}
    assert len(pairs) == n and all(split_of(a, b) == "val" for a, b in pairs)
    assert [p.prompt for p in make_problems(n, seed=4, split="val")] == [p.prompt for p in problems]


def test_the_defaults_problems_are_drawn_as_before():
    """The embedded default trains on make_problems(20000, seed, "train") and evaluates on make_problems(300, 0,
    "val"): the problems of every recorded run (hashes of the prompts at acaf2ad)."""
    for n, seed, split, digest in ((20000, 0, "train", "793eb10ae14bd15b"), (20000, 1, "train", "b200452217f281e4"),
                                   (300, 0, "val", "df3ddd68a30f617f")):  # fmt: skip
        prompts = "".join(p.prompt for p in make_problems(n, seed, split))
        assert hashlib.sha256(prompts.encode()).hexdigest()[:16] == digest
