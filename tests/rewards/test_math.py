"""Math answer scoring: strict mode = the authors' rule (spec 7.6 table, section-9 item 25); rewards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from rpgrl.rewards import REWARDS, Reward
from rpgrl.rewards import hedges as _hedges
from rpgrl.rewards import math as _math
from rpgrl.rewards.math import (
    INVALID,
    MODES,
    MathReward,
    clean_answer,
    equiv_correct,
    extract_final_answer,
    extract_strict,
    has_answer_line,
    is_hedge,
    math_score,
    normalize_answer,
    strict_correct,
    without_remarks,
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
    """Differential check against verl's math_dapo scorer (the file the authors forked), when verl is installed.
    The file is loaded alone (it needs only `re`): importing the `verl` package takes seconds."""
    import importlib.util
    import random

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed")
    path = os.path.join(spec.submodule_search_locations[0], "utils", "reward_score", "math_dapo.py")
    file_spec = importlib.util.spec_from_file_location("_verl_math_dapo", path)
    dapo = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(dapo)

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


def test_strict_rewards_use_the_authors_rule():
    # "0.5" vs \frac{1}{2}: equivalent, but the authors' rule compares normalised strings (spec 7.6 table)
    pm1, zero_one = REWARDS.get("math_strict"), REWARDS.get("math01_strict")
    assert pm1("Answer: 0.5", "\\frac{1}{2}").value == -1.0 and zero_one("Answer: 0.5", "\\frac{1}{2}").value == 0.0
    assert pm1("Answer: \\frac12", "\\frac{1}{2}").value == 1.0 and zero_one("Answer: 540", "540").value == 1.0


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


# ---------- equiv mode: the final answer judged by mathematical equivalence (math-verify) ----------

# words after a number in its text (`\\text{12 apples}`) that are no unit, and some that are
NOT_UNITS = "pi squared tenths i factorial reciprocal gross halves thirds quarters times plus dozens perhaps n".split()
UNITS = ["students", "ways", "square units", "sq ft", "km/h", "meters per second", "m", "feet", "months", "people"]

EQUIV_TABLE = [
    # (response, ground truth, correct?)
    # fractions and decimals
    ("Answer: 0.5", "\\frac{1}{2}", True),  # decimal = fraction (strict says no)
    ("Answer: 1/2", "\\frac{1}{2}", True),  # plain-text fraction
    ("Answer: \\dfrac{1}{2}", "\\frac{1}{2}", True),  # \dfrac
    ("Answer: \\frac{2}{4}", "\\frac{1}{2}", True),  # unreduced fraction
    ("Answer: 0.333333", "\\frac{1}{3}", True),  # 6 decimals: math-verify rounds floats to 6 places
    ("Answer: 0.33", "\\frac{1}{3}", False),  # a coarse decimal is not the fraction
    ("Answer: 3.0", "3", True),  # trailing zero
    ("Answer: 03", "3", True),  # leading zero
    ("Answer: 3.01", "3", False),  # close is not equal
    # negatives
    ("Answer: -\\frac{1}{2}", "\\frac{-1}{2}", True),  # sign placement
    ("Answer: \u22121", "-1", True),  # unicode minus sign
    ("Answer: 1", "-1", False),  # sign matters
    # radicals
    ("Answer: 2\\sqrt{2}", "\\sqrt{8}", True),  # simplified radical
    ("Answer: \\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt2}{2}", True),  # rationalised denominator + \sqrt shorthand
    ("Answer: 3\\sqrt{2}", "\\sqrt{8}", False),  # a different radical
    # intervals, tuples, sets
    ("Answer: [2, 5)", "[2,5)", True),  # same half-open interval
    ("Answer: (2, 5]", "[2,5)", False),  # wrong end points open/closed
    ("Answer: x \\in [0, 1]", "[0,1]", True),  # membership statement
    ("Answer: (2, 1)", "(1,2)", False),  # ordered pair in the wrong order
    ("Answer: \\{1, 2\\}", "\\{2, 1\\}", True),  # sets are unordered
    ("Answer: x=5, y=3", "(5,3)", True),  # assignments read as a tuple
    # equations, units, currency, percent
    ("Answer: x = 7", "7", True),  # variable assignment
    ("Answer: 45^\\circ", "45", True),  # degree sign
    ("Answer: 12 \\text{ cm}", "12", True),  # LaTeX unit
    ("Answer: 540 dollars", "540", True),  # unit word (via the authors' normalisation)
    ("Answer: \\$540", "540", True),  # currency sign
    ("Answer: 20\\%", "20", True),  # trailing percent sign
    ("Answer: 336", "336^\\circ", True),  # degree sign on the ground truth (AIME 2025)
    # thousands separators
    ("Answer: 1,000", "1000", True),  # comma
    ("Answer: 1\\,000", "1000", True),  # LaTeX thin space
    ("Answer: 1{,}000,000", "1000000", True),  # {,} and comma mixed
    ("Answer: 1000", "1,000", True),  # separator on the ground-truth side
    # symbolic
    ("Answer: x^2+2x+1", "(x+1)^2", True),  # expanded polynomial
    ("Answer: 2^{10}", "1024", True),  # power evaluates
    ("Answer: \\pi/2", "\\frac{\\pi}{2}", True),  # symbolic constant
    ("Answer: \\pi", "3.14159", False),  # pi is not a 5-decimal approximation
    ("Answer: i + 1", "1+i", True),  # complex number, terms reordered
    ("Answer: \\text{(A)}", "A", True),  # multiple-choice letter in \text
    ("Answer: (B)", "A", False),  # another letter
    # where the answer is, and presentation
    ("Answer: 540.", "540", True),  # trailing period stripped (strict says no)
    ("Answer: **25**", "25", True),  # markdown bold stripped (strict says no)
    ("so the result is $\\boxed{25}$.", "25", True),  # a bare \boxed{} counts when there is no Answer: line
    ("Answer: The answer is $\\boxed{25}$.", "25", True),  # a box inside the answer line is what is judged
    ("Answer: 540\n" + "x" * 300, "540", True),  # no 300-character window (strict says no)
    ("The answer is 5", "5", True),  # neither an Answer: line nor a box: the sentence's answer (a review's)
    ("Therefore, the final answer is $\\frac{1}{2}$. I hope it is correct.", "\\frac{1}{2}", True),
    # ... only as the response's last words (a review: cut or retracted reasoning was rewarded)
    ("So the answer is 540. But wait, if the pairs are ordered we get twice as many, so", "540", False),
    ("The answer is 540. Or maybe 541.", "540", False),
    ("<think>\nthe answer is 540. But wait\n</think>\nSo it is 541.", "540", False),
    ("Answer: 540. Wait, that's wrong.", "540", False),  # only the closing courtesy is read past
    ("Answer: 540\n\nPut inside \\boxed{} as asked.", "540", True),  # a box without a value is no answer
    ("Answer: 540\n\n\\boxed{\\checkmark}", "540", True),
    ("$a = 3$ so $\\boxed{3}$\n\n\\boxed{7}", "7", True),  # a paragraph apart: no run
    ("\\boxed{1}, \\boxed{2}", "12", False),  # a run is several values (the digits joined read as 12)
    ("So $n = \\boxed{4}$ or $n = \\boxed{5}$.", "5", False),
    ("The answer is probably 5 or 6.", "5", False),  # not answer-shaped: no answer
    ("The answer is 12, not 5.", "5", False),
    # empty output
    ("", "5", False),  # nothing at all
    ("Answer: ", "5", False),  # empty answer line
    # two answers: the last Answer: line, else the last box; a hedge inside one answer is judged whole
    ("\\boxed{4}, and so\nAnswer: 5", "5", True),  # the Answer: line beats an earlier box
    ("\\boxed{4}, and so\nAnswer: 5", "4", False),  # ... so the earlier box does not count
    ("Answer: 4\nAnswer: 5", "4", False),  # the last Answer: line wins
    ("\\boxed{4} then \\boxed{5}", "5", True),  # the last box wins
    ("Answer: 4 or 5", "4", False),  # a hedge is a set {4, 5}, not 4
    ("Answer: \\boxed{4}, \\boxed{5}", "5", False),  # two boxes on the answer line: a set again
    # chat formatting: the label alone on its line (markdown, display math), the answer below it (a probe's finds)
    ("**Answer:**\n\\boxed{42}", "42", True),
    ("**Final Answer:**\n\n\\[\n\\boxed{42}\n\\]", "42", True),
    ("Answer: $$\n42\n$$", "42", True),
    ("**Answer:**  \n42", "42", True),
    ("**Answer**: 42", "42", True),  # the bold closes before the colon
    ("Answer:\n42\nBecause 6 x 7 = 42 and not 41.", "42", True),  # only the first line that holds an answer
    ("**Answer:**\n\\boxed{41}", "42", False),
    # AIME's forms: a Unicode degree sign, a remainder written as a congruence
    ("Answer: 336\u00b0", "336^\\circ", True),
    ("Answer: N \\equiv 42 \\pmod{1000}", "42", True),
    ("Answer: 42 (mod 1000)", "42", True),
    ("Answer: 42 (mod 1000)", "41", False),
    # a probe's finds (session 22): what a grader reads past, hedges the authors' rules took, separators in lists
    ("Answer: 336\\degree", "336^\\circ", True),  # \degree (AIME 2025's ground truth)
    ("Answer: \\$4.50", "4.5", True),  # a currency sign before a decimal
    ("Answer: \\$0.75", "\\frac{3}{4}", True),
    ("Answer: \\{100,200\\}", "\\{200, 100\\}", True),  # a comma between elements is not a thousands separator
    ("Answer: x \\in [0,100]", "[0, 100]", True),
    ("Answer: \\left(1,500\\right)", "(1, 500)", True),
    ("Answer: \\{100,200\\}", "100200", False),
    ("Answer: The answer is 113.", "113", True),  # prose a grader reads past
    ("Answer: It is 540", "540", True),
    ("Answer: 540 (the remainder)", "540", True),
    ("Answer: 540, which is the remainder.", "540", True),
    ("Answer: 540, which is the remainder when $N$ is divided by 1000.", "540", False),  # math in the remark: kept
    ("Answer: 540 -- the number of ways", "540", True),
    ("Answer: 540;", "540", True),
    ("Answer: 540 \\blacksquare", "540", True),
    ("Answer: *540*", "540", True),
    ("Answer: \\text{073}", "73", True),
    ("Answer: 540 = m + n", "540", True),  # a reversed equation
    ("Answer: \\textbf{(C)}\\ 7", "7", True),  # AMC: the choice letter and its value
    ("Answer: (C) 7", "7", True),
    ("Answer: (C) 7", "8", False),
    ("The answer is $\\boxed{\\textbf{(C)}\\ 12}$.", "C", True),  # ... for the letter too (was wrong: 12 read)
    ("Answer: (C) 7", "\\textbf{(C)}", True),
    ("Answer: (C) 7", "D", False),
    ("The answer is $\\boxed{\\textbf{(C)}\\ 12, \\textbf{(D)}\\ 13}$.", "C", False),  # a second choice offered
    ("Answer: (C) 12 and (E) 14", "C", False),
    ("Answer: (C) 12 (D) 13", "C", False),
    ("Answer: 540 (not 541)", "541", False),  # a remark with a number is not read past ...
    ("Answer: 540 (m = 37)", "540", True),  # ... unless it only assigns values
    ("Answer: 540 (m = 37, n = 3)", "540", True),
    ("Answer: 540 (m = 37)", "37", False),
    ("Answer: 540 (m + n = 541)", "541", False),
    ("Answer: The answer is not 5", "5", False),
    ("Answer: $540$ or $541$", "540", False),  # hedges: the authors' first $...$ pair read 540
    ("Answer: $540$, $541$", "540", False),
    ("Answer: $540$ and $541$", "541", False),
    ("Answer: x = 4 or x = 5", "5", False),  # ... and their last "=" read 5
    ("Answer: x = 4 \\text{ or } x = 5", "5", False),
    ("Answer: $540$ (or $541$)", "540", False),
    ("Answer: 4 or 5", "4, 5", True),  # not a hedge where the truth has two values
    ("Answer: $1000$ or $2000$", "1,000", False),  # ... but 1,000 is one value
    # Unicode math: radicals, vulgar fractions (a mixed number is a sum), infinity, as models write them
    ("The answer is \\boxed{\u221a2}", "\\sqrt{2}", True),
    ("Answer: 3\u221a3", "3\\sqrt{3}", True),
    ("Answer: 4\u221a3", "\\sqrt{48}", True),
    ("Answer: \u221a(x+1)", "\\sqrt{x+1}", True),
    ("Answer: \u221a{13}", "\\sqrt{13}", True),
    ("Answer: \u221a2/2", "\\frac{\\sqrt{2}}{2}", True),
    ("Answer: \u221b27", "3", True),
    ("Answer: \u221a3", "3", False),
    ("Answer: \u221a2", "\\sqrt{3}", False),
    ("Answer: \u00be", "\\frac34", True),
    ("Answer: \u00bd", "\\frac{1}{3}", False),
    ("Answer: 2\u00bd", "\\frac{5}{2}", True),
    ("Answer: 2\u00bd", "1", False),  # not 2 x 1/2
    ("Answer: (-\u221e, 3]", "(-\\infty,3]", True),
    ("Answer: \u221e", "\\infty", True),
    # repeating decimals as the fractions they are
    ("Answer: 0.\\overline{3}", "\\frac{1}{3}", True),
    ("Answer: 0.1\\overline{6}", "\\frac{1}{6}", True),
    ("Answer: -2.\\overline{27}", "-\\frac{25}{11}", True),
    ("Answer: \\frac13", "0.\\overline{3}", True),
    ("Answer: 0.\\overline{3}", "\\frac{1}{4}", False),
    # an inequality for an interval (math-verify reads a relation as an interval on the truth's side only)
    ("Answer: x < 3", "(-\\infty, 3)", True),
    ("Answer: x \\le 3", "(-\\infty, 3)", False),
    ("Answer: -1 \\le x < 3", "[-1, 3)", True),
    ("Answer: -1 < x < 3", "[-1, 3)", False),
    ("Answer: 3 \\ge x", "(-\\infty,3]", True),
    ("Answer: x \u2265 2", "[2,\\infty)", True),
    ("Answer: x > 2", "[2, \\infty)", False),
    ("Answer: x \\le 3", "3", False),
    ("Answer: x < 3", "(-\\infty, 3) \\cup (5, \\infty)", False),
    # ... and no answer for a pair or two values, which math-verify also reads as intervals (a review's probe)
    ("Answer: 1 < x < 2", "(1, 2)", False),
    ("Answer: 1 < x < 2", "1, 2", False),
    ("Answer: 1<x<2", "\\{1,2\\}", False),
    ("Answer: -3 < k < 5", "-3, 5", False),
    # a radical over a command and its arguments, or a Greek letter; a repeating block inside a longer number is
    # left alone (not 7/6, not 1 and 1/3)
    ("Answer: \u221a\\frac{1}{4}", "\\frac12", True),
    ("Answer: \u221a\u03c0", "\\sqrt{\\pi}", True),
    ("Answer: \u221a\u221a16", "2", True),  # nested: the inner radical first
    ("Answer: 2^\u00bd", "\\sqrt{2}", True),  # a power, not 2 x 1/2 ...
    ("Answer: 2^\u00bd", "1", False),
    ("Answer: 0.1\\overline{6}7", "\\frac{7}{6}", False),
    ("Answer: 1,000.\\overline{3}", "\\frac{4}{3}", False),
    # unparseable LaTeX
    ("Answer: \\frac{", "5", False),  # unclosed group
    ("Answer: \\sqrt{}", "5", False),  # empty radicand
    ("Answer: }{}{", "5", False),  # brace soup
    ("Answer: \\boxed{5", "5", True),  # an unclosed box is still read as 5 by math-verify
    # "answer:" inside a sentence is prose, read past when a box follows (it was read as the final answer) ...
    ("We verify our answer: 540 satisfies both conditions.\n\\boxed{540}", "540", True),
    ("To find the answer: we first compute the sum.\nThe sum is 12, so the result is $\\boxed{12}$.", "12", True),
    ("<think>\nMaybe the answer: 541? Let me recheck.\n</think>\nThe answer is $\\boxed{540}$.", "540", True),
    ("<think>\nMaybe the answer: 541? Let me recheck.\n</think>\nThe answer is $\\boxed{540}$.", "541", False),
    ("Thus the answer: 42", "42", True),  # ... and read when nothing follows
    ("\\boxed{41}, so the answer: 42", "42", True),
    # the last answer counts, label or box: a later box corrects an answer line (a review's: a withdrawn answer
    # was rewarded, the correction not), even where it only boxes a step
    ("Answer: 4\nWait, that is off by one: $\\boxed{5}$", "5", True),
    ("Answer: 4\nWait, that is off by one: $\\boxed{5}$", "4", False),
    ("Answer: 12\n\nWait, I need to include zero.\n\n**Final Answer**\n\\boxed{13}", "12", False),  # strict reads 12
    ("Answer: 12\n\nExplanation: we set $\\boxed{a = 3}$ first." + " More." * 60, "12", False),
    ("Answer: 540\nWe double-check our answer: it works.", "540", True),
    ("so x = \\boxed{4}.\nAnswer: 5", "4", False),
    ("**Final Answer:** 42", "42", True),
    ("1. Answer: 42", "42", True),
    ("Answer:\n\\[ \\boxed{42} \\]", "42", True),  # the box that is the label's answer
    # more of what a grader reads past (a review's): a thousands separator in text, a sentence after the value,
    # a closed interval as an inequality
    ("Therefore, $\\boxed{1\\text{,}000}$", "1000", True),
    ("Answer: 540 is the largest possible real part.", "540", True),
    ("Answer: 821 is the remainder", "821", True),
    ("Answer: 541 is wrong, 540", "540", False),  # digits in what follows: not a remark
    ("Answer: 540 is not correct", "540", False),  # nor a negation (a review: read as 540)
    ("Answer: 540 is wrong", "540", False),
    ("Answer: 540 is too small; the true count must be larger.", "540", False),  # only the value named is read past
    ("Answer: 540 is only an upper bound", "540", False),
    ("Answer: 3 is the minimum; the maximum is nine", "3", False),
    # a correction after an answer line, in a sentence with its value, is the final answer (a review of the first
    # rule, which kept the line: the withdrawn value was rewarded) ...
    ("Answer: 541\n\nHmm, wait. I overcounted by one, so the corrected answer: 540 (after removing it).", "540", True),
    ("Answer: 541\n\nHmm, wait. I overcounted by one, so the corrected answer: 540 (after removing it).", "541", False),
    ("Answer: 34\n\nWait, the diagonal was double counted. So the right answer: \\boxed{33}.", "33", True),
    ("Answer: 34\n\nWait, the diagonal was double counted. So the right answer: \\boxed{33}.", "34", False),
    ("My initial answer: 540\nWait, that double counts. Corrected: \\boxed{539}", "539", True),
    ("My initial answer: 540\nWait, that double counts. Corrected: \\boxed{539}", "540", False),
    ("Final Answer: 4 (since x = 5)\nCheck: \\boxed{5}", "4", False),
    ("2) Answer: 4 (since x = 5)\nCheck: \\boxed{5}", "5", True),
    ("so our answer: 4 (since x = 5)\nCheck: \\boxed{5}", "5", True),
    # boxes parted only by a separator are one answer: two values, or a hedge (only the last box was read)
    ("Solving, we get $\\boxed{2}$ and $\\boxed{3}$.", "2, 3", True),
    ("The answer is \\boxed{4} or \\boxed{5}", "5", False),
    ("$\\boxed{540}$, $\\boxed{541}$", "541", False),
    ("First $\\boxed{7}$ from the table; then the count is $\\boxed{9}$.", "9", True),  # prose between: the last
    # a box in a box is its contents; a sentence after an answer is read past; a label written in a box
    ("\\boxed{\\boxed{540}}", "540", True),
    ("Final Answer: The final answer is 540. I hope it is correct.", "540", True),
    ("Final Answer: The final answer is 540. I hope it is correct.", "54", False),
    ("\\boxed{\\text{The final answer is } 540}", "540", True),
    ("<think>\nMaybe \\boxed{12}? No, 13.\n</think>\n\nThe final answer is 13.", "12", False),
    ("<think>\nMaybe \\boxed{12}? No, 13.\n</think>\n\nThe final answer is 13.", "13", True),
    ("So the answer: \\boxed{4} or \\boxed{5}", "5", False),  # the boxes are the label's own answer: a hedge
    ("\\boxed{4}. On reflection the answer: 5", "4", False),
    ("Answer: 540 is the value of m = n", "540", False),
    # a final review's: prose after </think> does not replace the answer; the authors' rule reads the same text as
    # equiv (two values were right); a check after an answer line is no answer; a sentence's label with a value
    # later in its sentence is prose; labels that only introduce prose cost nothing and do not hide the answer
    ("<think>x\nAnswer: 540\n</think>\nLet me explain the answer: first we factor the number.", "540", True),
    ("<think>hmm\nAnswer: 540\nwait no</think>\nThe answer is $\\boxed{541}$.", "540", False),
    ("<think>hmm\nAnswer: 540\nwait no</think>\nThe answer is $\\boxed{541}$.", "541", True),
    ("Answer: 540\n\nSanity check on the answer: 540 / 4 = 135, an integer, as required.", "540", True),
    ("Let me check the answer: for n = 2 we get 6, too small.\nSo \\boxed{540}", "540", True),
    ("Answer: 540\n" + "Note that the answer: is written as requested.\n" * 20, "540", True),
    ("so the answer: x = 5", "5", True),
    ("\\boxed{\\text{Final Answer: } 540}", "540", True),  # a label written inside the box
    ("$\\boxed{\\textbf{Answer:} 540}$", "540", True),
    ("$\\boxed{\\textbf{Answer:} 540}$", "541", False),
    ("Answer: 4 is the smallest value that does not work, so there is no answer", "4", False),
    ("Answer: 540 is the number of ways", "540", True),
    # the authors' rule reading a check after the answer made a response right for two values (a review's)
    ("Step...\n\n**Answer:** 540\n\nDouble-checking the answer: 540 - 405 = 135", "540", True),
    ("Step...\n\n**Answer:** 540\n\nDouble-checking the answer: 540 - 405 = 135", "135", False),
    ("So the count is $\\boxed{540}$.\n\nCheck of the answer: 540 / 4 = 135", "135", False),
    # the reasoning in <think> is not the answer when one follows it (beyond the authors' rule's 300 characters:
    # inside them, what it reads is right too, as strict-correct implies equiv-correct)
    ("<think>\nAnswer: 541\n" + "Let me check again. " * 20 + "\n</think>\nThe answer is $\\boxed{540}$.", "540", True),
    (
        "<think>\nAnswer: 541\n" + "Let me check again. " * 20 + "\n</think>\nThe answer is $\\boxed{540}$.",
        "541",
        False,
    ),
    ("\\boxed{-1 \\le x \\le 1}", "[-1,1]", True),
    ("\\boxed{-1 < x \\le 1}", "[-1,1]", False),
    # a value, then a remark that only restates it (a review's: a remark with digits kept a right answer wrong);
    # the value is judged alone (`540 (37 + 503)` read as 540 x 540 was right for 291600)
    ("Answer: 540 (37 + 503)", "540", True),
    ("Answer: 540 (37 + 503)", "291600", False),
    ("Answer: 540, since 540 = 37 + 503.", "540", True),
    ("Answer: 540, because m + n = 37 + 503.", "540", True),
    ("Answer: 540 (i.e., 37 + 503)", "540", True),
    ("Answer: 540. Indeed, 540 = 20 \\cdot 27.", "540", True),
    ("Answer: 540 (since 2540 mod 1000 = 540)", "540", True),
    ("Answer: 540 (37 + 504)", "540", False),  # ... not a remark with another value
    ("Answer: 540 (m + n = 541)", "540", False),
    ("Answer: 540, since 541 is too big", "540", False),
    ("Answer: 540 (541 if ordered)", "540", False),
    ("Answer: 5, 7", "5", False),  # a list, a tuple, a product are no remarks
    ("Answer: (3, 4)", "3", False),
    ("Answer: (3, 4)", "(3,4)", True),
    ("Answer: 2 (1 + \\sqrt{2})", "2", False),
    ("Answer: 2 (1 + \\sqrt{2})", "2+2\\sqrt{2}", True),
    ("Answer: 540 (mod 1000)", "540", True),
    # one value boxed or written twice is one answer (a review's: a hedge); several values stay a hedge
    ("$\\boxed{\\frac{1}{2}}$ or $\\boxed{0.5}$", "\\frac12", True),
    ("\\boxed{12}, \\boxed{12.0}", "12", True),
    ("\\boxed{12} \\boxed{12 \\text{ cm}}", "12", True),
    ("\\boxed{(1,2)}, \\boxed{(1,2)}", "(1,2)", True),
    ("Answer: $\\frac{1}{2}$ or $0.5$", "\\frac12", True),
    ("Answer: $\\frac{1}{2}$ (or $0.5$)", "\\frac12", True),
    ("\\boxed{12}, \\boxed{12.0}, \\boxed{13}", "12", False),
    ("Answer: $\\frac{1}{2}$ (or $0.6$)", "\\frac12", False),
    ("Answer: 7, $540$, $540.0$", "540", False),  # a value outside the math groups
    ("$\\frac12$ / $0.5$", "1", False),  # not their quotient
    # a unit in text (math-verify drops `12 \\text{ cm}`'s; it read `\\text{12 apples}` as no number)
    ("\\boxed{12 \\text{ cm}}", "12", True),
    ("\\boxed{5\\text{ apples}}", "5", True),
    ("\\boxed{\\text{12 apples}}", "12", True),
    ("\\boxed{\\text{12 thousand}}", "12", False),
    # ... only a unit's: a known unit or a plural count noun (a review's: any word but a few was read past)
    *[(f"\\boxed{{\\text{{12 {w}}}}}", "12", False) for w in NOT_UNITS],
    *[(f"\\boxed{{\\text{{12 {w}}}}}", "12", True) for w in UNITS],
    ("\\boxed{5\\,\\mathrm{kg}}", "5", True),
    # words in text that scale the number (math-verify drops them: these were right for 12)
    ("\\boxed{12 \\text{ thousand}}", "12", False),
    ("\\boxed{12\\ \\text{thousand dollars}}", "12", False),
    ("\\boxed{12 \\textrm{ million}}", "12", False),
    ("\\boxed{12 \\text{ dozen}}", "12", False),
    ("\\boxed{12 \\text{ squared}}", "12", False),
    ("\\boxed{12 \\text{ cm squared}}", "12", True),  # after a unit: the unit's square
    ("\\boxed{12 \\text{ cm} \\text{ squared}}", "12", True),
    ("\\boxed{12 \\text{ times}}", "12", True),
    # a remark in parentheses, a compound or a place names no multiplier (were wrong: any such word in any text)
    ("The answer is $\\boxed{7 \\text{ (thousands digit)}}$.", "7", True),
    ("The answer is $\\boxed{7 \\text{ (in the thousands place)}}$.", "7", True),
    ("The answer is $\\boxed{7 \\text{ thousands digit}}$.", "7", True),
    ("The answer is $\\boxed{1000 \\text{ (one thousand)}}$.", "1000", True),
    ("The answer is $\\boxed{12 \\text{ (a dozen)}}$.", "12", True),
    ("The answer is $\\boxed{144 \\text{ (12 squared)}}$.", "144", True),
    ("The answer is $\\boxed{5 \\text{ hundred-dollar bills}}$.", "5", True),
    ("The answer is $\\boxed{12{,}000 \\text{ (twelve thousand)}}$.", "12000", True),
    ("\\boxed{12\\text{ hundredths}}", "12", False),  # 0.12 (was right for 12)
    ("\\boxed{12\\text{ tenths}}", "12", False),
    ("\\boxed{12 \\text{ thousandths}}", "12", False),
    ("\\boxed{12 \\text{ lakh}}", "12", False),
    ("\\boxed{2 \\text{ thirds}}", "2", False),  # 2/3, as tenths are (was right for 2)
    ("\\boxed{3 \\text{ fifths}}", "3", False),
    ("\\boxed{7 \\text{ eighths}}", "7", False),
    ("\\boxed{3 \\text{ halves}}", "3", False),
    ("\\boxed{12 \\text{ tens}}", "12", False),
    ("\\boxed{5 \\text{ ten-dollar bills}}", "5", True),
    ("\\boxed{3 \\text{ (tenths digit)}}", "3", True),
    ("\\boxed{\\text{12 squared}}", "12", False),
    ("\\boxed{12 \\text{ cm}^2}", "12", True),
    # an answer followed by "or" and another value is a hedge (a review's: the text after the last box was cut,
    # and `\\boxed{12} or 13` was right for 12 before); a value written twice stays one value
    ("\\boxed{12}, \\boxed{12.0}, or 13", "12", False),
    ("\\boxed{12} or 13", "12", False),
    ("$\\boxed{12}$, or $13$.", "12", False),
    ("\\boxed{12} (or 13)", "12", False),
    ("$\\boxed{12} \\text{ or } 13$", "12", False),
    ("Answer: 12\n\nWait, in fact \\boxed{13} or 14.", "13", False),
    ("</think> The answer is \\boxed{12} or maybe 13", "12", False),
    ("\\boxed{\\frac12} (or 0.5)", "\\frac12", True),
    ("The answer is $\\boxed{\\frac{1}{2}}$ (or $0.5$).", "\\frac12", True),  # was wrong: the period kept ")"
    ("\\boxed{12} or more", "12", False),  # an open range is no single value (was right: no digit after "or")
    ("\\boxed{5} or fewer", "5", False),
    ("\\boxed{5} or so", "5", True),  # about 5: one value
    ("$x = \\boxed{3}$ or $x = 4$", "3", False),  # a second value for the variable (was right: letters after "or")
    ("The answer is $\\boxed{3}$ (or $x = 3.0$).", "3", True),
    ("The distance is $\\boxed{2\\sqrt{2}}$, or more precisely $2\\sqrt{2}$ units.", "2\\sqrt{2}", True),
    ("The smallest such $n$ is $\\boxed{12}$ or more simply twelve.", "12", True),  # restated, no range
    ("The answer is $\\boxed{\\frac{1}{2}}$ or less formally one half.", "\\frac{1}{2}", True),
    ("He needs $\\boxed{12}$ or more, since each box holds one.", "12", False),
    # a value after "or more <adverb>" is offered (judged as a value), and "or more than" is an open range
    ("The answer is $\\boxed{12}$, or more likely 13.", "12", False),
    ("The answer is $\\boxed{12}$, or more precisely $12.0$.", "12", True),
    ("The answer is $\\boxed{12}$, or more likely 13 apples.", "12", False),
    # ... set off by commas too (`or, more likely, 13`: was right for 12, the comma read as the value's words)
    ("The answer is $\\boxed{12}$, or, more likely, $13$.", "12", False),
    ("The answer is $\\boxed{12}$, or, perhaps, 13.", "12", False),
    ("The answer is $\\boxed{12}$, or, more precisely, $12.0$.", "12", True),
    ("The answer is $\\boxed{12}$, or, equivalently, $\\frac{24}{2}$.", "12", True),
    # a number word or an AMC choice alone after the "or" is a value offered too (was right for the box: no digit)
    ("The answer is $\\boxed{5}$, or maybe even $6$.", "5", False),  # "maybe even" (was right for 5)
    ("The answer is 4, or maybe even $\\boxed{5}$.", "5", False),
    ("The answer is $\\boxed{5}$, or maybe six.", "5", False),
    ("The answer is $\\boxed{5}$ or six.", "5", False),
    ("The answer is $\\boxed{5}$, or five.", "5", True),
    ("The answer is $\\boxed{21}$, or twenty-one.", "21", True),
    ("So $\\boxed{\\textbf{(C)}}$ or possibly $\\textbf{(D)}$.", "C", False),
    ("So $\\boxed{\\textbf{(C)}}$, or (C) in the list.", "C", True),
    ("We need $\\boxed{12}$ or more than that.", "12", False),
    ("The answer is $\\boxed{12}$ or less than 13.", "12", False),
    # a value and words after the "or": another value when hedged or conditional (were right: words restate), else
    # the words restate it
    ("The answer is \\boxed{13}, or perhaps 14 if we include the endpoints.", "13", False),
    ("$\\boxed{17}$ (or 18 if we count the empty set)", "17", False),
    ("\\boxed{12}, or maybe 12 apples", "12", True),
    ("The answer is $\\boxed{5}$ (or $-5$, but we reject it since $x>0$).", "5", True),
    ("It takes $\\boxed{4.5}$, or 4 hours and 30 minutes.", "4.5", True),
    # a value and "or" before the box, or "(or" between boxes: a hedge (were right for the box's value)
    ("\\boxed{4} (or \\boxed{5})", "5", False),
    ("\\boxed{4} (or \\boxed{5})", "4", False),
    ("The answer is 4 or \\boxed{5}", "5", False),
    ("$x = 4$ or $x = \\boxed{5}$", "5", False),
    ("Answer is $4$ or $\\boxed{5}$.", "5", False),
    ("The answer is $\\frac12$ or \\boxed{0.5}", "0.5", True),  # one value written twice
    # a percent and its fraction are one value, either way (were wrong: 20% read as 20 against 0.2)
    ("So the final answer is $\\boxed{20\\%}$, or $0.2$.", "20\\%", True),
    ("The answer is $\\frac{3}{4}$ or $\\boxed{75\\%}$.", "\\frac34", True),
    ("\\boxed{50\\% \\text{ or } \\frac{1}{2}}", "\\frac{1}{2}", True),
    ("The answer is $\\frac{3}{4}$ or $\\boxed{70\\%}$.", "\\frac34", False),
    ("$12$ or $\\boxed{0.12}$", "12", False),
    ("Converting, 0.25, or $\\boxed{\\frac{1}{4}}$.", "\\frac{1}{4}", True),  # the comma is no part of 0.25
    ("The answer is 0.333..., or $\\boxed{\\frac{1}{3}}$.", "\\frac{1}{3}", True),  # an approximation (was a hedge)
    ("The decimal 0.333... or $\\boxed{\\frac{1}{3}}$.", "\\frac{1}{3}", True),  # without the comma too
    ("It is 0.333... or maybe $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", False),  # hedged
    ("The answer is $2^{10}$, or $\\boxed{1024}$.", "1024", True),
    # ", or" before the box restates a result or a conversion (an operand, a sum of money, math that is no lone
    # value: MATH's style); after a lone value it offers another, as "or" alone or with "maybe" does, and a second
    # value for one variable is offered either way
    ("The answer is 4, or \\boxed{5}.", "5", False),
    ("It could be 12, or \\boxed{13}.", "13", False),
    ("It could be $4$, or $\\boxed{5}$.", "5", False),
    ("The probability is $\\frac{1}{3}$, or $\\boxed{0.5}$.", "0.5", False),
    ("The probability is $\\frac{1}{2}$, or $\\boxed{0.5}$.", "0.5", True),  # one value written twice
    ("The probability is $13\\%$, or $\\boxed{0.12}$.", "0.12", False),
    ("The ratio is $\\approx 0.33$, or $\\boxed{\\frac{1}{3}}$ exactly.", "\\frac{1}{3}", True),  # an approximation
    ("The ratio is approximately 0.33, or $\\boxed{\\frac{1}{3}}$.", "\\frac{1}{3}", True),
    ("The probability is $12\\%$, or $\\boxed{0.12}$.", "0.12", True),
    ("So it costs \\$2.50, or \\boxed{250} cents.", "250", True),
    ("She spent $\\$2.50$, or $\\boxed{250}$ cents.", "250", True),  # was a hedge: `$2.50$` read as math
    ("It costs \\$1{,}200, or $\\boxed{1200}$ dollars.", "1200", True),  # was a hedge: 200 read after `{,}`
    ("It costs $\\$1{,}200$, or $\\boxed{120000}$ cents.", "120000", True),
    ("The count is 1{,}200, or $\\boxed{1300}$.", "1300", False),
    ("The odds are 1:3, or \\boxed{\\frac{1}{4}}.", "\\frac{1}{4}", True),
    ("That is $\\binom{4}{2}$, or $\\boxed{6}$.", "6", True),
    ("x = -3, or x = \\boxed{5}", "5", False),
    ("$x = -3$, or $x = \\boxed{5}$", "5", False),
    # an equation or inequality before the "or" offers no value: the "or" restates it solved (MATH's style)
    ("Solving, $2x = 10$, or $x = \\boxed{5}$.", "5", True),
    ("Thus $n - 3 = 4$, or $n = \\boxed{7}$.", "7", True),
    ("Since $x > 0$, $x^2 = 49$, or $x = \\boxed{7}$.", "7", True),
    ("Thus n - 3 = 4, or n = \\boxed{7}.", "7", True),
    ("We need $k \\geq 3$, or $k = \\boxed{3}$ at the least.", "3", True),
    ("x = 4 or x = \\boxed{5}", "5", False),
    ("$x = -4$ or $x = \\boxed{5}$", "5", False),
    # a number after "of", "in", ... and ", or": an operand, the box its result (not a value offered)
    ("The number of girls is 40% of 30, or $\\boxed{12}$.", "12", True),
    ("The number of girls is $40\\%$ of $30$, or $\\boxed{12}$.", "12", True),
    ("The probability is 3 out of 12, or $\\boxed{\\frac{1}{4}}$.", "\\frac{1}{4}", True),
    ("The chance is 1 in 4, or $\\boxed{25\\%}$.", "25", True),
    ("The answer is 10 - 3, or $\\boxed{7}$.", "7", True),
    ("This is 2^10, or $\\boxed{1024}$.", "1024", True),
    ("We get 3 \\times 4, or $\\boxed{12}$.", "12", True),
    # ... or after a word that makes it no value offered: an approximation (`about`, `roughly`), a base, a modulus,
    # `choose`, `twice`, `among`, a sign written out (was a hedge, wrong for the box)
    ("The probability is about 0.33, or $\\boxed{\\frac{1}{3}}$.", "\\frac{1}{3}", True),
    ("That is roughly 0.67, or exactly $\\boxed{\\frac{2}{3}}$.", "\\frac{2}{3}", True),
    ("So $1011_2$ is 1011 in base 2, or $\\boxed{11}$ in base 10.", "11", True),
    ("The remainder is 2023 mod 7, or $\\boxed{0}$.", "0", True),
    ("The count is 5 choose 2, or $\\boxed{10}$.", "10", True),
    ("The area is twice 18, or $\\boxed{36}$.", "36", True),
    ("There are 6 favorable outcomes among 36, or $\\boxed{\\frac{1}{6}}$.", "\\frac{1}{6}", True),
    ("The minimum value is negative 3, or $\\boxed{-3}$.", "-3", True),
    ("The answer is about 4, or \\boxed{5}.", "5", False),  # no decimal cut short: a value offered
    ("The answer is x = -3, or x = \\boxed{5}.", "5", False),
    ("The count is a total of 4 or \\boxed{5}.", "5", False),  # no comma: still a hedge
    ("The answer is 4 (or \\boxed{5}).", "5", False),  # "(or" too (was right for 5: only ", or" was read)
    ("We get $3 \\times 4$ (or $\\boxed{12}$).", "12", True),  # one value written twice
    ("This simplifies to 42, or maybe \\boxed{43}.", "43", False),  # a hedging word: no restated result
    ("The total comes to 10, or perhaps $\\boxed{12}$.", "12", False),
    # `\\(...\\)`, display math's `\\frac` and spacing, a hedging word after the "or": a hedge too
    ("The answer is \\(4\\) or \\(\\boxed{5}\\).", "5", False),
    ("$$4 \\quad\\text{or}\\quad \\boxed{5}$$", "5", False),
    ("$$x = \\frac{1}{2} \\text{ or } x = \\boxed{\\frac{1}{3}}$$", "\\frac{1}{3}", False),
    ("The answer is 4, or maybe \\boxed{5}.", "5", False),
    ("The answer is 4 \\textrm{ or } \\boxed{5}", "5", False),
    ("The answer is \\(1\\) or \\(\\boxed{1.0}\\).", "1", True),
    ("The answer is 1 \\textrm{ or } \\boxed{1.0}", "1", True),
    ("So \\(2x = 10\\), or \\(x = \\boxed{5}\\).", "5", True),
    ("$$2x = 10 \\quad\\text{or}\\quad x = \\boxed{5}$$", "5", True),
    ("\\[ x = \\frac{1}{2} \\text{ or } x = \\boxed{0.5} \\]", "\\frac{1}{2}", True),
    ("So 3 or more steps give \\boxed{5}", "5", True),  # the "or" is not right before the box
    ("We try 2 or 3 cases.\nHence \\boxed{5}", "5", True),
    ("\\boxed{12}. Or 13 if the order matters.", "12", True),  # another sentence, another line: no hedge
    ("\\boxed{12}\nor 13", "12", True),
    # "or" and the same answer in other terms restates it (a review of the rule: these were right before it)
    ("$\\boxed{2\\sqrt{2}}$, or approximately $2.83$.", "2\\sqrt{2}", True),
    ("\\boxed{\\pi} or about 3.14", "\\pi", True),
    ("\\boxed{\\frac{1}{2}}, or 50\\%", "\\frac{1}{2}", True),
    ("\\boxed{7}, or in base 2, $111_2$.", "7", True),
    ("\\boxed{12}, or equivalently $2^2 \\cdot 3$.", "12", True),
    ("The answer is $\\boxed{5}$ (or 5 apples).", "5", True),
    ("\\boxed{12} \\quad\\text{or}\\quad 13", "12", False),  # spacing commands before the "or"
    ("\\boxed{12}\\ \\text{or}\\ 13", "12", False),
    # units: a singular count noun after 1, `in`, `squared` after a unit; not `squared` on the number itself
    ("\\boxed{\\text{1 way}}", "1", True),
    ("\\boxed{\\text{1 solution}}", "1", True),
    ("\\boxed{\\text{12 in}}", "12", True),
    ("\\boxed{12 \\text{ units squared}}", "12", True),
    ("\\boxed{\\text{1 tenth}}", "1", False),
    ("Answer: 12\n\nWait, in fact \\boxed{13}", "13", True),  # a later box still corrects the answer line
    ("\\boxed{540} (mod 1000)", "540", True),
    ("\\boxed{540} \\pmod{1000} for n = 3", "540", True),
    # `, or` and `, and` before the last box part no run (`\\boxed{4}, or \\boxed{5}` read 5)
    ("\\boxed{4}, or \\boxed{5}", "5", False),
    ("\\boxed{12}, or \\boxed{12.0}", "12", True),
    ("$\\boxed{-1}$, $\\boxed{2}$, and $\\boxed{5}$", "5", False),
    ("$\\boxed{-1}$, $\\boxed{2}$, and $\\boxed{5}$", "-1, 2, 5", True),
    # an AMC choice and "or" before a boxed choice: a hedge (was right for C: no digit before the "or")
    ("either (B) or $\\boxed{(C)}$", "C", False),
    ("The answer is \\textbf{(B)} or \\boxed{\\textbf{(C)}}.", "C", False),
    ("The answer is (C) or $\\boxed{(C)}$.", "C", True),  # one choice written twice
    ("Choices (A) or (B) fail, so the answer is $\\boxed{(C)}$.", "C", True),  # the "or" is not before the box
    ("We get f(B) or \\boxed{(C)}", "C", True),  # a point named B, no choice
    ("The answer is (B), or $\\boxed{(C)}$.", "C", False),  # ", or" after a lone choice offers another, as a value
    ("The answer is (C), or $\\boxed{(C)}$.", "C", True),
    # a value and a choice letter around the "or" name one answer (were hedges: wrong for C and for 12)
    ("The sum of the roots is $12$, or $\\boxed{\\textbf{(C)}}$.", "C", True),
    ("This matches answer choice (C), or $\\boxed{12}$.", "12", True),
    ("This matches answer choice (C), or $\\boxed{12}$.", "13", False),
    # "or else" offers another value, after the box or before it (were right for 12: "else" read as words restating
    # it); "or at least" restates it
    ("$\\boxed{12}$, or else 13", "12", False),
    ("The answer is 13, or else $\\boxed{12}$.", "12", False),
    ("$\\boxed{12}$, or at least 12", "12", True),
    ("$\\boxed{12}$, or else the count is off by one.", "12", True),  # no value after "or else"
    ("The minimum is $\\boxed{5}$, or else $2$ of the points would coincide.", "5", True),  # "otherwise", a reason
    ("$\\boxed{12}$, or else 13 if the order matters", "12", False),
    ("The answer is at least 5, so $\\boxed{5}$ or at least \\boxed{5}.", "5", True),
    # ... "or at least" / "or at most" and another value: a bound offered, a hedge (was right for 6)
    ("$\\boxed{6}$, or at least 7", "6", False),
    ("The count is $\\boxed{6}$, or at most 5 if two coincide.", "6", False),
    ("The count is $\\boxed{6}$, or at least 6 with this method.", "6", True),  # the same value
    # a dash before the "or" (an em dash, `---`, an en dash, `--`) sets it off as a comma does: after the box or
    # before it, another value offered is a hedge (were right for the box: the dash hid the "or")
    ("$\\boxed{5}$ \u2014 or maybe $6$.", "5", False),
    ("The answer is \\boxed{3} --- or possibly 5.", "3", False),
    ("The answer is \\boxed{3}\u2014or 5.", "3", False),
    ("The answer is \\boxed{3} -- or 5.", "3", False),
    ("The answer is \\boxed{3} \u2013 or 5.", "3", False),
    ("\\boxed{12} \u2014 or more", "12", False),
    ("\\boxed{4} \u2014 or \\boxed{5}", "5", False),
    ("The answer is 4\u2014or $\\boxed{5}$.", "5", False),
    ("The answer is 4 --- or \\boxed{5}", "5", False),
    ("The answer is 5 \u2014 or \\boxed{5}", "5", True),  # one value written twice
    ("The cost is \\$2.50 \u2014 or \\boxed{250} cents.", "250", True),  # restated, as after ", or"
    ("40\\% of 30 --- or \\boxed{12}", "12", True),  # an operand, as after ", or"
    ("$x = -2$ \u2014 or $x = \\boxed{3}$; the negative root is extraneous.", "3", True),  # rejected
    ("\\boxed{5} \u2014 or so we hope.", "5", True),  # no value after the "or"
    ("\\boxed{3} \u2014 the number of ways.", "3", True),  # no "or"
    ("The answer is \\boxed{3}; 4--5 or more would overcount.", "3", True),  # the "or" not after the box
    # a number word and "or" before the box: a hedge, judged as its number (was right for 5: no digit before "or")
    ("four or \\boxed{5}", "5", False),
    ("The answer is either Four or $\\boxed{5}$.", "5", False),
    ("The answer is four, or \\boxed{4}", "4", True),
    ("The answer is four, or \\boxed{5}", "5", False),  # ", or" after a lone number word offers another
    ("The answer is four or \\boxed{4}.", "4", True),  # one value written twice
    # "one" after "the <adjective>", "this", "that" is a pronoun, no number (was read 1 or 3, wrong for 3)
    ("So we take the positive one, or $x = \\boxed{3}$.", "3", True),
    ("We keep the larger one or $\\boxed{3}$.", "3", True),
    ("The answer is one, or $\\boxed{3}$.", "3", False),
    # a compound number word is one number (`twenty-one or \\boxed{21}` was read 1 or 21, wrong for 21)
    ("Twenty-one or $\\boxed{21}$ students.", "21", True),
    ("Twenty-four or $\\boxed{25}$ students.", "25", False),
    ("It is thirty or $\\boxed{31}$.", "31", False),
    ("Someone or \\boxed{5}", "5", True),  # no number word: "one" inside a word
    ("We can pick one or two, so \\boxed{5}", "5", True),  # the "or" is not before the box
    # a value and "or" before the box across a line break: a hedge as on one line (was right for 5: the line read)
    ("4 or\n$\\boxed{5}$", "5", False),
    ("The answer is 4\n(or \\boxed{5})", "5", False),
    ("The answer is 4 or\n\\[\n\\boxed{5}\n\\]", "5", False),
    ("The answer is 4\nor \\boxed{4}", "4", True),  # one value written twice
    ("So $n - 3 = 4$, or\n$n = \\boxed{7}$.", "7", True),  # an equation solved
    ("We check 4 or 5 cases.\n$\\boxed{5}$", "5", True),  # the "or" is not before the box
    ("Is it 4 or\n\nwhat? Counting again gives $\\boxed{5}$", "5", True),  # another paragraph, another sentence
    # a value and "or" before the box that the text after the box rejects: the box is the answer (was a hedge)
    ("$x=-2$ or $x=\\boxed{3}$; only the positive root is valid.", "3", True),
    ("$x = 2$ or $x = \\boxed{-3}$. Only the negative solution works here.", "-3", True),
    ("$x=-2$ or $x=\\boxed{3}$, but $x = -2$ is extraneous.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$.", "3", False),
    ("$x=-2$ or $x=\\boxed{3}$; only one root is valid.", "3", False),  # which one?
    ("$x=2$ or $x=\\boxed{3}$; only the positive root is valid.", "3", False),  # both positive
    ("$x=-2$ or $x=\\boxed{3}$, but $x = 3$ is extraneous.", "3", False),  # the box's value rejected, not -2
    ("$x=-2$ or $x=\\boxed{3}$.\n\nOnly the positive root is valid.", "3", False),  # another paragraph
    # ... in other words: a rejected value that fails (`does not satisfy`, `is not in the domain`), a sign kept or
    # rejected (`we take the positive root`, `the negative root is extraneous`, `since $n$ must be positive`)
    ("$x=-2$ or $x=\\boxed{3}$, but $x = -2$ does not satisfy the original equation.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$, but $x=-2$ doesn't work since lengths are positive.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$, and $x = -2$ is not in the domain.", "3", True),
    ("$x=1$ or $x=\\boxed{3}$, but $x = 1$ is excluded: the denominator would be zero.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$; we take the positive root.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$; the negative root is extraneous.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$; we discard the negative solution.", "3", True),
    ("$n=-5$ or $n=\\boxed{4}$, and since $n$ must be positive, $n = 4$.", "4", True),
    ("$x=2$ or $x=\\boxed{3}$; we discard the negative solution.", "3", False),  # none is negative
    ("$x=-2$ or $x=\\boxed{3}$, but $x = 3$ does not satisfy it.", "3", False),  # the box's value fails
    ("$x=-2$ or $x=\\boxed{3}$; the positive root is extraneous.", "3", False),  # the box's sign rejected
    ("$x=-2$ or $x=\\boxed{3}$; neither $-2$ nor $3$ is extraneous.", "3", False),  # neither rejected
    # ... or a reason and the box's value stated after the box, in its paragraph (`Since $x$ is a length, $x = 3$`: was
    # a hedge, wrong for 3): the response commits to the box
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$.", "3", True),
    ("$x = -2$ or $x = \\boxed{3}$. Because $x$ is positive, we get $x = 3$.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$. As lengths are positive, $x=3$", "3", True),
    ("$x=2$ or $x=\\boxed{3}$, and since $x$ must be an odd integer, $x = 3$.", "3", True),
    ("$x=-2.5$ or $x=\\boxed{3.5}$. Since $x$ is a distance, $x = 3.5$.", "3.5", True),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$.", "-2", False),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = -2$.", "3", False),  # the other value stated
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$ or $x = -2$.", "3", False),  # both again
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3.5$.", "3", False),  # another value
    ("$x=-2$ or $x=\\boxed{3}$. Then $x = 3$.", "3", False),  # no reason
    ("$x=-2$ or $x=\\boxed{3}$.\n\nSince $x$ is a length, $x = 3$.", "3", False),  # another paragraph, as above
    # ... the value stated ends its clause: a clause that goes on names no choice (`$x = 3$ works, and so does
    # $x = -2$`, `$x = 3$ is a solution. $x = -2$ is one too.` were right for 3: both kept)
    ("$x = -2$ or $x = \\boxed{3}$. Since $x$ is an integer, $x = 3$ works, and so does $x = -2$.", "3", False),
    ("$x = -2$ or $x = \\boxed{3}$. Since $x$ is an integer, $x = 3$ is a solution. $x = -2$ is one too.", "3", False),
    ("$k = 2$ or $k = \\boxed{3}$. Since $k$ is an integer, $k = 3$ gives $9$ and $k = 2$ gives $4$.", "3", False),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$, so the perimeter is $12$.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$ cm.", "3", True),  # a unit
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$ only.", "3", True),
    # ... and so with the box first and the other value after its "or" (was a hedge, wrong for 3)
    ("$x = \\boxed{3}$ or $x = -2$. Since $x$ is a length, $x = 3$.", "3", True),
    ("$x = \\boxed{3}$ or $x = -2$. Only the positive root is valid.", "3", True),
    ("So $\\boxed{3}$ or $-2$. But $-2$ does not satisfy the original equation.", "3", True),
    ("$x = \\boxed{3}$ or $x = -2$. Since $x$ is a length, $x = -2$.", "3", False),
    ("$x = \\boxed{3}$ or $x = -2$. Only the negative root is valid.", "3", False),  # the box's sign rejected
    ("$x = \\boxed{3}$ or $x = 2$. Only the positive root is valid.", "3", False),  # both positive
    ("$x = \\boxed{3}$ or $x = -2$.\n\nOnly the positive root is valid.", "3", False),  # another paragraph
    # ... and a reason that restates the value in other words: in another simple form (`x = 1.5` for `\\frac{3}{2}`,
    # `3 \\sqrt{2}` spaced), after a statement of the answer (`the answer is $x = 3$`, `we get $3$`), or with a clause
    # after it ("and", a line break) that names the other value no more (were hedges, wrong for the box); not a reason
    # that states another value (`the answer is $x = 2$`: was right for 3, the sign rule read alone) or both again
    ("$x=-\\frac{1}{2}$ or $x=\\boxed{\\frac{3}{2}}$. Since $x$ is a length, $x = 1.5$.", "\\frac32", True),
    ("$x=-2$ or $x=\\boxed{1.5}$. Since $x$ is a length, $x = \\frac{3}{2}$.", "\\frac32", True),
    ("$p=-1$ or $p=\\boxed{\\dfrac{1}{2}}$. Since $p$ is a probability, $p = 0.50$.", "\\frac12", True),
    ("$x=-3\\sqrt{2}$ or $x=\\boxed{3\\sqrt{2}}$. Since $x$ is a distance, $x = 3 \\sqrt{2}$.", "3\\sqrt2", True),
    ("$x = \\boxed{\\frac{3}{2}}$ or $x = -\\frac{1}{2}$. Since $x$ is a length, $x = 1.5$.", "\\frac32", True),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ must be positive, the answer is $x = 3$.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, the only valid solution is $3$.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, we get $3$.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, the answer is $x = 3$, not $x = -2$.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$, and the perimeter is $12$.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$ and the perimeter is $12$.", "3", True),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$\nand the perimeter is $12$.", "3", True),
    ("$x = \\boxed{\\frac{3}{2}}$ or $x = -\\frac{1}{2}$. Since $x$ is a length, $x = 1.5$.", "-\\frac12", False),
    ("$x=-\\frac{1}{2}$ or $x=\\boxed{\\frac{3}{2}}$. Since $x$ is a length, $x = 1.4$.", "\\frac32", False),
    ("$x=-\\frac{1}{2}$ or $x=\\boxed{\\frac{3}{2}}$. Since $x$ is a length, $x = -0.5$.", "\\frac32", False),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 30$.", "3", False),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ must be positive, the answer is $x = 2$.", "3", False),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ must be positive, the answer is $x = -2$.", "3", False),
    # ... but a statement of the answer in a form the reason rule does not compare (`\\sqrt 2`, `\\frac12`, `4.`) is no
    # other value: the sign rule reads it as before (were right, then wrong for the box since the rule above)
    (
        "$x = -\\sqrt{2}$ or $x = \\boxed{\\sqrt{2}}$. Since $x$ must be positive, the answer is $x = \\sqrt 2$.",
        "\\sqrt2",
        True,
    ),
    (
        "$r = -\\frac{1}{2}$ or $r = \\boxed{\\frac{1}{2}}$. Since $r$ must be positive, the answer is $r = \\frac12$.",
        "\\frac12",
        True,
    ),
    ("$x = -4$ or $x = \\boxed{4}$. Since $x$ must be positive, the answer is $x = 4.$", "4", True),
    (
        "$a = -\\frac{\\sqrt{3}}{2}$ or $a = \\boxed{\\frac{\\sqrt{3}}{2}}$. Since $a$ must be positive, the answer is "
        "$a = \\frac{\\sqrt3}{2}$.",
        "\\frac{\\sqrt3}2",
        True,
    ),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ must be positive, $A = 9$.", "3", True),  # a sign kept; A is no answer
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, the answer is positive, so $x = 3$.", "3", True),  # no value
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, the answer is $x = 3$ or $x = -2$.", "3", False),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is an integer, $x = 3$, and $-2$ also works.", "3", False),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, $x = 3$ and $x = -2$ are both candidates.", "3", False),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is an integer, $x = 3$, and both work.", "3", False),
    ("$x=-2$ or $x=\\boxed{3}$. Since $x$ is a length, if the answer is $x = 3$, the area is $9$.", "3", False),
    # ... a rejecting word negated or in a condition rejects nothing, after the box as before it (`If $4$ is not
    # allowed, the answer is $3$.`, `we do not reject $x = -2$` were right for 3 since 9e3a9b7 after it); a check in a
    # condition still rejects (`If we substitute $x=-2$, ..., so it is extraneous.`)
    ("$x = \\boxed{3}$ or $x = 4$. If $4$ is not allowed, the answer is $3$.", "3", False),
    ("$x = \\boxed{3}$ or $x = -2$. Both satisfy it, so we do not reject $x = -2$.", "3", False),
    ("$x = 4$ or $x = \\boxed{3}$. If $4$ is not allowed, the answer is $3$.", "3", False),
    ("$x = -2$ or $x = \\boxed{3}$. We cannot discard $x = -2$ without more information.", "3", False),
    ("$x = \\boxed{3}$ or $x = -2$. If we substitute $x=-2$, the log is undefined, so it is extraneous.", "3", True),
    ("$x = -2$ or $x = \\boxed{3}$. If we substitute $x=-2$, the log is undefined, so it is extraneous.", "3", True),
    # "squared" and a unit after the number is the unit, read "square units" (was wrong: read as the number squared)
    ("\\boxed{25 \\text{ squared units}}", "25", True),
    ("The area is $\\boxed{9\\text{ squared centimeters}}$.", "9", True),
    ("\\boxed{25 \\text{ squared units}}", "625", False),
    ("\\boxed{25 \\text{ squared}}", "25", False),  # the number squared
    ("\\boxed{5 \\text{ squared, plus one}}", "5", False),  # no unit after it
    # a multiplier word in text with the number: the number it names, as a grader reads it (was right for 12 and
    # wrong for 12000: math-verify drops the word); after the box it scales nothing: the box is the answer, the
    # question asking in thousands, in millions, how many dozen or halves (scaled there, a probe's 16 of 345
    # responses were judged wrong)
    ("\\boxed{12} thousand", "12", True),
    ("\\boxed{12} thousand", "12000", False),
    ("In millions: the population is $\\boxed{2.5}$ \\text{ million} people.", "2.5", True),
    ("\\boxed{3} dozen eggs", "3", True),
    ("\\boxed{12 \\text{ thousand}}", "12000", True),
    ("\\boxed{12\\ \\text{thousand dollars}}", "12000", True),
    ("\\boxed{\\text{3 dozen}}", "36", True),
    ("\\boxed{12\\text{ hundredths}}", "0.12", True),
    ("The answer is $\\boxed{7}$ thousands digit.", "7", True),  # a place, no multiplier
    ("She has \\boxed{5} hundred-dollar bills.", "5", True),  # a compound
    ("\\boxed{12}\n\nThousands of students took it.", "12", True),  # another paragraph
    ("So there are \\boxed{12}, thousands of which are duplicates.", "12", True),  # not right after the box
    # thirds ... halves and tens scale the number in the box's text, not after the box; a singular ordinal names a
    # grade, no fraction
    ("\\boxed{2} thirds", "2", True),
    ("\\boxed{3} halves", "3", True),
    ("\\boxed{12} tens", "120", False),
    ("There are \\boxed{4} fifth graders.", "4", True),
    ("So $\\boxed{4 \\text{ fifth graders}}$ were chosen.", "4", True),  # in the box too (was 4/5: wrong for 4)
    ("\\boxed{4 \\text{ fifth graders}}", "\\frac45", False),
    ("\\boxed{4 \\text{ fifths}}", "\\frac45", True),
    # a singular "ten" after a number other than 1 names no tens (`2 \\text{ ten sided dice}`; was read 20)
    ("\\boxed{2 \\text{ ten sided dice}}", "2", True),
    ("\\boxed{3 \\text{ ten dollar bills}}", "3", True),
    ("\\boxed{3 \\text{ ten dollar bills}}", "30", False),
    ("\\boxed{12 \\text{ tens}}", "120", True),
    ("\\boxed{2 \\text{ thirds}}", "\\frac{2}{3}", True),
    # a paragraph "Alternatively, ..." or "Or ..." ending in the last box, right after the paragraph of an earlier box:
    # two answers offered, a hedge (was right for 8: the last box read alone)
    ("... so the answer is $\\boxed{4}$.\n\nAlternatively, if we count both orders, $\\boxed{8}$.", "4", False),
    ("... so the answer is $\\boxed{4}$.\n\nAlternatively, if we count both orders, $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\nOr, if we count 2 orders, $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\nAlternatively, counting the complement also gives $\\boxed{4}$.", "4", True),  # one value
    # ... judged on the two boxes: the paragraph between them may hold numbers (was wrong: a digit outside the boxes)
    (
        "So $\\boxed{2\\sqrt{2}}$.\n\nAlternatively, from $(0,0)$ to $(2,2)$ the distance is $\\boxed{\\sqrt{8}}$.",
        "2\\sqrt2",
        True,
    ),
    ("So $\\boxed{\\frac{3}{4}}$.\n\nAlternatively, $1 - \\frac14 = \\boxed{0.75}$.", "\\frac34", True),
    ("So $\\boxed{4}$.\n\nAlternatively, with $2$ orders for each of the $4$ pairs, $\\boxed{8}$.", "8", False),
    (  # a verification longer than an answer may be, re-deriving the box (was wrong: one 500-character answer)
        "So $\\boxed{480}$.\n\nAlternatively, by complementary counting: "
        + "all $6! = 720$ arrangements, minus the $2 \\cdot 5! = 240$ with the vowels adjacent. " * 5
        + "This gives $\\boxed{480}$.",
        "480",
        True,
    ),
    ("So $\\boxed{4}$.\n\nWait, each pair counts twice, so $\\boxed{8}$.", "8", True),  # a correction
    ("So $\\boxed{4}$.\n\nOr wait, I double counted the empty case: $\\boxed{3}$.", "3", True),  # so is "Or wait"
    ("So $\\boxed{4}$.\n\nOr, actually, each pair counts twice, so $\\boxed{8}$.", "8", True),
    ("So $\\boxed{4}$.\n\nOr, if we count both orders, $\\boxed{8}$.", "8", False),
    ("First $\\boxed{2}$ pairs.\n\nThen we double.\n\nAlternatively, in one step: $\\boxed{8}$.", "8", True),  # a step
    # ... and so in one paragraph: a sentence "Alternatively, ..." or "Or ..." right after the sentence of an earlier
    # box, and ending in the last box (was right for 8: the last box read alone, where two paragraphs were a hedge)
    ("So $\\boxed{4}$. Alternatively, if we count both orders, $\\boxed{8}$.", "4", False),
    ("So $\\boxed{4}$. Alternatively, if we count both orders, $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$. Or, if we count both orders, it is $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$ pairs. Alternatively, with orders: each pair twice. That gives $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$. Alternatively, counting the complement also gives $\\boxed{4}$.", "4", True),  # one value
    ("So $\\boxed{\\frac{3}{4}}$. Alternatively, $1 - \\frac14 = \\boxed{0.75}$.", "\\frac34", True),
    ("So $\\boxed{4}$. Or wait, I double counted the empty case: $\\boxed{3}$.", "3", True),  # a correction
    ("So $\\boxed{4}$. Wait, each pair counts twice, so $\\boxed{8}$.", "8", True),
    ("First $\\boxed{2}$ pairs. Then we double. Alternatively, in one step: $\\boxed{8}$.", "8", True),  # a step
    ("So $\\boxed{4}$. Alternatively, if we count both orders, it would be 8.", "4", True),  # no second box
    # ... an AMC choice with its value, then that value (`\\boxed{\\textbf{(C)}\\ 12}` ... `\\boxed{12}`), is one
    # answer: the choice (was wrong for 12 since 389456a in one paragraph, and in two before it, and for C)
    ("So $\\boxed{\\textbf{(C)}\\ 12}$. Alternatively, by direct counting, $\\boxed{12}$.", "12", True),
    ("So $\\boxed{\\textbf{(C)}\\ 12}$. Alternatively, by direct counting, $\\boxed{12}$.", "C", True),
    ("So $\\boxed{\\textbf{(C)}\\ 12}$.\n\nAlternatively, by direct counting, $\\boxed{12}$.", "12", True),
    ("So $\\boxed{\\textbf{(C)}\\ 12}$.\n\nAlternatively, by direct counting, $\\boxed{13}$.", "12", False),
    ("So $\\boxed{\\textbf{(C)}\\ 12}$.\n\nAlternatively, by direct counting, $\\boxed{13}$.", "C", False),
    ("So $\\boxed{\\textbf{(C)}\\ 12}$. Alternatively, $\\boxed{\\textbf{(D)}\\ 14}$.", "C", False),
    ("So $\\boxed{\\textbf{(C)}\\ 12}$. Alternatively, $\\boxed{\\textbf{(D)}\\ 12}$.", "C", False),  # two letters
    # ... and an "Alternatively, ...:" paragraph ending in a colon goes on in the paragraph below it (was right for 8)
    ("So $\\boxed{4}$.\n\nAlternatively, if order matters:\n\nthere are $2$ orders each, so $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\nAlternatively, if order matters:\n\n$$\\boxed{8}$$", "8", False),
    ("So $\\boxed{4}$.\n\nWe check again:\n\neach pair counts twice, so $\\boxed{8}$.", "8", True),  # a correction
    ("So $\\boxed{4}$.\n\nAlternatively, if order matters.\n\nThen we double: $\\boxed{8}$.", "8", True),  # no colon
    # ... and a markdown rule (`---`, `***`) between the two paragraphs parts nothing (was right for 8)
    ("So $\\boxed{4}$.\n\n---\n\n**Alternatively**, if we count ordered pairs, it is $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\n***\n\nAlternatively, if we count ordered pairs, it is $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\n---\n\nAlternatively, by complementary counting, $10 - 6 = \\boxed{4}$.", "4", True),
    ("So $\\boxed{4}$.\n\n---\n\nWe recount: $\\boxed{8}$.", "8", True),
    # ... and after an answer line as after a box (was right for 8: a box after the line read as a correction)
    ("Answer: 4\n\nAlternatively, if we count both orders, $\\boxed{8}$.", "8", False),
    ("Answer: 4\n\nAlternatively, if we count both orders, $\\boxed{8}$.", "4", False),
    ("Answer: 4\n\nAlternatively, counting the complement also gives $\\boxed{4}$.", "4", True),  # one value
    ("Answer: 4\n\nOr wait, each pair counts twice: $\\boxed{8}$.", "8", True),  # a correction
    ("Answer: 4\n\nWe double check: $\\boxed{8}$.", "8", True),
    # ... and after a single line break (the answer's display math closed on its own line, an answer line), as a list
    # item after the answer's, under a heading (`**Alternative approach:**`, `### Alternative method`: the section
    # up to the next heading), and through a list or display math below a paragraph ending in a colon (were right
    # for 8: the last box read alone); an error found on the way corrects the answer
    ("So $\\boxed{4}$\nAlternatively, if order matters, $\\boxed{8}$", "8", False),
    ("The answer is\n\\[\n\\boxed{4}\n\\]\nAlternatively, if order matters, it is\n\\[\n\\boxed{8}\n\\]", "8", False),
    (
        "The answer is\n\\[\n\\boxed{4}\n\\]\nAlternatively, by complement, it is\n\\[\n10 - 6 = \\boxed{4}\n\\]",
        "4",
        True,
    ),
    ("Answer: 4\nOr, if order matters, $\\boxed{8}$.", "8", False),
    ("Answer: 4\nAlternatively, by symmetry, $\\boxed{4}$.", "4", True),
    ("So $\\boxed{4}$.\nOr, wait: each pair counts twice, so $\\boxed{8}$.", "8", True),  # a correction
    ("So $\\boxed{4}$.\nAlternatively, let me recount: I missed $(2,4)$, so it is $\\boxed{5}$.", "5", True),
    # ... with a word between "I" and the error (`I previously missed`, `I must have miscounted`: were hedges, wrong
    # for the correction under an "Alternative approach" heading that is a section now)
    (
        "So the answer is $\\boxed{4}$.\n\n**Alternative approach:** Let me verify by listing: (1,2), (1,3), (2,3), "
        "(2,4), (3,4). That's 5 pairs, so I previously missed one. The answer is $\\boxed{5}$.",
        "5",
        True,
    ),
    ("So $\\boxed{4}$.\n\nAlternatively, listing them gives five, so I must have miscounted: $\\boxed{5}$.", "5", True),
    ("So $\\boxed{4}$.\n\nAlternatively, if I had missed the empty set, it would be $\\boxed{5}$.", "5", False),
    ("- Unordered pairs: $\\boxed{4}$\n- Alternatively, with order: $\\boxed{8}$", "8", False),
    ("- Unordered pairs: $\\boxed{4}$\n- Alternatively, by complement: $10 - 6 = \\boxed{4}$", "4", True),
    ("So $\\boxed{4}$.\n\n**Alternative approach:** ordered pairs, halved: $16/2 = \\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\n**Alternative approach:** ordered pairs, halved: $8/2 = \\boxed{4}$.", "4", True),
    ("So $\\boxed{4}$.\n\n**Alternative approach (ordered pairs):** $2 \\times 4 = \\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\n### Alternative method\n\nCounting ordered pairs, we get $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\n### Alternative method\nCounting ordered pairs, $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\n### Alternative method\n\nBy complement, $10 - 6 = \\boxed{4}$.", "4", True),
    ("So $\\boxed{4}$.\n\n**Alternative approach:** ordered pairs.\n\nEach pair twice: $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$.\n\n### Alternative method\n\nOrdered pairs.\n\n### Final answer\n\n$\\boxed{8}$", "8", True),
    (
        "So $\\boxed{4}$.\n\nAlternatively, with order:\n\n- $(1,2)$, $(2,1)$\n- $(3,4)$, $(4,3)$\n\nSo $\\boxed{8}$.",
        "8",
        False,
    ),
    (
        "So $\\boxed{4}$.\n\nAlternatively, listing them:\n\n- $\\{1,2\\}$, $\\{1,3\\}$\n- $\\{2,3\\}$, $\\{2,4\\}$\n\n"
        "$\\boxed{4}$.",
        "4",
        True,
    ),
    (
        "So $\\boxed{4}$.\n\nAlternatively, let me recount:\n\n- $(1,2)$, $(2,4)$\n\nI missed $(2,4)$: $\\boxed{5}$.",
        "5",
        True,
    ),
    ("So $\\boxed{4}$.\n\nAlternatively, if order matters:\n\nwe list them.\n\nSo $\\boxed{8}$.", "8", True),  # no list
    # "Or rather", "Or so it seems" and a doubt asked ("Or is it?", "Or did I overcount?") correct the answer before
    # them, as "Or wait" does: the last box alone (were hedges, wrong for the correction, since 389456a in one
    # paragraph, 1402459 after an answer line, and in two paragraphs before them); not a question that holds the box
    # or is followed by a condition (`Or should we count orders? If so, $\\boxed{8}$.`), nor "Alternatively, rather"
    ("So there are $\\boxed{4}$ pairs. Or rather, since order matters, there are $\\boxed{8}$.", "8", True),
    ("So there are $\\boxed{4}$ pairs. Or rather, since order matters, there are $\\boxed{8}$.", "4", False),
    ("So there are $\\boxed{4}$ pairs.\n\nOr rather, since order matters, there are $\\boxed{8}$.", "8", True),
    ("So there are $\\boxed{4}$ pairs. Or is it? Each pair was counted twice, so it is $\\boxed{2}$.", "2", True),
    ("So $\\boxed{4}$.\n\nOr did I overcount? Each pair appears twice in my list, so $\\boxed{2}$.", "2", True),
    ("Thus $\\boxed{4}$. Or so it seems; checking $n=5$ gives a fifth pair, so the answer is $\\boxed{5}$.", "5", True),
    ("So $\\boxed{4}$. Or should we count ordered pairs? Yes: they are ordered, so $\\boxed{8}$.", "8", True),
    ("Answer: 4\n\nOr rather, since order matters, $\\boxed{8}$.", "8", True),
    ("Answer: 4\n\nOr did I overcount? Each pair appears twice, so it is $\\boxed{2}$.", "2", True),
    ("So $\\boxed{4}$. Or should we count ordered pairs? If so, the answer is $\\boxed{8}$.", "8", False),
    ("So there are $\\boxed{4}$ pairs. Or is it $\\boxed{8}$?", "8", False),
    ("So $\\boxed{4}$. Alternatively, rather than pairs, count orders: $\\boxed{8}$.", "8", False),
    ("So $\\boxed{4}$. Or, if we count orders, is it $\\boxed{8}$?", "8", False),
    # decided against: a box after an answer line is a correction even where it sets a step (the last answer
    # counts: `Answer: 12 ... \\boxed{13}`); degrees are not radians (45^\\circ is 45, a truth in pi asks radians)
    ("Answer: 12\n\n(For reference, we set \\boxed{a = 3}.)", "12", False),
    ("Answer: 3\n\n(For reference, we set \\boxed{a = 3}.)", "3", True),
    ("\\boxed{45^\\circ}", "\\frac{\\pi}{4}", False),
    ("\\boxed{\\frac{\\pi}{4}}", "45^\\circ", False),
]


@pytest.mark.parametrize("response,gt,expected", EQUIV_TABLE)
def test_equiv_table(response, gt, expected):
    assert bool(math_score(response, gt, mode="equiv")) is expected


def test_equiv_calls_share_one_time_budget(monkeypatch):
    """math_score's bound (`timeout` in math-verify, plus the worker's slack): the candidates (with and without a
    remark) and an inequality compared both ways were each given the whole `timeout` (up to 4x it)."""
    from rpgrl.rewards import _mathverify

    given = []

    def slow_no(pred, gold, timeout):
        given.append(timeout)
        time.sleep(min(timeout, 0.05))
        return False

    monkeypatch.setattr(_mathverify, "equivalent", slow_no)
    assert not math_score("Answer: x < \\sin(2) (the remainder)", "(-\\infty, 5)", timeout=0.2)
    assert len(given) >= 2 and given[0] == pytest.approx(0.2, abs=0.01)  # both candidates and both ways were tried
    assert all(b <= a - 0.04 for a, b in zip(given, given[1:], strict=False))  # each had what the calls before left
    assert not math_score("Answer: x < \\sin(2) (the remainder)", "(-\\infty, 5)", timeout=0.01)


def test_inputs_math_score_cannot_judge_are_one_line():
    """A ground truth column of integers raised AttributeError deep in the authors' rule; None, bytes, and a timeout
    of inf, nan, "1" or <= 0 were tracebacks or judged a correct answer wrong (a probe's)."""
    assert math_score("Answer: 3", 3, "strict") and math_score("Answer: 3", 3) and math_score("Answer: 0.5", 0.5)
    assert REWARDS.get("math")("Answer: 3", 3).correct
    for args, kwargs, match in [
        (("Answer: 3", None), {}, "the ground truth must be a string or a number, got NoneType"),
        (("Answer: 3", True), {}, "got bool"),
        ((b"Answer: 3", "3"), {}, "the response must be a string, got bytes"),
        *((("Answer: 3", "3"), {"timeout": t}, "timeout must be a finite number of seconds > 0")
          for t in (float("inf"), float("nan"), "1", 0, -1)),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=match) as e:
            math_score(*args, **kwargs)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="timeout must be a finite number"):
        MathReward(timeout=float("inf"))


def test_huge_boxed_answers_are_not_rewritten():
    """`rpgrl eval` votes on the last boxed answer whatever its length: a 4,400-digit repeating decimal raised
    (int() refuses over 4,300 digits) and a 20,000-digit one was rewritten in quadratic time; answers longer than
    the judged limit are now grouped as written."""
    from rpgrl.evaluation import vote_answer
    from rpgrl.rewards.math import MAX_ANSWER_CHARS, clean_answer
    from rpgrl.rewards.notation import repeating_to_fraction, unicode_to_latex

    long_rep = "0." + "1" * 4400 + "\\overline{3}"
    assert isinstance(vote_answer(f"so \\boxed{{{long_rep}}}"), str)  # (a ValueError before)
    assert clean_answer("\\boxed{" + "1" * 20000 + "\u00bd}").endswith("1\u00bd")
    short = "\\boxed{" + "1" * (MAX_ANSWER_CHARS - 20) + "+2\u00bd}"  # within the limit: still read
    assert clean_answer(short).endswith("+(2+\\frac{1}{2})")
    # the rewrites themselves stay bounded on long digit runs (numbers of at most 20 / 50 digits are read)
    assert unicode_to_latex("1" * 30 + "\u00bd") == "1" * 30 + "\u00bd"  # not 111...1 x 1/2
    assert repeating_to_fraction("0." + "1" * 60 + "\\overline{3}") == "0." + "1" * 60 + "\\overline{3}"


def test_equiv_table_is_large_and_default_mode_is_equiv():
    assert len(EQUIV_TABLE) >= 40
    assert math_score("Answer: 0.5", "\\frac{1}{2}") and not math_score("Answer: 0.5", "\\frac{1}{2}", "strict")


@pytest.mark.parametrize("response,gt,expected", STRICT_TABLE)
def test_strict_correct_implies_equiv_correct(response, gt, expected):
    if expected:
        assert math_score(response, gt, mode="equiv")


def test_strict_correct_implies_equiv_correct_random():
    """Where both rules read the same answer, strict-correct implies equiv-correct (hedges aside). Where they read
    different ones (the authors' rule takes the last `Answer:` line of the last 300 characters, equiv the last
    answer), equiv judges its own: a response is never right for two values."""
    import random

    rng = random.Random(1)
    atoms = ["Answer:", "answer :", "\n", " ", "=", "$", "\\boxed{", "}", "{", "\\frac", "\\sqrt", "1", "2", "0"]
    atoms += [",", ".", "x", "a ", "an ", "\\text{", "degrees", "^\\circ", "\\!", "**", "\\$", "-", "(", ")"]
    hits = 0
    for _ in range(3000):
        body = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 8)))
        resp = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 6))) + rng.choice(["Answer: ", ""]) + body
        # the ground truth: the body with some atoms dropped or added (often normalises the same), or random
        gt = "".join(a for a in body if rng.random() < 0.8) + rng.choice(["", " ", "$", "degrees", "{,}"])
        gt = gt if rng.random() < 0.7 else "".join(rng.choice(atoms[5:]) for _ in range(rng.randint(1, 4)))
        answer = extract_final_answer(resp)
        if strict_correct(resp, gt) and not (answer is not None and is_hedge(answer, gt)):
            if answer is None or normalize_answer(answer) != normalize_answer(extract_strict(resp).strip()):
                continue  # another answer than the authors' rule reads
            hits += 1
            assert equiv_correct(resp, gt), (resp, gt)
    assert hits > 100  # the property was exercised (138 times with this seed)


def test_without_remarks_and_hedges():
    assert without_remarks("The answer is 113") == "113" and without_remarks("\\textbf{(E) } 16") == "16"
    assert without_remarks("540 (the remainder);") == "540" and without_remarks("540 (m = 37)") == "540"
    assert without_remarks("540 (m + n = 541)") == "540 (m + n = 541)"  # more than values assigned: kept
    assert without_remarks("x = 5") == "x = 5" and without_remarks("\\{1,2\\}") == "\\{1,2\\}"
    assert is_hedge("$540$ or $541$", "540") and is_hedge("$540$; $541$", "540") and is_hedge("4 \\text{or} 5", "4")
    assert not is_hedge("$540$ (since $m=37$)", "540") and not is_hedge("$540$, $540$", "540")  # one value twice
    assert not is_hedge("4 or 5", "4, 5") and not is_hedge("\\operatorname{lcm}(4, 6)", "12")
    assert clean_answer("x = 1,000") == "x = 1000" and clean_answer("\\{100,200\\}") == "\\{100,200\\}"
    assert without_remarks("12 \\text{ cm}^2") == "12" and without_remarks("5\\,\\mathrm{kg}") == "5"
    assert without_remarks("\\text{12 apples}") == "12" and without_remarks("12 \\text{ or more}").endswith("more}")
    assert without_remarks("\\text{12 square units}") == "12" and without_remarks("12 \\text{ squared}").endswith("d}")
    assert without_remarks("\\text{12 tenths}") == "\\text{12 tenths}" and without_remarks("12\\,\\mathrm{pi}") != "12"
    assert without_remarks("\\text{12 Degrees Celsius}") == "12" and without_remarks("\\text{12 sq}") != "12"
    assert clean_answer("\\boxed{7}, \\boxed{7}") == "7" and clean_answer("\\boxed{7}, \\boxed{8}") == "7, 8"


def test_extract_and_clean():
    assert extract_final_answer("no answer") is None
    assert extract_final_answer("\\boxed{1} so \\boxed{\\frac{2}{3}}") == "\\frac{2}{3}"  # nested braces, last box
    assert extract_final_answer("\\boxed{1} \\boxed{\\frac{2}{3}}") == "\\boxed{1} \\boxed{\\frac{2}{3}}"  # a run
    assert extract_final_answer("\\boxed{1} \\boxed{2") == "1"  # an unclosed box is skipped
    assert clean_answer("$\\boxed{1\\,000}$.") == "1000"
    assert clean_answer("\\boxed{4} or \\boxed{5}") == "4, 5"


# The original regexes of spec 7.6 steps 3.4-3.6, kept here as the reference for the linear scans that replace them.
_REFERENCE_STEPS = (
    (r"(.*?)(\$)(.*?)(\$)(.*)", r"$\3$", lambda s: _math._first_dollar_pair(s)),
    (r"\\text\{(.*?)\}", r"\1", lambda s: _math._unwrap_shortest(s, "\\text{")),
    (r"\\textbf\{(.*?)\}", r"\1", lambda s: _math._unwrap_shortest(s, "\\textbf{")),
    (r"\\overline\{(.*?)\}", r"\1", lambda s: _math._unwrap_shortest(s, "\\overline{")),
    (r"\\boxed\{(.*)\}", r"\1", lambda s: _math._unwrap_boxed(s)),
)


def _reference_normalize(answer: str) -> str:
    """normalize_answer as first written, with the (quadratic) regexes."""
    s = answer.split("=")[-1]
    for old, new in _math._SUBSTITUTIONS:
        s = s.replace(old, new)
    for junk in _math._REMOVED:
        s = s.replace(junk, "")
    for pattern, repl, _ in _REFERENCE_STEPS:
        s = re.sub(pattern, repl, s)
    s = re.sub(r"frac([^{])(.)", r"frac{\1}{\2}", s)
    s = re.sub(r"sqrt([^{])", r"sqrt{\1}", s)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s.strip()


def test_normalize_steps_equal_the_original_regexes():
    import random

    rng = random.Random(7)
    atoms = ["$", "\\text{", "\\textbf{", "\\overline{", "\\boxed{", "}", "{", "\n", "\r", "x", "1", " ", "\\$"]
    atoms += ["=", "\\frac", "\\sqrt", "a ", ",", "\\text{}", "degrees", "\\"]
    for _ in range(8000):  # every step rewrites a few thousand of these strings
        s = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 14)))
        for pattern, repl, scan in _REFERENCE_STEPS:
            assert scan(s) == re.sub(pattern, repl, s), (pattern, s)
        assert normalize_answer(s) == _reference_normalize(s), s


LONG_GROUND_TRUTHS = {  # each was quadratic before: 1e5 characters took minutes
    "digits": "1" * 100_000,
    "one dollar": "$" + "1" * 100_000,
    "open text": "\\text{1" * 15_000,
    "open boxed": "\\boxed{1" * 12_000,
    "open overline": "\\overline{" * 10_000,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", LONG_GROUND_TRUTHS)
def test_strict_is_linear_in_the_ground_truth(name):
    gt = LONG_GROUND_TRUTHS[name]
    assert _reference_normalize(gt[:300]) == normalize_answer(gt[:300])
    t0 = time.process_time()
    assert not math_score("Answer: 1", gt, mode="strict")
    assert math_score("Answer: " + normalize_answer(gt[:250]), gt[:250], mode="strict")
    assert time.process_time() - t0 < 2.0


def test_a_huge_box_after_a_sentence_label_costs_nothing():
    """Whether a sentence's answer mentions a later box's value was a regular expression compiled from the box:
    1 MB of box took seconds (and filled re's cache). The later box is the answer now; still no time."""
    t0 = time.process_time()
    assert not math_score("so the answer: 5\n\\boxed{" + "1" * 1_000_000 + "}", "5")
    assert time.process_time() - t0 < 0.5


@pytest.mark.parametrize(
    "response",
    [
        "Answer" + " " * 40_000 + "x",  # `Answer\s*(?:\*\*|__)?\s*:` backtracked quadratically: 10 s
        "Let me think about the answer" + "\n" * 200_000,
        "\\boxed{" * 150_000 + "5" + "}" * 150_000,  # each nested box's contents copied: 1.5 GB at 20,000
        "so \\boxed{1}, " * 20_000 + "\\boxed{2}",  # a run of 20,000 boxes
    ],
)
def test_long_whitespace_after_a_label_and_deeply_nested_boxes_take_linear_time(response):
    """A review's: each took seconds to hours in equiv mode, in the calling process where no timer stops it."""
    import tracemalloc

    t0 = time.process_time()
    assert not math_score(response, "540")
    assert time.process_time() - t0 < 1.0
    tracemalloc.start()
    math_score(response, "540")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 * len(response), peak


@pytest.mark.parametrize(
    "text",
    [" " * 40_000, "1" * 40_000, "\\boxed{" * 40_000, "5" + " " * 40_000 + "\\text{cm}", "1" * 40_000 + " mod ",
     "5 (" + "1 +" * 13_000 + "1)", "5, since " * 4_000, "or " * 13_000, "\\text{ or }" * 3_000],
)  # fmt: skip
def test_remarks_hedges_and_units_take_linear_time(text):
    """The patterns for restated values, hedges of one value and units, on 40 KB (a remark pattern before them took
    44 s on 40 KB of spaces in `without_remarks`: it now leaves anything longer than a judged answer alone)."""
    deadline = time.monotonic() + 1.0
    t0 = time.process_time()
    without_remarks(text), _hedges._values_offered(text), _math._restated_value(text, deadline)
    for pattern in (_math._STATED, _math._UNIT_AFTER, _math._UNIT_INSIDE, _math._MOD_SIDE, _math._ARITHMETIC):
        pattern.fullmatch(text)
    _math._CONNECTIVE.match(text), _hedges._OR_PARTS.split(text)
    for response in (text, "Answer: 540 (" + text + ")", "Answer: 540, since " + text, "\\boxed{5} or " + text):
        math_score(response, "540")
    assert time.process_time() - t0 < 0.5


def test_a_remark_after_a_run_of_hyphens_takes_no_cubic_time():
    """A judged answer's run of hyphens before a digit (`123/2---...---\\textbf{(C)}`, 313 characters from random
    hedge fragments: 120 ms) was tried at every start and every split between the remark's dash and its words."""
    t0 = time.process_time()
    for answer in ("5" + "-" * 290 + "1", "5 " + "-" * 290 + "$", "Answer: 12" + "-" * 280 + "3"):
        without_remarks(answer), extract_final_answer(answer)
    assert time.process_time() - t0 < 0.1


def test_a_long_line_after_an_answer_box_takes_linear_time():
    """The line after an answer's box is read for an `Alternatively` text past the lines that only close its math
    (`\\]`, `$$`): a line of 40,000 spaces or tabs before a second box (the closing pattern's leading spaces and its
    trailing spaces and marks both took them: 12 s, quadratic) scores within a tenth of a second."""
    for run in (" " * 40_000, "\t" * 40_000, " ." * 20_000):
        for response in ("So $\\boxed{4}$\n" + run + "x, so $\\boxed{8}$", "\\[\\boxed{4}\\]\n" + run + "\\boxed{8}"):
            t0 = time.process_time()
            math_score(response, "8")
            assert time.process_time() - t0 < 0.1


@pytest.mark.parametrize(
    "tail",
    [" " * 40_000, "1" * 40_000, "or " * 13_000, ", or" * 10_000, "\\boxed{1}, or " * 3_000, "$" * 40_000,
     "-" * 40_000, "\u2014 or " * 8_000, "\\boxed{1} --- or " * 2_500],
)  # fmt: skip
def test_a_hedge_after_the_last_box_is_found_in_linear_time(tail):
    """What follows the last box is read for a hedge (`\\boxed{12} or 13`): 40 KB after it, around it, in a unit."""
    for response in ("\\boxed{5}" + tail, "\\boxed{5}" + tail + " or 1", "\\boxed{5}, \\boxed{5}, or " + tail,
                     tail + "\\boxed{5} or " + tail, "Answer: 5\n" + tail + "\\boxed{5}" + tail,
                     "\\boxed{\\text{5 " + tail + "}}"):  # fmt: skip
        t0 = time.process_time()
        math_score(response, "5")
        assert time.process_time() - t0 < 0.1


def test_many_answer_labels_on_one_line_take_linear_time():
    """Whether a label starts its line looks back a bounded distance: 30,000 labels on one line after a run of
    30,000 markdown stars (each looked back over the whole run: minutes), 60,000 on one 600 KB line, and 60,000
    newline-led ones, score within a second each."""
    stars = "\n" + "*" * 30_000 + "answer: 7 " + ("*" * 3 + "answer: 7 ") * 30_000
    for response in stars, ("*" * 3 + "answer: 7 ") * 60_000, ("\n** answer: 7") * 60_000:
        t0 = time.process_time()  # (each time the last label, in a sentence or on its line, reads 7)
        assert math_score(response, "7") and time.process_time() - t0 < 1.0


# ---------- time bound and safety ----------

ADVERSARIAL = [
    "2^{2^{2^{2^{2^{2}}}}}",  # power tower
    "9^{9^{9^{9}}}",  # power tower
    "99999999999^{9999999}",  # 70-million-digit integer power
    "9" * 100_000,  # 100k-digit number
    "{" * 5000 + "1" + "}" * 5000,  # deeply nested braces
    "\\sqrt{" * 40 + "2" + "}" * 40,  # deeply nested radicals
    "1000000!",  # huge factorial
    "(10^{6})!",  # huge factorial of an expression
    "\\binom{10^{9}}{10^{8}}",  # huge binomial
    "x^{123456}",  # huge symbolic power
    "(x+y+z)^{200}",  # expansion blow-up: passes the pre-filter, stopped by the timer
    "\\left(" * 10 + "1" + "\\right)" * 10,  # slow for the parser: passes the pre-filter, stopped by the timer
    "\\Gamma(10^{7})",  # slow special function evaluation
    "\\lfloor 10^{100000}/7 \\rfloor",  # huge numeric power inside a floor
]


@pytest.mark.parametrize("i", range(len(ADVERSARIAL)), ids=[a[:24] for a in ADVERSARIAL])
def test_adversarial_answers_are_wrong_within_the_time_limit(i):
    """Each is judged wrong, in math_score's time limit (1 s) plus the hard bound's slack; the rest of the bound is
    room for a loaded machine (a worker stopped by its timer, or killed and replaced, measured 1.0-1.3 s), far below
    what these inputs take unbounded (minutes, or memory without end)."""
    response = ("Answer: {}", "\\boxed{{{}}}")[i % 2].format(ADVERSARIAL[i])  # as an answer line or a bare box
    from rpgrl.rewards import _mathverify

    _mathverify.warm_up()  # the worker's one-time start is not part of the bound
    t0 = time.monotonic()
    assert not math_score(response, "5", mode="equiv")
    assert not math_score(response, "5", mode="strict")
    assert time.monotonic() - t0 < 1.0 + _mathverify.HARD_SLACK + 3.0


def test_hard_bound_kills_a_stuck_worker_and_recovers():
    """A worker stuck in C code is simulated by stopping it (SIGSTOP): no timer inside it can fire."""
    from rpgrl.rewards import _mathverify

    _mathverify.warm_up()
    stuck = _mathverify._local.worker
    os.kill(stuck.proc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    assert _mathverify.equivalent("0.5", "\\frac{1}{2}", timeout=0.5) is False  # judged wrong, not hung
    elapsed = time.monotonic() - t0
    # 0.8 s measured (the timeout, the slack, the kill and the replacement's start); the rest is room for a loaded
    # machine (a full garbage collection of the suite's process alone takes ~0.3 s); hung would be forever
    assert 0.5 <= elapsed < 0.5 + _mathverify.HARD_SLACK + 3.0
    assert stuck.proc.poll() is not None  # killed
    assert math_score("Answer: 0.5", "\\frac{1}{2}")  # a fresh worker took over


def _cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (/proc): the worker's own CPU time, whatever else the machine runs."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/stat"), reason="reads /proc")
def test_a_fresh_workers_first_answer_of_each_kind_is_not_charged_one_time_loading():
    """A polynomial identity's first judgement in a worker took ~0.45 s of its CPU (sympy loads and caches), then
    ~0.01 s: on a loaded machine the first such answer of a run passed the 1 s limit and was judged wrong (a
    review's; 0.65 s for a difference of squares, 0.45 s for sin^2 + cos^2). The worker judges one of each kind
    before it reports ready; the kinds here are other answers than those it warms up on."""
    from rpgrl.rewards import _mathverify

    assert all(_mathverify.equivalent(p, g, timeout=30) for p, g in _mathverify.WARM_UP)  # each a real equivalence
    kinds = [("x^3-1", "(x-1)(x^2+x+1)"), ("2\\cos^2 x - 1", "\\cos 2x"), ("\\int_0^2 x^2 dx", "\\frac83")]
    for pred, gold in kinds:
        _mathverify._local.worker = None  # a fresh worker
        _mathverify.warm_up()
        pid = _mathverify._local.worker.proc.pid
        before = _cpu_seconds(pid)
        assert _mathverify.equivalent(pred, gold, timeout=30)
        assert _cpu_seconds(pid) - before < 0.25, pred  # 0.01-0.13 s measured after the warm-up's kinds


def test_equiv_works_off_the_main_thread():
    results = []

    def work():
        results.append((math_score("Answer: 0.5", "\\frac{1}{2}"), math_score("Answer: (x+y+z)^{200}", "5")))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    assert results == [(True, False)] * 2


def test_equiv_works_in_a_dataloader_worker():
    torch = pytest.importorskip("torch")

    class Answers(torch.utils.data.Dataset):
        responses = ["Answer: 0.5", "Answer: 9^{9^{9^{9}}}", "Answer: (x+y+z)^{200}", "Answer: 7"]

        def __len__(self):
            return len(self.responses)

        def __getitem__(self, i):
            return float(math_score(self.responses[i], "\\frac{1}{2}"))

    loader = torch.utils.data.DataLoader(Answers(), batch_size=None, num_workers=1)
    assert [float(x) for x in loader] == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "template",
    [
        "Answer: {code}",
        "Answer: ${code}$",
        "\\boxed{{{code}}}",
        "Answer: \\text{{{code}}}",
        "Answer: 1+{code}",
    ],
)
def test_nothing_in_a_response_is_executed(tmp_path, template):
    marker = tmp_path / "pwned"
    payloads = [
        f"__import__('os').system('touch {marker}')",
        f"exec(\"open('{marker}', 'w')\")",
        f"eval(compile('open(\"{marker}\",\"w\")','x','exec'))",
    ]
    for code in payloads:
        for mode in MODES:
            assert not math_score(template.format(code=code), "5", mode=mode)
    assert not marker.exists()


def test_strict_mode_needs_no_math_verify():
    """strict mode imports neither math-verify nor sympy (H4a's synthetic reward runs without the math extra)."""
    code = (
        "import sys; sys.modules['math_verify'] = None; sys.modules['sympy'] = None\n"
        "from rpgrl.rewards.math import math_score, MathReward\n"
        "assert math_score('Answer: 5', '5', mode='strict') and not math_score('x', '5', mode='strict')\n"
        "assert MathReward(mode='strict')('Answer: 5', '5').correct\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_every_vulgar_fraction_reads_as_its_unicode_value():
    """The table of Unicode vulgar fractions against Unicode's own numeric values (a wrong entry, 2/3 written as
    1/3, gave wrong rewards unnoticed)."""
    import unicodedata
    from fractions import Fraction

    from rpgrl.rewards.notation import _VULGAR

    assert len(_VULGAR) == 18
    for ch, (num, den) in _VULGAR.items():
        assert Fraction(num, den) == Fraction(unicodedata.numeric(ch)).limit_denominator(10), unicodedata.name(ch)


def test_a_judged_corpus_keeps_every_verdict_it_agrees_with():
    """1005 solution endings as models write them (AIME, AMC, fractions, units, money, scaling words, hedges,
    corrections, rejected roots, "Alternatively" paragraphs), each verdict decided by a careful human grader before
    any was scored (`data/judged_responses.json`, the seventeenth probe: 345 realistic endings, 303 agreeing at
    7658823 and 323 now, then 148 aimed at the new rules' edges, 133 agreeing; then 150 aimed at the reason, dash
    and "Alternatively" rules, 100 agreeing before them, 113 with them, 134 after the review's fixes; then 62 aimed
    at a reason restating the value and "Alternatively" after a line break, a list or a heading, 41 agreeing
    before, all after; then 150 from the twentieth probe, 114 agreeing before, 147 after; then 104 from the
    twenty-first (units, percents, intervals, chat templates, plain sentences after `</think>`), 90 agreeing at
    4201bcc, all after, and 46 more, 34 agreeing at 4201bcc, 42 after, all after its leftovers were fixed). A
    change that flips one it agrees with fails here, and so does a known disagreement that comes to agree (drop its
    flag: the flags count what is left)."""
    import json
    from pathlib import Path

    corpus = json.loads((Path(__file__).parent / "data" / "judged_responses.json").read_text())
    flipped = []
    for i, case in enumerate(corpus):
        agrees = equiv_correct(case["response"], case["truth"], timeout=5.0) == case["verdict"]
        if agrees == bool(case.get("known_disagreement")):
            flipped.append((i, "agrees" if agrees else "disagrees", case["why"], case["response"][-80:]))
    assert not flipped, flipped


def test_unbraced_fraction_and_root_arguments_are_braced():
    """`\\sqrt[3]2`, `\\frac\\pi2` and `2^\\frac12` were wrong for their braced forms (math-verify reads `\\frac12`
    and `\\sqrt3`, not these), in a box, on a label and in a sentence alike; a negative `-\\frac12` stated in a
    sentence ("the answer is $-\\frac12$.") was no answer at all."""
    from rpgrl.rewards.notation import braced_arguments

    assert braced_arguments("4\\sqrt[3]2 + \\frac\\pi2") == "4\\sqrt[3]{2} + \\frac{\\pi}{2}"
    assert braced_arguments("2^\\frac12") == "2^{\\frac{1}{2}}" and braced_arguments("\\frac{\\frac12}3") == (
        "\\frac{\\frac{1}{2}}{3}"
    )
    assert braced_arguments("\\sqrt\\frac12") == "\\sqrt\\frac{1}{2}"  # no valid LaTeX: the root left as written
    for kept in ("\\frac{1", "\\sqrt", "\\frac{a}{b}", "\\sqrt[3]{x}"):
        assert braced_arguments(kept) == kept
    for template in ("So the answer is $\\boxed{%s}$.", "Answer: $%s$", "Therefore, the final answer is $%s$."):
        assert math_score(template % "4\\sqrt[3]2", "4\\sqrt[3]{2}")
        assert math_score(template % "-\\frac12", "-\\frac{1}{2}")
        assert math_score(template % "\\frac\\pi2", "\\frac{\\pi}{2}")
    assert math_score("\\boxed{\\sqrt[3]{16}}", "2\\sqrt[3]2") and not math_score("\\boxed{\\sqrt[3]2}", "\\sqrt{2}")


def test_braced_arguments_deep_nesting_is_left_as_written():
    """Nested `\\frac{` recursed three frames per level: 400 levels raised RecursionError. Past MAX_BRACE_DEPTH the
    text is returned as it is; at the limit it is still rewritten."""
    from rpgrl.rewards.notation import MAX_BRACE_DEPTH, braced_arguments

    deep = "\\frac{" * 400 + "1" + "}2" * 400
    assert braced_arguments(deep) == deep
    at = "\\frac{" * MAX_BRACE_DEPTH + "1" + "}2" * MAX_BRACE_DEPTH
    assert braced_arguments(at) == "\\frac{" * MAX_BRACE_DEPTH + "1" + "}{2}" * MAX_BRACE_DEPTH


def test_bracing_arguments_takes_linear_time():
    t0 = time.process_time()
    for text in ("\\frac" * 20_000, "\\sqrt[" * 20_000, "\\sqrt{" * 20_000, "\\frac1" * 20_000, "\\frac{" * 60):
        from rpgrl.rewards.notation import braced_arguments

        braced_arguments(text)
    assert time.process_time() - t0 < 0.5


def test_a_value_named_the_answer_in_the_last_sentence_is_the_answer():
    """No box, no label, no "the answer is": "So $x = 3$ is the only valid answer." ending the response was no
    answer (wrong for 3). The value before "is the (only, final, correct, ...) answer/solution" is read when the
    sentence ends the response, as "the answer is 3" is; not a hedge, a negation or reasoning after it."""
    ending = "We solve the equation and check both roots.\n\n"
    assert extract_final_answer(ending + "So $x = 3$ is the only valid answer.") == "$x = 3$"
    assert math_score(ending + "Checking, $x=-2$ is extraneous, so $x = 3$ is the only valid solution.", "3")
    assert math_score(ending + "We can see that 540 is the correct answer.\n\nI hope it is correct.", "540")
    assert math_score(ending + "Therefore, $\\frac12$ is the final answer to the problem.", "\\frac{1}{2}")
    assert math_score(ending + "Both roots check out in the original; $x = 3$ is the answer.", "3")
    assert math_score(ending + "Thus $n = 3$ is the smallest positive integer solution.", "3")
    for wrong in ("So $x = 3$ is the only valid answer. But wait, let me check $x = -2$.", "Thus $3$ or $4$ is the "
                  "answer.", "So $x = 3$ is not the answer.", "Plugging in, $x = 3$ is the answer we want, since it "
                  "works. Now try $x = 5$."):  # fmt: skip
        assert not math_score(ending + wrong, "3"), wrong


def test_a_value_named_the_answer_is_found_in_linear_time():
    t0 = time.process_time()
    for run in (" " * 40_000, " is the" * 6_000, "so, " * 10_000, "that " * 8_000):
        for response in (run + "3 is the answer.", "3" + run + " is the only answer.", run):
            math_score(response, "3")
            _math._IS_THE_ANSWER.search(response), _math._BEFORE_VALUE.split(response)
    assert time.process_time() - t0 < 0.5


def test_a_unit_conversion_after_the_box_is_no_hedge():
    """`\\boxed{3} — or $300$ if measured in centimeters` was a hedge ("or", a value, "if"): the value after the "or"
    is the box's in a known unit (`_is_unit`), as `or 300 cm` is; another value (`or 4`, `or $4$ if we include
    the endpoint`, `or 300 if we count twice`) still hedges."""
    for tail in ("— or $300$ if measured in centimeters.", "(or $300$ when expressed in centimeters).",
                 ", or $300$ if we measure in centimeters.", "— or $\\frac{3}{1000}$ in kilometers."):  # fmt: skip
        assert math_score("The length is $\\boxed{3}$ " + tail, "3"), tail
    for tail in ("— or $4$ if we include the endpoint.", "— or 4.", ", or $300$ if we count twice.",
                 ", or maybe 4 in total."):  # fmt: skip
        assert not math_score("The length is $\\boxed{3}$ " + tail, "3"), tail
    t0 = time.process_time()
    for run in (" " * 40_000, "in " * 13_000, "1" * 40_000):
        _hedges._CONVERSION.fullmatch(run), math_score("\\boxed{3} — or 300 " + run + " cm", "3")
    assert time.process_time() - t0 < 0.5


def test_an_alternative_further_from_a_stated_answer_is_a_hedge_unless_it_corrects():
    """An "Alternatively" paragraph boxing another value was a hedge only right after the answer's paragraph: after
    a paragraph checking the answer (`Answer: 4`, a check, then `Alternatively, with order, $\\boxed{8}$.`) it read
    as 8 alone. Now a hedge when the answer is stated as one (a label, "the answer is"; a step's box is not); an
    alternative that names its value the correct answer corrects (`So the correct answer is $\\boxed{16}$`)."""
    check = "\n\nLet me double-check by listing the pairs: (1,2), (1,3), (2,3), (3,4). That is 4 pairs.\n\n"
    for answer in (
        "So the answer is $\\boxed{4}$.",
        "Answer: 4",
        "**Final Answer:** $\\boxed{4}$",
        "**Final Answer**\n\\[\\boxed{4}\\]",
    ):
        response = answer + check + "Alternatively, if order matters, there are $\\boxed{8}$."
        assert not math_score(response, "8") and not math_score(response, "4"), answer
        assert math_score(answer + check + "Alternatively, counting directly, $\\boxed{4}$.", "4"), answer
        assert math_score(answer + "\n\nWait, I missed one." + check[2:] + "Alternatively, $\\boxed{5}$.", "5")
    step = (
        "The number of pairs is $\\boxed{6}$.\n\nEach pair can be ordered in 2 ways.\n\nAlternatively, $\\boxed{12}$."
    )
    assert math_score(step, "12")
    method = "So the answer is $\\boxed{12}$.\n\n**Alternative method:** Count the complement: $36 - 20 = 16$. "
    assert math_score(method + "So the correct answer is $\\boxed{16}$.", "16")
    assert not math_score(method + "So the answer is $\\boxed{16}$.", "16")
    conditional = (
        "So the answer is $\\boxed{4}$.\n\nAlternatively, if order matters, the correct answer is $\\boxed{8}$."
    )
    assert not math_score(conditional, "8")  # a condition: another answer offered, not a correction
    t0 = time.process_time()
    for middle in ("x\n\n" * 20_000, "### A\n\n- b\n\n" * 5_000, "Alternatively:\n\n" * 10_000):
        math_score("So the answer is $\\boxed{4}$.\n\n" + middle + "Alternatively, $\\boxed{8}$.", "8")
    assert time.process_time() - t0 < 1.0


def test_a_value_offered_after_the_box_and_its_unit_is_a_hedge():
    """`There are $\\boxed{4}$ subsets — or 5.` and `$\\boxed{5}$ hours, or $6$ if we include the stop` read as the
    box alone (the "or" must follow the box); `\\boxed{14}, but it could also be $15$` too. The box's unit is read
    past now (a known unit or a plural count noun, `_is_unit`), "but it could also be" offers as "or" does, and
    "with", "including" set a condition as "if" does; a conversion after the unit still restates."""
    for tail in ("subsets — or 6.", "subsets — or $6$ with the empty set.", "hours, or $6$ if we include the stop.",
                 "ways, or maybe $13$.", ", but it could also be $15$.", "hours, or 6 including it."):  # fmt: skip
        assert not math_score("So there are $\\boxed{5}$ " + tail, "5"), tail
    for tail in ("hours, or $300$ minutes.", "feet — or $4$ yards.", "subsets, or more precisely $5$.", "ways."):
        assert math_score("So there are $\\boxed{5}$ " + tail, "5"), tail
    t0 = time.process_time()
    for run in (" " * 40_000, "ways " * 8_000, "but it could " * 3_000):
        _hedges._UNIT_BEFORE_OR.match(run), _hedges._BUT_ALSO.search(run)
        math_score("\\boxed{5} " + run + " or 6", "5"), math_score("\\boxed{5} ways" + run, "5")
    assert time.process_time() - t0 < 0.5


def test_an_answer_sentence_correcting_the_last_box_is_the_answer():
    """`\\boxed{7}`, then `Wait, that's wrong: I forgot the divisor 1, so the answer is 8.` ending the response was
    judged as 7: a sentence stating the answer after the last box is read when the text after the box corrects it
    (`wait`, `I forgot`, `the correct answer is`), as a later box or label is; not a check that finds no error."""
    box = "So the answer is $\\boxed{7}$.\n\n"
    assert math_score(box + "Wait, that's wrong: I forgot the divisor 1, so the answer is 8.", "8")
    assert not math_score(box + "Wait, that's wrong: I forgot the divisor 1, so the answer is 8.", "7")
    assert math_score(box + "Hmm, I made a mistake above; $x = 8$ is the correct answer.", "8")
    assert not math_score(box + "Wait, maybe the answer is 7 or 8.", "7")
    assert math_score(box + "Checking: the divisors are 1, 2, 4, 8, 16, 32, 64, so the answer is 7.", "7")
    assert not math_score(box + "Double-checking the count, the answer is 8.", "8")  # no error found: the box
    t0 = time.process_time()
    for run in ("wait " * 8_000, " " * 40_000, "the answer is " * 3_000):
        math_score(box + run + "so the answer is 8.", "8")
    assert time.process_time() - t0 < 0.5


def test_two_boxes_of_one_quantity_in_two_units_are_one_answer():
    """`$\\boxed{5}$ km or $\\boxed{5000}$ m` was read as 5000 alone (wrong for 5): a unit and "or" between two
    boxes join them in one run, right in either unit when they name one amount of one quantity
    (`presentation.unit_scale`); two other values are a hedge (`5 km or 500 m`, and `\\boxed{4} subsets or
    \\boxed{5} subsets` read as 5 alone before)."""
    for response, truths in (
        ("The distance is $\\boxed{5}$ km or $\\boxed{5000}$ m.", ("5", "5000")),
        ("It takes $\\boxed{2}$ hours, or $\\boxed{120}$ minutes.", ("2", "120")),
        ("It costs $\\boxed{2.5}$ dollars or $\\boxed{250}$ cents", ("2.5", "250")),
    ):
        assert all(math_score(response, t) for t in truths), response
        assert not math_score(response, "7"), response
    for hedge, truth in (
        ("The distance is $\\boxed{5}$ km or $\\boxed{500}$ m.", "5"),
        ("The length is $\\boxed{3}$ m or $\\boxed{4}$ m.", "4"),
        ("There are $\\boxed{4}$ subsets or $\\boxed{5}$ subsets.", "5"),
    ):
        assert not math_score(hedge, truth), hedge
    assert math_score("The length is $\\boxed{3}$ m or $\\boxed{3}$ m.", "3")


def test_an_answer_stated_in_a_plain_sentence_after_think_is_read():
    """An answer stated only in a plain sentence after `</think>` ("The number of valid arrangements is 42.") was no
    answer: the sentence closing the text after the reasoning states it (words after its value allowed); not a
    question, a sentence going on with math, or such a sentence in reasoning that is cut (no `</think>`)."""
    think = "<think>\nCasework gives 42 after removing the overlaps.\n</think>\n\n"
    for ending, truth in (
        ("The number of valid arrangements is 42.", "42"),
        ("The number of valid arrangements is 42, since each block can be rotated.", "42"),
        ("There are 113 ways to draw the segments.", "113"),
        ("So, there are 9 such dates in 2023.", "9"),
        ("The minimum value is $-4$.", "-4"),
        ("The sum of all such bases is $70$.<|im_end|>", "70"),
    ):
        assert math_score(think + ending, truth), ending
        assert not math_score(think + ending, "41"), ending
    for ending in ("Is the number of arrangements 42?", "So the count is 42 minus $3$.", "It is 42 + 1."):
        assert not math_score(think + ending, "42"), ending
    assert not math_score("Let me think. The number of arrangements is 42. Hmm, wait, I should check the", "42")


def test_a_checked_result_then_an_alternative_is_a_hedge():
    """A result's box not named the answer (`The number of pairs is $\\boxed{6}$.`), a paragraph checking it, then
    `Alternatively, if order matters, there are $\\boxed{12}$.` read as 12 alone: a paragraph checking the box
    (`Check: ...`, `Let me verify`) makes it an answer, so the alternative offers a second one, a hedge. The same
    value again, a correction, and a step's box with the next step after it read as before."""
    box = "The number of pairs is $\\boxed{6}$.\n\n"
    alternative = "\n\nAlternatively, if order matters, there are $\\boxed{12}$."
    for check in (
        "Check: listing them, (1,2), (1,3), (1,4), (2,3), (2,4), (3,4), six pairs.",
        "Let me verify: $\\binom{4}{2} = 6$. Yes.",
        "To double-check, $\\binom{4}{2} = 6$.",
    ):
        assert not math_score(box + check + alternative, "12") and not math_score(box + check + alternative, "6")
        assert math_score(box + check + "\n\nAlternatively, counting directly, $\\boxed{6}$.", "6"), check
        assert math_score(box + check + "\n\nWait, I missed a pair.\n\nAlternatively, $\\boxed{7}$.", "7"), check
    step = "Each pair can be ordered in 2 ways, so we multiply."
    assert math_score(box.replace("The", "First, the") + step + alternative, "12")


def test_a_membership_stated_as_the_answer_is_read():
    """`Therefore, the answer is $x \\in (1, 3)$.` (no box, no label) was no answer, as was `so the final answer:
    $x \\in [2, \\infty)$` inside a sentence: a value after `x \\in` is answer-shaped as one after `x =` is."""
    for ending, truth in (
        ("Therefore, the answer is $x \\in (1, 3)$.", "(1,3)"),
        ("We solve the inequality, so the final answer: $x \\in [2, \\infty)$", "[2,\\infty)"),
    ):
        assert math_score("We solve the inequality step by step.\n\n" + ending, truth), ending
        assert not math_score("We solve the inequality step by step.\n\n" + ending, "(1,4)"), ending
    assert not math_score("Therefore, the answer is $x \\in S$ where $S = (1, 3)$.", "(1,3)")


def test_a_label_corrected_by_a_sentence_after_it_reads_the_correction():
    """`Answer: 120`, then `Hmm, wait, I forgot that the arrangements are circular, ...: the answer is 24.` was read
    as 120: an answer sentence ending the response after a label corrects it when the text after the label finds an
    error (`hedges.corrects`), as after a box."""
    correction = "\n\nHmm, wait, I forgot that the arrangements are circular, so we divide by 5: the answer is 24."
    assert math_score("We count the arrangements.\n\nAnswer: 120" + correction, "24")
    assert not math_score("We count the arrangements.\n\nAnswer: 120" + correction, "120")
    assert math_score("Answer: 120\n\nAs a check, $5! = 120$, so the answer is 120.", "120")


def test_the_workers_start_is_no_part_of_a_judgements_budget():
    """On a cold worker (each thread has its own) the first answer needing two math-verify calls was judged wrong
    and the same answer right after it: the worker's start (seconds) used up the one-second budget before the second
    call (`x \\le 3` for `(-\\infty, 3]`: compared both ways). The budget counts from the worker being ready."""
    verdicts = []
    response = "So the solution set is $x \\le 3$.\n\nAnswer: $x \\le 3$"

    def judge() -> None:
        verdicts.extend(math_score(response, "(-\\infty, 3]") for _ in range(2))

    thread = threading.Thread(target=judge)
    thread.start()
    thread.join()
    assert verdicts == [True, True]


def test_a_percent_is_right_for_its_fraction():
    """`\\boxed{12.5\\%}` was wrong for `\\frac{1}{8}` (the sign dropped, 12.5 compared): an answer ending in a percent
    sign is also its number over 100, as in a hedge (`_offers_one_value`); the number alone stays right."""
    for answer, truth in (
        ("\\boxed{12.5\\%}", "\\frac{1}{8}"),
        ("$\\boxed{20\\%}$", "0.2"),
        ("Answer: 75%", "\\frac34"),
    ):
        assert math_score("So the probability is " + answer, truth), answer
    assert math_score("So the discount is $\\boxed{20\\%}$.", "20")
    assert not math_score("So the probability is $\\boxed{12.5}$.", "\\frac{1}{8}")
    assert not math_score("So the probability is $\\boxed{12.5\\%}$.", "\\frac{1}{4}")


def test_two_boxes_of_one_quantity_with_units_inside_are_one_answer():
    """`$\\boxed{5\\text{ km}}$ or $\\boxed{5000\\text{ m}}$` was a hedge (wrong for 5), where the same boxes with
    their units after them are one answer: a unit inside the box is read as one after it."""
    response = "The distance is $\\boxed{5\\text{ km}}$ or $\\boxed{5000\\text{ m}}$."
    assert math_score(response, "5") and math_score(response, "5000")
    assert math_score("It takes $\\boxed{2\\ \\mathrm{h}}$, or $\\boxed{120}$ minutes.", "120")
    assert not math_score("The distance is $\\boxed{5\\text{ km}}$ or $\\boxed{500\\text{ m}}$.", "5")
    assert not math_score("The distance is $\\boxed{5\\text{ km}}$ km or $\\boxed{5000}$ m.", "5")  # two units


def test_a_number_with_a_plain_unit_of_two_words_is_its_number():
    """`So the answer is 42 km/h.` (also boxed, or on a label) was wrong for 42: math-verify reads `km/h` as a
    division of variables. A number and a unit in plain words is judged as its number, as a unit in text is; words
    that are no unit keep the answer as written (`3 pi`)."""
    for response in ("So the answer is 42 km/h.", "The answer is $\\boxed{42 km/h}$", "Answer: 42 m / s"):
        assert math_score(response, "42") and not math_score(response, "43"), response
    assert not math_score("Answer: 3 pi", "3")


def test_an_answer_that_should_be_a_value_after_think_is_read():
    """`</think>` then `The answer should be 42.` was no answer (the plain sentence's verbs were "is", "are",
    "equals"): "should be" and "must be" state the value too."""
    think = "<think>\nCounting the cases gives 42.\n</think>\n\n"
    for ending in ("The answer should be 42.", "So the number of arrangements must be 42."):
        assert math_score(think + ending, "42") and not math_score(think + ending, "41"), ending


def test_a_value_alone_after_think_is_the_answer():
    """`</think>` then `**42**` alone (no box, no label, no sentence) was no answer: a text after the reasoning that is
    a value alone is that value; words around a number are not (`Let me think: 42`)."""
    think = "<think>\nCounting the cases gives 42.\n</think>\n\n"
    for ending in ("**42**", "$42$", "42.", "\\(42\\)\n"):
        assert math_score(think + ending, "42") and not math_score(think + ending, "41"), ending
    assert not math_score(think + "Let me think: 42", "42")


def test_a_plain_sentence_after_think_reads_its_number_whole():
    """After `</think>`, `The probability is 25%.` was read as 25 (wrong for 1/4) and `The solid is 3-dimensional.`
    as the answer 3: the plain sentence's number is read whole, with its percent sign, and not inside a word."""
    think = "<think>\nThe probability works out to one in four.\n</think>\n\n"
    assert math_score(think + "The probability is 25%.", "\\frac{1}{4}")
    assert math_score(think + "The probability is $25\\%$.", "\\frac{1}{4}")
    assert not math_score(think + "So the solid is 3-dimensional.", "3")


def test_a_plain_statement_with_a_verb_of_measure_after_think_is_read():
    """After `</think>`, `The walk takes 204 minutes.` was no answer (the plain sentence's verbs were "is", "are",
    "equals", "should be"): "takes", "costs", "weighs", "measures", "comes to" state a value too; a question, a
    sentence going on with math and reasoning without `</think>` stay no answer."""
    think = "<think>\nThe walk is 17 km at 5 km/h, so it takes 204 minutes.\n</think>\n\n"
    for ending, truth in (
        ("The walk takes 204 minutes.", "204"),
        ("So the ticket costs 12 dollars.", "12"),
        ("The parcel weighs $3.5$ kg.", "3.5"),
        ("The total comes to 45.", "45"),
    ):
        assert math_score(think + ending, truth) and not math_score(think + ending, "7"), ending
    for ending in ("Does the walk take 204 minutes?", "The walk takes 204 minutes plus $3$.", "It takes 204 - 1."):
        assert not math_score(think + ending, "204"), ending
    assert not math_score("Let me think. The walk takes 204 minutes. Hmm, wait, I should check the", "204")


def test_a_result_named_before_a_colon_after_think_is_read():
    """After `</think>`, `The final count: 45` was no answer: a short phrase naming a result (`The final count`,
    `Total`, `The probability`), a colon and a value alone is that value; a clause before the colon (`Let me think:
    42`), math after the value, or no `</think>` is not."""
    think = "<think>\nAdding the cases gives 45.\n</think>\n\n"
    for ending, truth in (
        ("The final count: 45", "45"),
        ("Total: 45.", "45"),
        ("So the minimum value: $-4$", "-4"),
        ("The walking time: 204 minutes.", "204"),
    ):
        assert math_score(think + ending, truth) and not math_score(think + ending, "7"), ending
    for ending in ("Let me think: 45", "The final count: 45 + 3", "Check the count: 45", "The final count: 45?"):
        assert not math_score(think + ending, "45"), ending
    assert not math_score("We add the cases.\n\nThe final count: 45", "45")
    t0 = time.process_time()
    for run in (" " * 40_000, "the " * 10_000, "count " * 7_000, "takes " * 7_000):
        math_score(think + run + "count: 45", "45"), math_score(think + "The " + run + " takes 45", "45")
    assert time.process_time() - t0 < 0.5


def test_a_sentence_stating_two_quantities_after_think_is_no_answer():
    """After `</think>`, `The sum is 5, and the product is 6.` read as 6 (its last stated value): a sentence stating
    two different values states no one answer; a sentence stating one, or one value twice, reads as before."""
    think = "<think>\nBy Vieta, the roots 2 and 3 give sum 5 and product 6.\n</think>\n\n"
    for ending in ("The sum is 5, and the product is 6.", "The sum is $5$ and the product is $6$."):
        assert not math_score(think + ending, "6") and not math_score(think + ending, "5"), ending
    assert math_score(think + "The product is 6.", "6")
    assert math_score(think + "The product is 6, so the answer is 6.", "6")


def test_a_value_rejected_inside_the_answer_is_dropped():
    """`Answer: x = 3 or x = -2 (rejected, since x > 0)` was a hedge (wrong for 3): a value the answer itself rejects
    right after it (`(rejected)`, `(extraneous)`, `, which is extraneous`) is no value offered; the one left is the
    answer. Two values kept, or none, stay a hedge."""
    for answer in (
        "x = 3 or x = -2 (rejected, since x > 0)",
        "$x = -2$ (extraneous) or $x = 3$",
        "x = 3 or x = -2, which is extraneous",
        "3 or -2 (not valid, as lengths are positive)",
    ):
        response = "We solve the quadratic.\n\nAnswer: " + answer
        assert math_score(response, "3") and not math_score(response, "-2"), answer
    for answer in ("x = 3 or x = -2", "x = 3 or x = -2 (both valid)", "3 (rejected) or -2 (rejected)",
                   "x = 3 or x = -2 (not rejected)", "x = 3 or x = 4 or x = -2 (rejected)"):  # fmt: skip
        assert not math_score("We solve the quadratic.\n\nAnswer: " + answer, "3"), answer


def test_a_value_offered_for_another_case_after_the_box_is_a_hedge():
    """`The length is $\\boxed{3}$ — or $4$ in that case.` read as 3 (the words after the value were no condition
    the rule knew): "in that case", "in which case", "otherwise" set a condition as "if" does, so the value after
    the "or" is offered; a value in a unit after the "or" still restates the box (`— or $300$ in centimeters`)."""
    for tail in ("— or $4$ in that case.", ", or 4 in which case the endpoint counts.", "(or $4$ otherwise).",
                 "— or $4$ in the other case."):  # fmt: skip
        response = "If the endpoint is excluded, the length is $\\boxed{3}$ " + tail
        assert not math_score(response, "3") and not math_score(response, "4"), tail
    assert math_score("The length is $\\boxed{3}$ — or $300$ in centimeters.", "3")


def test_two_boxes_of_one_quantity_with_words_after_the_unit_are_one_answer():
    """`The road is $\\boxed{5}$ km or $\\boxed{5000}$ m long.` was wrong for 5 and for 5000 (the last unit was read
    with the word after it, `m long`, then not at all; `m in total` as `min`, minutes): a unit of a known size right
    after the last box is read alone."""
    for tail in ("long.", "in total.", "away from the station."):
        response = "The road is $\\boxed{5}$ km or $\\boxed{5000}$ m " + tail
        assert math_score(response, "5") and math_score(response, "5000"), tail
        assert not math_score(response, "500"), tail
    assert not math_score("The road is $\\boxed{5}$ km or $\\boxed{500}$ m long.", "5")


def test_two_boxes_of_one_quantity_joined_by_and_are_their_sum():
    """`It takes $\\boxed{2}$ hours and $\\boxed{30}$ minutes.` was read as 30 alone: boxed parts of one amount in
    descending units of one quantity (`presentation.unit_scale`), joined by "and" or a comma, each smaller part less
    than one of the unit before it, are one answer, their sum, right in any unit they use (150 minutes, 2.5 hours).
    Other boxes joined by "and" are not added (ascending units, a part of a full unit or more, other units)."""
    for response, truths, wrong in (
        ("It takes $\\boxed{2}$ hours and $\\boxed{30}$ minutes.", ("150", "2.5", "\\frac52"), ("30", "2", "32")),
        ("The board is $\\boxed{5}$ feet and $\\boxed{3}$ inches long.", ("63", "5.25"), ("3", "5", "8")),
        ("It costs $\\boxed{3}$ dollars, $\\boxed{25}$ cents.", ("325", "3.25"), ("25", "28")),
        ("It takes $\\boxed{2\\text{ h}}$ and $\\boxed{30\\text{ min}}$.", ("150", "2.5"), ("30", "2")),
        ("It takes $\\boxed{1}$ hour, $\\boxed{2}$ minutes and $\\boxed{5}$ seconds.", ("3725",), ("5", "62")),
    ):
        assert all(math_score(response, t) for t in truths), response
        assert not any(math_score(response, t) for t in wrong), response
    for response, truth in (
        ("It takes $\\boxed{30}$ minutes and $\\boxed{2}$ hours.", "150"),
        ("It takes $\\boxed{2}$ hours and $\\boxed{90}$ minutes.", "210"),
        ("It takes $\\boxed{2}$ hours and $\\boxed{30}$ km.", "150"),
    ):
        assert not math_score(response, truth), response
    assert math_score("It takes $\\boxed{2}$ hours and $\\boxed{30}$ minutes.", "2, 30")  # both parts asked
    t0 = time.process_time()
    for run in ("$\\boxed{1}$ hours and " * 20_000, "\\boxed{2} hours, " * 20_000, "\\boxed{2} " + "h" * 100_000):
        math_score(run + "$\\boxed{30}$ minutes", "150")
    assert time.process_time() - t0 < 0.5


def test_a_sentence_deriving_its_value_from_others_after_think_reads_the_derived_one():
    """After `</think>`, `Each side is 3, so the perimeter is 12.` was no answer (two different values stated; the
    rule for `The sum is 5, and the product is 6.` took it for two quantities; it read 12 before that rule, as a
    grader does): the values stated before "so", "thus", "hence", "therefore" or "which is" are what the last one is
    derived from, not other answers; two values joined by "and" or a comma stay no answer."""
    think = "<think>\nWorking it out.\n</think>\n\n"
    for ending, truth in (
        ("Each side is 3, so the perimeter is 12.", "12"),
        ("The trip took 3 hours, so the average speed is 60 km/h.", "60"),
        ("Each item costs 5 dollars, therefore the total is 45.", "45"),
        ("There are 3 red and 5 blue marbles, so there are 8 marbles in all.", "8"),
        ("The length is 5 and the width is 3, thus the area is 15.", "15"),
        ("In total it takes 3 hours, which is 180 minutes.", "180"),
    ):
        assert math_score(think + ending, truth), ending
        assert not math_score(think + ending, "3") or truth == "3", ending
    for ending in ("The sum is 5, and the product is 6.", "The walk takes 204 minutes, and the return takes 180."):
        assert not math_score(think + ending, "6") and not math_score(think + ending, "180"), ending


def test_a_measure_sentence_after_an_answer_after_think_is_no_answer():
    """After `</think>`, `So the number of arrangements is 42. This took 3 tries to verify.` read as 3 (a verb of
    measure states a value, and the last sentence was read): a sentence with a verb of measure right after a
    conclusion with another value is a remark on it, not the answer, unless it opens with a conclusion of its own
    (`So the walk takes 204 minutes.`); alone, or after a sentence that concludes nothing, it reads as before."""
    think = "<think>\nWorking it out.\n</think>\n\n"
    for ending, stray in (
        ("So the number of arrangements is 42. This took 3 tries to verify.", "3"),
        ("So the minimum is 8.\n\nThe proof takes 2 steps.", "2"),
        ("Thus Sam runs 10 laps of 400 m. Each lap takes 2 minutes.", "2"),
        ("The final count: 45. Counting took 5 minutes.", "5"),
    ):
        assert not math_score(think + ending, stray), ending
    for ending in (
        "The walk is 17 km at 5 km/h. So the walk takes 204 minutes.",
        "The distance is 17 km.\n\nTherefore, the walk takes 204 minutes.",
        "We walk 17 km at 5 km/h. The walk takes 204 minutes.",
        "Time = 17/5 hours = 3.4 hours.\n\nThe walk takes 204 minutes.",
        "The walk takes 204 minutes.",
    ):
        assert math_score(think + ending, "204"), ending


def test_the_statement_before_a_measure_remark_after_think_is_the_answer():
    """After `</think>`, `So the number of arrangements is 42. This took 3 tries to verify.` was no answer once the
    remark was no longer read (a grader reads 42): the sentence before the remark, read as a plain statement
    (`_stated_plainly`), is the answer; one that states no one value stays no answer."""
    think = "<think>\nWorking it out.\n</think>\n\n"
    for ending, truth in (
        ("So the number of arrangements is 42. This took 3 tries to verify.", "42"),
        ("So the minimum is 8.\n\nThe proof takes 2 steps.", "8"),
    ):
        assert math_score(think + ending, truth) and not math_score(think + ending, "3"), ending
    assert not math_score(think + "Thus Sam runs 10 laps of 400 m. Each lap takes 2 minutes.", "400")


def test_a_remark_that_rejects_no_value_keeps_the_hedge():
    """`Answer: 3 or 5 (impossible to decide without the figure)` read as 3 (the remark's "impossible" taken to reject
    5): a rejecting word that opens a phrase about something else (`impossible to decide`, `not possible to be sure`,
    `excluded the empty set`, `rejected x = -2`, naming another value), or a condition (`which is invalid if n must
    be odd`) rejects no value, so the answer stays a hedge; `(rejected, since x > 0)`, `(extraneous root)`,
    `(invalid)`, `(rejected by the domain)` still reject the value before them."""
    q = "We solve the equation step by step.\n\nAnswer: "
    for answer, first in (
        ("3 or 5 (impossible to decide without the figure)", "3"),
        ("12 or 13 — impossible to say which without the figure", "12"),
        ("4 or 5, but it is not possible to be sure", "4"),
        ("7 or 8 (impossible to distinguish)", "7"),
        ("16 or 15 (excluded the empty set)", "16"),
        ("5 or 6 (discarded the duplicate)", "5"),
        ("4 or 6, which is invalid if n must be odd", "4"),
        ("x = -2 or x = 3 (rejected x = -2 since x > 0)", "-2"),
        ("x = 3 or x = -2 (rejected 3, as x < 0)", "3"),
    ):
        assert not math_score(q + answer, first), answer
    for answer in (
        "x = 3 or x = -2 (rejected, since x > 0)",
        "x = 3 or x = -2 (extraneous root)",
        "3 or -2 (invalid)",
        "x = 3 or x = -2 (rejected by the domain)",
        "x = 3 or x = -2, which is impossible for a length",
        "3 or -2 (impossible)",
    ):
        assert math_score(q + answer, "3") and not math_score(q + answer, "-2"), answer


def test_boxed_parts_of_several_things_are_not_added():
    """`The two trips take $\\boxed{2}$ hours and $\\boxed{30}$ minutes, respectively.` was right for 150 and 2.5
    (the boxes read as parts of one amount, `presentation.compound_amount`): "respectively" after them, or a plural
    "are" / "were" before them (`The sides are $\\boxed{3}$ m and $\\boxed{40}$ cm.`; not "there are"), makes them
    values of several things, a list, right for both values asked; one amount still adds up."""
    for response, wrong in (
        ("The two trips take $\\boxed{2}$ hours and $\\boxed{30}$ minutes, respectively.", ("150", "2.5")),
        ("The answers are $\\boxed{2}$ hours and $\\boxed{30}$ minutes.", ("150", "2.5")),
        ("The sides are $\\boxed{3}$ m and $\\boxed{40}$ cm.", ("3.4", "340")),
        ("The times were $\\boxed{1}$ hour, $\\boxed{20}$ minutes.", ("80",)),
    ):
        assert not any(math_score(response, t) for t in wrong), response
        assert math_score(response, ", ".join(re.findall(r"boxed\{(\d+)\}", response))), response
    for response in (
        "There are $\\boxed{2}$ hours and $\\boxed{30}$ minutes left.",
        "The trip takes $\\boxed{2}$ hours and $\\boxed{30}$ minutes.",
        "Both trips are long: the first takes $\\boxed{2}$ hours and $\\boxed{30}$ minutes.",
    ):
        assert math_score(response, "150"), response
    assert math_score("The distances are $\\boxed{5}$ km or $\\boxed{5000}$ m.", "5000")  # one value in two units


def test_a_value_in_a_unit_offered_under_a_condition_after_the_box_is_a_hedge():
    """`It takes $\\boxed{2}$ hours and $\\boxed{30}$ minutes, or 3 hours if it rains.` was right for 150 (and
    `$\\boxed{2}$ km or $\\boxed{2000}$ m, or 3 km if we go around.` for 2): the condition after the "or" value was
    looked for right after the value, where its unit stood; a unit is passed over, so the value is offered under a
    condition, a hedge. A value in a unit with no condition after it still restates the box (`, or 125 cents`)."""
    for response, truth in (
        ("It takes $\\boxed{2}$ hours and $\\boxed{30}$ minutes, or 3 hours if it rains.", "150"),
        ("It is $\\boxed{2}$ km or $\\boxed{2000}$ m, or 3 km if we go around.", "2"),
        ("The length is $\\boxed{3}$ m, or 4 m if the endpoint counts.", "3"),
        ("There are $\\boxed{16}$ subsets (or 15 subsets when the empty set is excluded).", "16"),
        ("The walk takes $\\boxed{3}$ hours, or 4 hours in that case.", "3"),
    ):
        assert not math_score(response, truth), response
    assert math_score("It costs $\\boxed{1.25}$ dollars, or 125 cents.", "1.25")
    assert math_score("It takes $\\boxed{2}$ hours, or 120 minutes if measured in minutes.", "2")


def test_a_measure_remark_after_the_answer_sentence_is_no_answer_whatever_it_opens_with():
    """After `</think>`, `So the answer is 42.` then `In total, this took 4 steps.` read as 4 (a sentence opening with
    a conclusion was read after one stating another value): after a sentence that names the answer, a measure is a
    remark on it whatever it opens with; after one that does not, a conclusion still reads."""
    think = "<think>\nWorking it out.\n</think>\n\n"
    for ending in ("So the answer is 42.\n\nIn total, this took 4 steps.", "The answer is 42. So checking took 4 s."):
        assert not math_score(think + ending, "4") and math_score(think + ending, "42"), ending
    assert math_score(think + "The first leg is 120 minutes. In total, the walk takes 204 minutes.", "204")


def test_boxed_parts_after_a_plural_answers_label_are_not_added():
    """`Answers: $\\boxed{2}$ hours and $\\boxed{30}$ minutes.` was right for 150 (added up as one amount): a plural
    "Answers:" before them lists values of several questions, as "are" does; `Answer:` still adds them up."""
    assert not math_score("Answers: $\\boxed{2}$ hours and $\\boxed{30}$ minutes.", "150")
    assert math_score("Answers: $\\boxed{2}$ hours and $\\boxed{30}$ minutes.", "2, 30")
    assert math_score("Answer: $\\boxed{2}$ hours and $\\boxed{30}$ minutes.", "150")


def test_a_case_named_before_the_value_after_the_box_is_a_hedge():
    """`The answer is $\\boxed{4}$ — or, in that case, $5$.` read as 4 (the case was looked for after the value
    only): "in that case", "otherwise" right after the "or" set a condition before the value as after it, so the
    value is offered, a hedge; the same value restated (`or, in either case, $4$`) is still one answer, and
    "otherwise" opening a clause with no value after it offers none."""
    for tail in ("— or, in that case, $5$.", ", or otherwise 5.", "(or in the other case $5$)."):
        response = "The answer is $\\boxed{4}$ " + tail
        assert not math_score(response, "4") and not math_score(response, "5"), tail
    assert math_score("The answer is $\\boxed{4}$, or, in either case, $4$.", "4")
    assert math_score("The answer is $\\boxed{4}$, or otherwise the points would coincide.", "4")


def test_a_connector_in_another_clause_derives_nothing():
    """After `</think>`, `The sum is 5, which is odd, and the product is 6.` read as 6 (the "which is" of a remark on
    5 read as deriving 6 from it): a "so" / "which is" derives the last value only in its own clause, with no "and"
    or comma between them; two quantities stay no answer, `Each side is 3, so the perimeter is 12.` is 12."""
    think = "<think>\nWorking it out.\n</think>\n\n"
    for ending in (
        "The sum is 5, which is odd, and the product is 6.",
        "The sum is 5, so it is odd; the product is 6.",
    ):
        assert not math_score(think + ending, "6"), ending
    assert math_score(think + "Each side is 3, so the perimeter is 12.", "12")
    assert math_score(think + "In total it takes 3 hours, which is 180 minutes.", "180")


def test_a_measure_after_a_sentence_that_concludes_nothing_is_the_answer():
    """After `</think>`, `The walk is 17 km.` then `The walk takes 204 minutes.` read as 17 (the measure taken for a
    remark on the sentence before it, whose value was read): a summary's steps state values before the last one,
    so only a sentence that concludes (names the answer, opens with "So", names a result before a colon) makes the
    measure after it a remark."""
    think = "<think>\nWorking it out.\n</think>\n\n"
    for ending in (
        "The walk is 17 km.\n\nThe walk takes 204 minutes.",
        "The speed is 5 km/h. The walk takes 204 minutes.",
    ):
        assert math_score(think + ending, "204") and not math_score(think + ending, "17"), ending
    assert not math_score(think + "Thus 17 students passed. Grading took 3 hours.", "3")


def test_the_box_in_another_unit_under_a_condition_restates_it():
    """`The answer is $\\boxed{2}$ hours, or $120$ minutes in that case.` (and `, or 120 minutes if you prefer`) was
    wrong for 2 once a condition after a unit made a hedge: a value that is the box's own amount in another unit
    (`presentation.unit_scale`) restates it, whatever follows; another amount under a condition stays a hedge."""
    for tail in ("or $120$ minutes in that case.", "or 120 minutes if you prefer.", "or 120 min if needed."):
        assert math_score("The answer is $\\boxed{2}$ hours, " + tail, "2"), tail
    assert not math_score("The answer is $\\boxed{2}$ hours, or 3 hours if it rains.", "2")
    assert not math_score("The answer is $\\boxed{2}$ hours, or 150 minutes if it rains.", "2")


def test_a_remark_naming_the_value_it_rejects_drops_it():
    """`Answer: x = 3 or x = -2 (-2 is rejected)` was a hedge (wrong for 3): a remark that names the value before it
    and rejects it (`(-2 is rejected)`, `(x = -2 is extraneous)`) drops it as `(rejected)` does; one naming another
    value (`3 or -2 (3 is rejected)`, a muddle) drops nothing."""
    q = "We solve the equation step by step.\n\nAnswer: "
    for answer in ("x = 3 or x = -2 (-2 is rejected)", "x = 3 or x = -2 (x = -2 is extraneous)"):
        assert math_score(q + answer, "3") and not math_score(q + answer, "-2"), answer
    assert not math_score(q + "3 or -2 (3 is rejected)", "3") and not math_score(q + "3 or -2 (3 is rejected)", "-2")


def test_values_a_sentence_derives_from_are_no_other_answers():
    """After `</think>`, `Since the side is 4, the area is 16.` and `The side is 4, hence the area is 16, and the
    perimeter is 16.` were no answer (two different values stated): a value in a clause opened by "since" or
    "because" is a premise, and a "so" counts when a statement follows it in its clause (the value it derives may
    be stated again after it); `The side is 4, hence the area is 16, and the perimeter is 20.` stays no answer."""
    think = "<think>\nWorking it out.\n</think>\n\n"
    for ending in (
        "Since the side is 4, the area is 16.",
        "The side is 4, hence the area is 16, and the perimeter is 16.",
        "Because each side is 4, the area is 16.",
    ):
        assert math_score(think + ending, "16") and not math_score(think + ending, "4"), ending
    assert not math_score(think + "The side is 4, hence the area is 16, and the perimeter is 20.", "20")
    assert not math_score(think + "The sum is 5, which is odd, and the product is 6.", "6")


def test_boxed_parts_after_are_and_a_colon_are_not_added():
    """`The two answers are: $\\boxed{2}$ hours and $\\boxed{30}$ minutes.` was right for 150 (a colon after "are"
    hid the plural verb): the colon is passed over."""
    assert not math_score("The two answers are: $\\boxed{2}$ hours and $\\boxed{30}$ minutes.", "150")
    assert math_score("The two answers are: $\\boxed{2}$ hours and $\\boxed{30}$ minutes.", "2, 30")


def test_a_remark_saying_the_value_cannot_be_so_rejects_it():
    """`Answer: x = 3 or x = -2 (impossible to be negative)` was a hedge once `impossible to decide` was no rejection
    (wrong for 3; right before): only "impossible" / "not possible" before a verb of knowing (`to decide`, `to say`,
    `to tell`, `to be sure`) is about the answerer; before another verb it rejects the value."""
    q = "We solve the equation step by step.\n\nAnswer: "
    for answer in ("x = 3 or x = -2 (impossible to be negative)", "3 or -2, which is impossible to satisfy"):
        assert math_score(q + answer, "3") and not math_score(q + answer, "-2"), answer
    for answer in ("3 or 5 (impossible to tell)", "3 or 5, but it is not possible to be sure"):
        assert not math_score(q + answer, "3"), answer


def test_a_result_named_with_of_before_a_colon_after_think_is_read():
    """After `</think>`, `Total number of ways: 1,260` and `Sum of all such bases: 70` were no answer (the phrase
    before the colon had to end in a word for a result): a word for a result and "of" with up to three words after
    it names one too; a clause before the colon (`Let me count the number of ways: 12`) still does not."""
    think = "<think>\nWorking it out.\n</think>\n\n"
    for ending, truth in (("Total number of ways: 1,260", "1260"), ("Sum of all such bases: 70", "70"),
                          ("The number of valid arrangements: 42.", "42")):  # fmt: skip
        assert math_score(think + ending, truth) and not math_score(think + ending, "7"), ending
    assert not math_score(think + "Let me count the number of ways: 12", "12")
