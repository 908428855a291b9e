"""Math answer scoring: strict mode = the authors' rule (spec 7.6 table, section-9 item 25); rewards."""

from __future__ import annotations

import pytest

from rpgrl.rewards import REWARDS, Reward
from rpgrl.rewards.math import (
    INVALID,
    MathReward,
    extract_strict,
    has_answer_line,
    math_score,
    normalize_answer,
    strict_correct,
)

# ---------- strict mode: the reference table of spec 7.6, every row (obtained by running the official scorer) ------

PAD = "Let me think. " * 5 + "\n"  # the "..." before the answer in the table
STRICT_TABLE = [
    # (response tail, ground truth, correct?)
    (PAD + "Answer: 540", "540", True),  # plain answer line after reasoning
    ("Answer: $540$", "540", True),  # $...$ unwrapped
    ("Answer: \\boxed{540}", "540", True),  # \boxed{} unwrapped inside the answer line
    ("answer:540", "540", True),  # case-insensitive, no space
    ("ANSWER : 540", "540", True),  # spaces around the colon
    ("Answer: 540.", "540", False),  # trailing period kept: prediction "540."
    ("Answer: 1,000", "1000", True),  # thousands separator removed from an all-digit answer
    ("Answer: x = 7", "7", True),  # text after the last "="
    ("Answer: $x=5$", "5", True),  # "=" inside math
    ("The answer is 540", "540", False),  # no "Answer:" -> [INVALID]
    ("\\boxed{540}", "540", False),  # a bare \boxed{} is not an answer line
    ("Answer: 12\nAnswer: 13", "13", True),  # the last match wins
    ("Answer: 336", "336^\\circ", True),  # ^\circ removed from the ground truth
    ("Answer: \\frac12", "\\frac{1}{2}", True),  # \frac shorthand expanded
    ("Answer: 0.5", "\\frac{1}{2}", False),  # no numeric equivalence
    ("Answer: 45 degrees", "45", True),  # unit word removed
    ("Answer: 5 units", "5", True),  # unit word removed
    ("Answer: 2\\sqrt{3}", "2\\sqrt3", True),  # \sqrt shorthand expanded in the ground truth
    ("Answer: **25**", "25", False),  # markdown bold is not removed
    ("Answer: 540\n" + "x" * 300, "540", False),  # the answer line is outside the 300-character window
]


@pytest.mark.parametrize("response,gt,expected", STRICT_TABLE)
def test_strict_reference_table(response, gt, expected):
    assert strict_correct(response, gt) is expected
    assert bool(math_score(response, gt, mode="strict")) is expected


def test_strict_window_boundary():
    # 300 characters exactly: "Answer: 540" fits when it starts at the window's first character, not one earlier
    tail = "\n" + "y" * (300 - len("Answer: 540") - 1)
    assert strict_correct("Answer: 540" + tail, "540")
    assert not strict_correct("Answer: 540" + tail + "y", "540")  # the "A" falls out, no match left


NORMALIZE = [
    # (raw, authors' normalised form) -- hand-derived from the rules of spec 7.6 step 3
    ("\\text{(A)}", "(A)"),  # \text{} unwrapped (shortest match)
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # \boxed{} unwrapped (longest match)
    ("a = 3", "3"),  # text after the last "="
    ("an apple", "apple"),  # leading article removed
    ("banana split", "banansplit"),  # ... blindly, anywhere: "a " inside a word too (faithful quirk)
    ("\\$5.50", "5.50"),  # "\$" removed
    ("1,234,567", "1234567"),  # commas of an all-digit answer removed
    ("1,2,3", "123"),  # ... even when they separate a list (faithful quirk)
    ("(1,2)", "(1,2)"),  # not all digits: commas kept
    ("\\sqrt2+\\frac34", "\\sqrt{2}+\\frac{3}{4}"),  # both shorthands expanded
    ("\\fracab c", "\\frac{a}{b}c"),  # spaces are removed before the shorthand expansion
    ("10\\text{ cm}^2", "10"),  # space removed, "cm" removed, then the leftover "\text{}^2" removed
    ("see $x$ and $y$", "x"),  # the first $...$ pair replaces the whole line
    ("90^\\circ", "90"),  # degree sign removed
    ("  7  ", "7"),  # stripped
]


@pytest.mark.parametrize("raw,expected", NORMALIZE)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_extract_strict():
    assert extract_strict("no answer here") == INVALID
    assert extract_strict("Answer:\n42") == "42"  # \s* crosses the newline, as the original pattern does
    assert extract_strict("answer: 1\nfinal ANSWER: 2 \n") == "2 "


def test_strict_matches_verl_math_dapo_if_installed():
    """Differential check against verl's math_dapo scorer (the file the authors forked), when verl is installed."""
    dapo = pytest.importorskip("verl.utils.reward_score.math_dapo")
    import random

    rng = random.Random(0)
    atoms = [
        "Answer:",
        "answer :",
        "\n",
        " ",
        "=",
        "$",
        "\\boxed{",
        "}",
        "{",
        "\\frac",
        "\\sqrt",
        "1",
        "2",
        "0",
        ",",
        ".",
        "x",
        "a ",
        "an ",
        "\\text{",
        "degrees",
        "^\\circ",
        "\\!",
        "**",
        "\\$",
        "-",
        "(",
        ")",
    ]
    for _ in range(3000):
        resp = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 25)))
        gt = "".join(rng.choice(atoms[5:]) for _ in range(rng.randint(1, 6)))
        ref = dapo.compute_score(resp, gt)
        assert strict_correct(resp, gt) == bool(ref["acc"]), (resp, gt)


# ---------- rewards ----------


def test_math_rewards_registered_and_valued():
    assert {"math", "math01"} <= set(REWARDS.names())
    pm1, zero_one = REWARDS.get("math"), REWARDS.get("math01")
    strict_pm1 = MathReward(mode="strict")
    r = strict_pm1("work\nAnswer: 7", "7")
    assert r == Reward(value=1.0, correct=True, parts={"correct": 1.0, "format": 1.0})
    r = strict_pm1("\\boxed{7}", "7")
    assert r == Reward(value=-1.0, correct=False, parts={"correct": 0.0, "format": 0.0})
    from dataclasses import replace

    strict01 = replace(zero_one, mode="strict")
    assert strict01("Answer: 7", "7").value == 1.0 and strict01("Answer: 8", "7").value == 0.0
    assert pm1.correct_value == 1.0 and pm1.wrong_value == -1.0
    # the format part is logged, and only added when asked
    shaped = MathReward(mode="strict", format_weight=0.5)
    assert shaped("Answer: 8", "7").value == -0.5  # wrong but well formatted
    assert shaped("8", "7").value == -1.0


def test_math_reward_rejects_bad_config():
    with pytest.raises(ValueError, match="unknown math scoring mode 'fuzzy'"):
        MathReward(mode="fuzzy")
    with pytest.raises(ValueError, match="unknown math scoring mode"):
        math_score("Answer: 1", "1", mode="fuzzy")


def test_has_answer_line():
    assert has_answer_line("blah\nAnswer: 5\n\n")
    assert not has_answer_line("Answer: 5\nmore text")  # not the last line
    assert not has_answer_line("Answer:   ")  # empty answer
    assert not has_answer_line("")
