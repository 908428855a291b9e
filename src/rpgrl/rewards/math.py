"""Math answer scoring: the authors' exact rule (`strict`) and symbolic equivalence (`equiv`), both bounded in time.

`math_score(response, ground_truth, mode)` is the one verifier behind the `math` / `math01` rewards and `rpgrl eval`.

* `strict` reproduces `verl/utils/reward_score/math_dapo.py` of the official RPG repository (spec 7.6): the last
  300 characters, the last `Answer: ...` match, the Minerva/lm-eval-harness normalisation
  (https://github.com/EleutherAI/lm-evaluation-harness, `tasks/hendrycks_math/utils.py`), string equality.
  Pure `re`, no extra dependency: 0.5 and 1/2 differ, a bare `\\boxed{}` is wrong. Use it to reproduce the paper.
* `equiv` judges the final answer by mathematical equivalence through `math-verify` (the `math` extra): see
  `extract_final_answer` for which answer is judged, `rpgrl.rewards._mathverify` for the time bound.

Not handled here: stripping a decoded EOS string (the caller decodes with `skip_special_tokens=True`), the overlong
penalty (a trainer concern), majority voting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rpgrl.rewards import Reward, register_reward

Mode = Literal["strict", "equiv"]
MODES: tuple[str, ...] = ("strict", "equiv")

# ---------------------------------------------------------------------------------------------------------------
# strict: the authors' rule (spec 7.6), character for character
# ---------------------------------------------------------------------------------------------------------------

STRICT_WINDOW = 300  # characters of the response tail the authors look at
INVALID = "[INVALID]"  # the authors' prediction when no "Answer:" line is found
ANSWER_RE = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)

# spec 7.6 step 3.2, applied in this order with str.replace
_SUBSTITUTIONS = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
# spec 7.6 step 3.3, deleted in this order (units, filler words, spacing macros)
_REMOVED = (
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue", "points",
    "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges", "students",
    "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3",
    "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots",
)  # fmt: skip
# spec 7.6 steps 3.4-3.6. No DOTALL: like the original, `.` stops at a newline, so each line is rewritten alone.
_FIRST_DOLLAR_PAIR = re.compile(r"(.*?)(\$)(.*?)(\$)(.*)")  # whole line -> "$<first pair's content>$"
_UNWRAP_SHORTEST = tuple(re.compile(rf"\\{cmd}\{{(.*?)\}}") for cmd in ("text", "textbf", "overline"))
_UNWRAP_BOXED = re.compile(r"\\boxed\{(.*)\}")  # longest match
_FRAC_SHORTHAND = re.compile(r"frac([^{])(.)")  # \frac12 -> \frac{1}{2}
_SQRT_SHORTHAND = re.compile(r"sqrt([^{])")  # \sqrt3 -> \sqrt{3}


def normalize_answer(answer: str) -> str:
    """The authors' answer normalisation (spec 7.6 step 3), applied to predictions and ground truths alike.

    >>> normalize_answer("x = \\\\frac12")
    '\\\\frac{1}{2}'
    >>> normalize_answer("1,000 dollars")
    '1000'
    """
    s = answer.split("=")[-1]
    for old, new in _SUBSTITUTIONS:
        s = s.replace(old, new)
    for junk in _REMOVED:
        s = s.replace(junk, "")
    s = _FIRST_DOLLAR_PAIR.sub(r"$\3$", s)
    for pattern in _UNWRAP_SHORTEST:
        s = pattern.sub(r"\1", s)
    s = _UNWRAP_BOXED.sub(r"\1", s)
    s = _FRAC_SHORTHAND.sub(r"frac{\1}{\2}", s)
    s = _SQRT_SHORTHAND.sub(r"sqrt{\1}", s)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s.strip()


def extract_strict(response: str) -> str:
    """The authors' raw prediction: the last `Answer: ...` match in the last 300 characters, else `[INVALID]`."""
    matches = ANSWER_RE.findall(response[-STRICT_WINDOW:])
    return matches[-1] if matches else INVALID


def strict_correct(response: str, ground_truth: str) -> bool:
    """spec 7.6: normalised last `Answer:` prediction == normalised ground truth, as strings.

    >>> strict_correct("... so the total is 540.\\nAnswer: $540$", "540")
    True
    >>> strict_correct("Answer: 0.5", "\\\\frac{1}{2}")  # no numeric equivalence in strict mode
    False
    """
    return normalize_answer(extract_strict(response)) == normalize_answer(ground_truth)


# ---------------------------------------------------------------------------------------------------------------
# the public verifier
# ---------------------------------------------------------------------------------------------------------------


def math_score(response: str, ground_truth: str, mode: Mode = "equiv", *, timeout: float = 1.0) -> bool:
    """True iff `response` answers `ground_truth` correctly under `mode` ("strict" or "equiv").

    Never raises for anything a model can write: a malformed, unparseable or pathological answer is simply wrong,
    judged within `timeout` seconds (equiv mode). Nothing in `response` is ever executed.

    >>> math_score("Answer: 540", "540", mode="strict")
    True
    """
    if mode == "strict":
        return strict_correct(response, ground_truth)
    if mode == "equiv":
        raise NotImplementedError("equiv mode lands in the next commit")
    raise ValueError(f"unknown math scoring mode {mode!r}; valid: {', '.join(MODES)}")


def has_answer_line(response: str) -> bool:
    """Format check: the last non-empty line is `Answer: <something>`, as the prompt asks (spec 7.5)."""
    lines = [line for line in response.splitlines() if line.strip()]
    return bool(lines) and re.match(r"\s*Answer\s*:\s*\S", lines[-1], re.IGNORECASE) is not None


# ---------------------------------------------------------------------------------------------------------------
# reward functions
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MathReward:
    """A math reward function `(completion, answer) -> Reward`, registered as `math` (+1/-1) and `math01` (1/0).

    value = `correct_value` if correct else `wrong_value`, plus `format_weight * format`. The parts are
    `correct` (1/0) and `format` (1/0, `has_answer_line`), logged as `reward/correct` and `reward/format`; with the
    default `format_weight = 0` the format part is only logged. Change the mode with `dataclasses.replace`:

    >>> from dataclasses import replace
    >>> strict = replace(MATH_REWARD, mode="strict")
    >>> strict("Answer: 7", "7").value, strict("\\\\boxed{7}", "7").value
    (1.0, -1.0)
    """

    mode: Mode = "equiv"
    correct_value: float = 1.0
    wrong_value: float = -1.0
    format_weight: float = 0.0
    timeout: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown math scoring mode {self.mode!r}; valid: {', '.join(MODES)}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout}")

    def __call__(self, completion: str, answer: str) -> Reward:
        correct = bool(math_score(completion, answer, self.mode, timeout=self.timeout))
        fmt = 1.0 if has_answer_line(completion) else 0.0
        value = (self.correct_value if correct else self.wrong_value) + self.format_weight * fmt
        return Reward(value=value, correct=correct, parts={"correct": float(correct), "format": fmt})


MATH_REWARD = register_reward("math")(MathReward())
MATH01_REWARD = register_reward("math01")(MathReward(correct_value=1.0, wrong_value=0.0))
