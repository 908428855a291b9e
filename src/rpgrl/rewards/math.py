"""Math answer scoring: the authors' exact rule (`strict`) and symbolic equivalence (`equiv`), both bounded in time.

`math_score(response, ground_truth, mode)` is the one verifier behind the `math` / `math01` rewards and `rpgrl eval`.

* `strict` reproduces `verl/utils/reward_score/math_dapo.py` of the official RPG repository (spec 7.6): the last
  300 characters, the last `Answer: ...` match, the Minerva/lm-eval-harness normalisation
  (https://github.com/EleutherAI/lm-evaluation-harness, `tasks/hendrycks_math/utils.py`), string equality.
  Pure `re`, no extra dependency: 0.5 and 1/2 differ, a bare `\\boxed{}` is wrong. Use it to reproduce the paper.
* `equiv` judges the final answer by mathematical equivalence through `math-verify` (the `math` extra): see
  `extract_final_answer` for which answer is judged, `rpgrl.rewards.hedges` for whether it commits to one value
  (`is_hedge`), `rpgrl.rewards.presentation` for what is stripped before comparing (`clean_answer`),
  `rpgrl.rewards._mathverify` for the time bound.

Not handled here: stripping a decoded EOS string (the caller decodes with `skip_special_tokens=True`), the overlong
penalty (a trainer concern), majority voting.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from rpgrl.rewards import Reward, register_reward
from rpgrl.rewards.hedges import (
    _MANY_VALUES,
    alternative_to_label,
    box_run,
    corrects,
    is_hedge,
    values_offered,
    without_rejected,
)
from rpgrl.rewards.notation import bracket_end
from rpgrl.rewards.presentation import (
    _DELIMITERS,
    _END_MARKS,
    _GOLD_CHOICE,
    _SENTENCE_END,
    MAX_ANSWER_CHARS,
    MAX_NESTING,
    _boxed_contents,
    _boxes,
    _is_unit,
    clean_answer,
    compound_amount,
    unit_scale,
)

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
# spec 7.6 steps 3.4-3.6, written as per-line string scans that give exactly what the original regexes give:
#   re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", r"$\3$", s)   -> _first_dollar_pair
#   re.sub(r"\\text\{(.*?)\}", r"\1", s)            -> _unwrap_shortest(s, "\\text{")  (also textbf, overline)
#   re.sub(r"\\boxed\{(.*)\}", r"\1", s)            -> _unwrap_boxed
# No DOTALL there: `.` stops at a newline, so each line is rewritten alone. The regexes retry from every start
# position and scan to the line's end each time, which is quadratic in a long ground truth (1e5 digits: minutes);
# these scans are linear. tests/rewards/test_math.py checks them against the regexes on random strings.
_UNWRAP_PREFIXES = ("\\text{", "\\textbf{", "\\overline{")
_FRAC_SHORTHAND = re.compile(r"frac([^{])(.)")  # \frac12 -> \frac{1}{2}
_SQRT_SHORTHAND = re.compile(r"sqrt([^{])")  # \sqrt3 -> \sqrt{3}


def _first_dollar_pair(s: str) -> str:
    """A line with two or more `$` becomes `$<text between its first two $>$`; other lines are kept."""
    lines = s.split("\n")
    for i, line in enumerate(lines):
        parts = line.split("$", 2)
        if len(parts) >= 3:
            lines[i] = f"${parts[1]}$"
    return "\n".join(lines)


def _unwrap_shortest(s: str, prefix: str) -> str:
    """`prefix...}` -> `...` up to the first `}` on the line, left to right, non-overlapping."""
    if prefix not in s:
        return s
    lines = s.split("\n")
    for i, line in enumerate(lines):
        out, pos = [], 0
        while (start := line.find(prefix, pos)) >= 0:
            end = line.find("}", start + len(prefix))
            if end < 0:  # no `}` left on the line: no later prefix can match either
                break
            out += (line[pos:start], line[start + len(prefix) : end])
            pos = end + 1
        lines[i] = "".join(out) + line[pos:]
    return "\n".join(lines)


def _unwrap_boxed(s: str) -> str:
    """`\\boxed{...}` -> `...` from the line's first `\\boxed{` to its last `}` (the greedy match)."""
    if "\\boxed{" not in s:
        return s
    lines = s.split("\n")
    for i, line in enumerate(lines):
        start, end = line.find("\\boxed{"), line.rfind("}")
        if 0 <= start and start + 7 <= end:
            lines[i] = line[:start] + line[start + 7 : end] + line[end + 1 :]
    return "\n".join(lines)


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
    s = _first_dollar_pair(s)
    for prefix in _UNWRAP_PREFIXES:
        s = _unwrap_shortest(s, prefix)
    s = _unwrap_boxed(s)
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
# equiv: which answer is judged, and the cheap guards in front of math-verify
# ---------------------------------------------------------------------------------------------------------------

MAX_POWER_DIGITS = 10_000  # a^b with numeric a, b and more digits than this is judged wrong (C-level bigint pow)
MAX_FACTORIAL = 100_000  # n! with a larger literal n is judged wrong

MAX_BELOW_LINES = 8  # an `Answer:` label with no answer on its line: read at most this many lines below it
# an `Answer:` label as models write it: also `**Answer**:` and `__Answer__:` (markdown closing before the colon)
_LABEL = re.compile(r"Answer\s*(?:(?:\*\*|__)\s*)?:", re.IGNORECASE)  # no two \s* side by side: linear
_INTEGER = re.compile(r"-?\d{1,300}")


def extract_final_answer(response: str) -> str | None:
    """The one answer equiv mode judges, from `judged_text(response)` (the text after the last `</think>` when an
    answer with a value can be read there; the reasoning before it is not the answer). The last answer counts:
    - the last `Answer: ...` label that starts a line (the format the prompt asks for, spec 7.5: `Answer:`,
      `**Final Answer:**`, `### Answer:`) or sits inside a sentence with an answer-shaped value after it ("so the
      corrected answer: 540"); an in-sentence label followed by prose ("to find the answer: we first ...") or by a
      check ("the answer: 540 / 4 = 135") is no answer, nor is a label inside a box;
    - unless a `\\boxed{}` follows that label's answer (a correction: `Answer: 12 ... wait ... \\boxed{13}` is
      judged as 13; so does an answer sentence ending the response after a correction, `... wait, I forgot ..., so
      the answer is 13.`), or there is no label: then the last box, with the boxes right before it that only a
      separator parts from it (`\\boxed{2}$ and $\\boxed{3}`: one answer; `\\boxed{4} or \\boxed{5}`: a hedge), and
      the rest of its sentence when that offers another value or an open range (`\\boxed{12} or 13`, `or more`: a
      hedge), and a value with "or" right before the box (`4 or \\boxed{5}`: a hedge), and the answer before an
      `Alternatively, ...` paragraph or sentence that ends in the box (a hedge; `rpgrl.rewards.hedges`);
    - with neither, a "the (final) answer is ..." sentence with an answer-shaped value that ends the response
      (nothing after it but `I hope it is correct.`: not cut or retracted reasoning), or one that names the answer
      after its value ("So $x = 3$ is the only valid answer."); after `</think>`, a plain sentence stating a value
      that ends the response too ("The number of valid arrangements is 42.", `_stated_plainly`); else None (wrong).
    A box that holds no value (`\\boxed{}`, a check mark) is no answer.
    At most MAX_CANDIDATES labels with a value after them are looked at, from the last.

    A hedge inside the final answer ("Answer: 4 or 5", "Answer: \\boxed{4}, \\boxed{5}") is judged as a whole and
    so never equals a single value.

    >>> extract_final_answer("so x = \\\\boxed{4}.\\nAnswer: 5")
    '5'
    >>> extract_final_answer("hence $\\\\boxed{\\\\frac{1}{2}}$")
    '\\\\frac{1}{2}'
    """
    answer = _final_answer_raw(response)
    return None if answer is None else answer.strip()


MAX_CANDIDATES = 64  # labels with a value after them looked at, from the last (prose-only ones cost nothing)
_VALUE = re.compile(r"[\d$\\]")  # what an answer holds and prose does not: a digit, math, a LaTeX command
# an answer as a sentence's label gives it: a value first (after an optional `x =` or `x \in`; a sign before a number
# or a command: `-\frac12` was no answer), no further `=` (not a check such as `540 / 4 = 135`)
_ANSWER_SHAPED = re.compile(r"(?:[A-Za-z]\w*\s*(?:=|\\in(?![A-Za-z]))\s*)?(?:[-+]?(?:\.?\d|\\)|[(\[{])[^=]*")


def judged_text(response: str) -> str:
    """The part of `response` whose answer is judged: the text after the last `</think>` when an answer can be read
    there (the reasoning before it is not the answer), else the whole response."""
    return _judged(response)[0]


def _judged(response: str) -> tuple[str, str | None]:
    """(`judged_text(response)`, the raw answer read there), each text read once."""
    think = response.rfind("</think>")
    if think >= 0:
        tail = response[think + len("</think>") :]
        answer = _answer_in(tail)
        answer = _stated_plainly(tail) if answer is None else answer
        if answer is not None and _VALUE.search(answer):
            return tail, answer
    return response, _answer_in(response)


# a value stated by a verb in a plain sentence (`The number of valid arrangements is 42.`, `There are 113 ways to
# draw the segments.`, `The minimum value is $-4$.`, `The answer should be 42.`), a verb of measure too (`The walk
# takes 204 minutes.`, `The ticket costs 12 dollars.`, `The total comes to 45.`): a number, or math holding a digit
_PLAIN_VALUE = (
    r"(?P<value>\$[^$\n]{0,200}?\d[^$\n]{0,200}?\$|[-+]?\d{1,300}(?:,\d{3})*(?:\.\d{1,300})?(?:/\d{1,300})?\\?%?)"
    r"(?![\w$%-])"  # a number whole, with its percent sign (not `3-dimensional`, `25%` read as 25)
)
_PLAIN_STATEMENT = re.compile(
    r"(?P<there>(?<![A-Za-z])there\s+)?(?<![A-Za-z])(?:is|are|equals|was|were|(?:should|must)\s+be|(?P<measure>takes"
    r"|took|costs?|weigh(?:s|ed)|measure(?:s|d)|totals|(?:comes|came|amounts)\s+to))\s+(?:equal\s+to\s+)?"
    + _PLAIN_VALUE,
    re.IGNORECASE,
)
# a result named before a colon and its value (`The final count: 45`, `Total: 45`, `The walking time: 204 minutes`):
# a short noun phrase ending in a word for a result, or in one and "of" with up to three words (`Total number of
# ways: 1,260`) (a determiner only first: not `Check the count: 45`), not a clause (`Let me think: 42`)
_RESULT_NOUN = (
    r"(?:count|total|sum|result|value|number|product|difference|quotient|remainder|area|perimeter|volume|length"
    r"|distance|time|probability|minimum|maximum|cost|price|amount|ratio|score|age|speed)"
)
_NAMED_RESULT = re.compile(
    r"(?:(?:so|thus|hence|therefore|finally)\s*,?\s+)?(?:(?:the|our|my)\s+)?(?:(?!(?:the|a|an|our|my)\s)[A-Za-z-]+\s+)"
    rf"{{0,3}}?{_RESULT_NOUN}(?:\s+of(?:\s+[A-Za-z-]+){{1,3}}?)?\s*:\s*{_PLAIN_VALUE}"
    r"(?:\s+(?P<unit>[A-Za-z][A-Za-z /]{0,40}))?",
    re.IGNORECASE,
)

# a word that derives what follows from what a sentence stated before it (`Each side is 3, so the perimeter is 12.`,
# `it takes 3 hours, which is 180 minutes`): the values before it are no other answers
_CONSEQUENCE = re.compile(
    r"(?<![A-Za-z])(?:so|thus|hence|therefore|which\s+(?:is|means|gives)|giving|making|meaning)(?![A-Za-z])",
    re.IGNORECASE,
)

# a clause opened by "since" or "because" (`Since the side is 4, the area is 16.`): a premise, up to its comma
_PREMISE = re.compile(r"(?<![A-Za-z])(?:since|because)(?![A-Za-z])[^,;]*", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"[,;]|(?<![A-Za-z])(?:and|but)(?![A-Za-z])", re.IGNORECASE)  # between two clauses

# a sentence that opens with its conclusion (`So the walk takes 204 minutes.`, `In total, it costs 12 dollars.`)
_CONCLUDING = re.compile(
    r"\s*(?:so|thus|hence|therefore|altogether|overall|finally|in\s+(?:total|all|the\s+end))(?![A-Za-z])",
    re.IGNORECASE,
)

# a text after `</think>` that is a value alone, once cleaned (`**42**`, `$42$`, `42.`)
_LONE_VALUE = re.compile(r"[-+]?\d{1,300}(?:,\d{3})*(?:\.\d{1,300})?(?:/\d{1,300})?")


def _stated_plainly(tail: str) -> str | None:
    """The value of a plain sentence (`_PLAIN_STATEMENT`) ending the text after `</think>` (`tail`), read where
    nothing else there gives an answer: the reasoning is above it, so the sentence closing its summary states the
    answer ("The number of valid arrangements is 42."). Its last stated value, nothing after it but words (`, since
    each block can be rotated`; after "there are", a noun phrase: `9 such dates in 2023`); not a question, nor a
    sentence that goes on with another value or math (`is 42 minus $3$`), nor one stating two different values
    (`The sum is 5, and the product is 6.`: two quantities, no one answer; those before a "so" are what the last is
    derived from, `_CONSEQUENCE`), nor a verb of measure right after a conclusion stating another value (`So it is
    42. This took 3 tries.`: a remark on it, the sentence before it read instead; `_remark_after`). A text that is
    a value alone (`**42**`, `_LONE_VALUE`) is that value; a result named before a colon (`The final count: 45`,
    `_NAMED_RESULT`) too."""
    text = _END_MARKS.sub("", tail[-4 * MAX_ANSWER_CHARS :].rstrip())
    if len(tail) <= 4 * MAX_ANSWER_CHARS and _LONE_VALUE.fullmatch(clean_answer(text)):
        return text
    before, _, line = text.rpartition("\n")
    sentences = _SENTENCE_END.split(line)
    sentence = sentences[-1]
    if (found := _sentence_value(sentence)) is None:
        return None
    value, measure = found
    # a measure after a conclusion stating another value remarks on it (`So it is 42. This took 3 tries.`): that
    # sentence's value is the answer
    previous = sentences[-2] if len(sentences) > 1 else _SENTENCE_END.split(before.rstrip())[-1]
    if measure and _remark_after(_END_MARKS.sub("", previous.strip()), sentence, value):
        earlier = _sentence_value(_END_MARKS.sub("", previous.strip()))
        return earlier[0] if earlier is not None and not earlier[1] else None
    return value


def _remark_after(previous: str, sentence: str, value: str) -> bool:
    """Whether `sentence`, stating `value` with a verb of measure, remarks on the sentence before it (`previous`):
    that one concludes (names the answer, opens with a conclusion, or names a result before a colon: `So the minimum
    is 8.`, `The answer is 12.`, `The final count: 45`) with another number, and `sentence` opens with no
    conclusion of its own (`So the walk takes 204 minutes.`), unless `previous` names the answer. After a sentence
    that only states a value (`The walk is 17 km.`), a measure is the answer, as a summary's last step."""
    names_answer = re.search(r"(?<![A-Za-z])answer(?![A-Za-z])", previous, re.IGNORECASE) is not None
    if _CONCLUDING.match(sentence) and not names_answer:
        return False
    if not (names_answer or _CONCLUDING.match(previous) or _NAMED_RESULT.fullmatch(previous)):
        return False
    numbers = re.findall(r"\d+(?:\.\d+)?", previous)
    return _states_another(previous, value) or (bool(numbers) and clean_answer(value) not in numbers)


def _sentence_value(sentence: str) -> tuple[str, bool] | None:
    """(value, whether a verb of measure states it) of a sentence naming a result before a colon (`_NAMED_RESULT`)
    or stating it plainly (`_statement`), else None."""
    if (named := _NAMED_RESULT.fullmatch(sentence)) is not None:
        unit = named.group("unit")
        return (named.group("value"), False) if unit is None or _is_unit(unit) else None
    m = _statement(sentence)
    if m is None or not _answer_shaped(m.group("value")):
        return None
    return m.group("value"), m.group("measure") is not None


def _statement(sentence: str) -> re.Match | None:
    """The match of `_PLAIN_STATEMENT` that gives `sentence`'s value (`_stated_plainly`), else None: its last, nothing
    after it but words, the only value it states but for those it derives it from (`_derived_from`)."""
    said = _derived_from(sentence, list(_PLAIN_STATEMENT.finditer(sentence)))
    if not said or sentence.endswith("?") or len({clean_answer(m.group("value")) for m in said}) > 1:
        return None
    m, after = said[-1], sentence[said[-1].end() :]
    if re.search(r"[$\\]", after) or (m.group("there") is None and re.search(r"\d", after)):
        return None
    return m


def _derived_from(sentence: str, said: list[re.Match]) -> list[re.Match]:
    """The statements `said` of `sentence` but those its last value is derived from: before a "so" (`_CONSEQUENCE`)
    that a statement follows in its clause (`Each side is 3, so the perimeter is 12`; not `5, which is odd, and the
    product is 6`: a remark on 5), or in a clause opened by "since" or "because" (`Since the side is 4, the area is
    16`: a premise)."""
    if not said:
        return said
    cut = 0
    for c in _CONSEQUENCE.finditer(sentence):
        first = next((m.start() for m in said if m.start() >= c.start()), None)  # (`which is 180`: its own "is")
        if first is not None and not _CLAUSE_BREAK.search(sentence, min(c.end(), first), first):
            cut = c.start()
    premises = [p.span() for p in _PREMISE.finditer(sentence)]
    return [m for m in said if m.start() >= cut and not any(a <= m.start() < b for a, b in premises)]


def _states_another(sentence: str, value: str) -> bool:
    """Whether `sentence` states a value other than `value` plainly (`_PLAIN_STATEMENT`, `_NAMED_RESULT`)."""
    named = _NAMED_RESULT.fullmatch(_END_MARKS.sub("", sentence.strip()))
    stated = [m.group("value") for m in _PLAIN_STATEMENT.finditer(sentence)] + ([named.group("value")] if named else [])
    return any(clean_answer(v) != clean_answer(value) for v in stated)


def _final_answer_raw(response: str) -> str | None:
    return _judged(response)[1]


def _answer_in(text: str) -> str | None:
    boxes = _boxes(text)
    inside = _inside_boxes(boxes)
    boxes = [b for b in boxes if not _NO_VALUE.fullmatch(b[1])]  # `\boxed{}`, `\boxed{\checkmark}`: no answer
    label = _last_label(text, inside)
    if label is not None and not (boxes and boxes[-1][0] >= label[1]):
        # no box after the label's answer (a later box is a correction: the last answer counts), nor a sentence that
        # corrects it (`Answer: 120`, then `Wait, I forgot ..., so the answer is 24.`)
        return _corrected_in_a_sentence(text, label[1]) or label[0]
    if boxes:  # (after a label, a box may offer an alternative to its answer: `Answer: 4` then `Alternatively, ...`)
        offered = alternative_to_label(text, label, boxes) if label is not None else None
        j, c = boxes[-1]
        return offered or _corrected_in_a_sentence(text, j + len(c) + 2) or box_run(text, boxes)
    labels = list(_LABEL.finditer(text))
    if labels:  # a label with only prose after it: judged as it is (wrong, unless the prose is the answer)
        return _label_content(text, labels[-1].end())[0]
    tail = text[-4 * MAX_ANSWER_CHARS :]
    return _answer_is_value(tail) or _value_is_answer(tail)


def _corrected_in_a_sentence(text: str, end: int) -> str | None:
    """The value of an answer sentence ending the response after the last answer, a box or a label's, ending at
    `end` (`_answer_is_value`, `_value_is_answer`) when the text after it corrects it (`hedges.corrects`:
    `\\boxed{7}` or `Answer: 7`, then `Wait, I forgot the divisor 1, so the answer is 8.`: the last answer counts),
    else None."""
    after = text[end:]
    tail = after[-4 * MAX_ANSWER_CHARS :]
    value = _answer_is_value(tail) or _value_is_answer(tail)
    return value if value is not None and corrects(after) else None


def _answer_is_value(tail: str) -> str | None:
    """The value of a last "the (final) answer is 540." sentence with an answer-shaped value that ends the response
    (`tail`: its end), else None."""
    said = list(_ANSWER_IS_SENTENCE.finditer(tail))
    if not said:
        return None
    sentence, *after = _SENTENCE_END.split(tail[said[-1].end() :], maxsplit=1)
    content, _, rest = sentence.partition("\n")
    ends = _CLOSING.fullmatch(rest + "".join(after)) is not None  # not "540. But wait, ..." nor cut reasoning
    return content if ends and _answer_shaped(content) else None


def _value_is_answer(tail: str) -> str | None:
    """The value of a last "So $x = 3$ is the only valid answer." sentence (`_IS_THE_ANSWER`: the answer named after
    its value) with an answer-shaped value that ends the response (`tail`: its end), else None. The value is what
    the sentence says before "is", after a connective (`..., so $x = 3$`, `We see that 540`)."""
    said = list(_IS_THE_ANSWER.finditer(tail))
    if not said or _CLOSING.fullmatch(tail, said[-1].end()) is None:
        return None
    sentence = _SENTENCE_END.split(tail[: said[-1].start()].rsplit("\n", 1)[-1])[-1]
    content = _BEFORE_VALUE.split(sentence)[-1]
    return content if _answer_shaped(content) else None


# no `Answer:` label and no box: the answer stated in a sentence ("Therefore, the final answer is $540$.")
_ANSWER_IS_SENTENCE = re.compile(r"\banswer\s+is\b:?[ \t]*", re.IGNORECASE)
_CLOSING = re.compile(r"\s*(?:I hope it is correct\.?\s*)?", re.IGNORECASE)  # what may follow the last answer
# the answer named after its value, ending a sentence: "$x = 3$ is the only valid answer.", "540 is the correct
# answer to the problem.", "$n = 12$ is the smallest positive integer solution." (one space run before "is": no
# retry inside a long run of spaces)
_IS_THE_ANSWER = re.compile(
    r"(?<!\s)\s+is\s+(?:the|our)\s+(?:(?:only|final|correct|right|unique|valid|desired|required|positive|real|integer"
    r"|smallest|largest|least|greatest)\s+){0,3}(?:answer|solution)(?:\s+to\s+(?:the|this)\s+(?:problem|question|equation))?\s*[.!]?",
    re.IGNORECASE,
)
# what sets off that value in its sentence: a connective opening it (`So`, `Thus,`) or after a comma (`, so`, `,
# and`), "that" (`We see that 540`), a semicolon or a colon
_BEFORE_VALUE = re.compile(
    r"^\s*(?:so|thus|hence|therefore|then|finally|clearly)(?![A-Za-z]),?\s*"
    r"|,\s*(?:so|thus|hence|therefore|and)\s+|(?<![A-Za-z])that\s+|[;:]\s+",
    re.IGNORECASE,
)
_NO_VALUE = re.compile(r"\s*(?:\\checkmark|\\surd|\u2713|\u2714)?\s*")  # a box that holds no answer


def _last_label(text: str, inside) -> tuple[str, int] | None:
    """(content, end) of the last answer label that gives an answer: one that starts its line, or one inside a
    sentence with an answer-shaped value after it; not a label inside a box (`inside`), nor an in-sentence one
    followed by prose or a check. At most MAX_CANDIDATES labels with a value after them are looked at."""
    looked = 0
    for m in reversed(list(_LABEL.finditer(text))):
        if looked >= MAX_CANDIDATES:
            break
        if inside(m.start()):  # `\\boxed{\\text{Final Answer: } 540}`: the box is the answer
            continue
        line = _starts_line(text, m.start())
        nl = text.find("\n", m.end(), m.end() + 200)
        rest = text[m.end() : nl if nl >= 0 else m.end() + 200]
        if not line and rest.strip() and not _VALUE.search(rest):
            continue  # an in-sentence label followed by prose ("to find the answer: we first ...")
        looked += 1
        content, end = _label_content(text, m.end())
        if line or _answer_shaped(content):
            return content, end
    return None


def _answer_shaped(content: str) -> bool:
    """Whether an in-sentence label's `content` reads as an answer (`540 (after removing it)`, `x = 5`,
    `\\boxed{33}.`), not as a sentence or a check (`for n = 2 we get 6`, `540 / 4 = 135, an integer`)."""
    cleaned = without_remarks(clean_answer(content)) if len(content) <= MAX_ANSWER_CHARS else ""
    return bool(cleaned) and _ANSWER_SHAPED.fullmatch(cleaned) is not None


def _inside_boxes(boxes: list[tuple[int, str]]):
    """A test of whether a position lies inside one of `boxes` (sorted by opening brace), in log time."""
    import bisect

    starts = [j for j, _ in boxes]
    reach, best = [], -1
    for j, c in boxes:  # the furthest closing brace of the boxes opened so far
        best = max(best, j + len(c) + 1)
        reach.append(best)

    def inside(pos: int) -> bool:
        i = bisect.bisect_left(starts, pos) - 1
        return i >= 0 and reach[i] > pos

    return inside


# what may precede an answer label on its line: spaces, markdown (list marks, headings, quotes, emphasis), "Final"
_LINE_START = re.compile(r"[\s#>*_\-]*(?:\d{1,2}[.)]\s*)?(?:(?:the\s+)?final\s+)?(?:\*\*|__)?", re.IGNORECASE)
_LINE_START_CHARS = 40  # at most this much may precede a label on its line (constant work per label)


def _starts_line(text: str, pos: int) -> bool:
    """Whether the answer label at `pos` starts its line (`_LINE_START` before it). Looks back a bounded distance,
    so a response of one long line full of labels costs linear time."""
    lo = max(0, pos - _LINE_START_CHARS)
    start = text.rfind("\n", lo, pos) + 1
    if start == 0 and lo > 0:
        return False
    return _LINE_START.fullmatch(text, start, pos) is not None


def _label_content(text: str, start: int) -> tuple[str, int]:
    """The answer after an `Answer:` label ending at `start`: the rest of its line; when that holds no answer (only
    spaces or markup: `Answer:`, `**Answer:**`, `Answer: $$`, `### Final Answer: \\[`, the answer set on the lines
    below as chat models format it), the lines below up to the first that holds one, with what came before it
    (so `\\[ \\boxed{42}` reads as 42). Raw: only the spaces after the colon are left out. Also returns where
    the answer ends in `text`."""
    lines = text[start : start + 4 * MAX_ANSWER_CHARS].split("\n")
    taken = []
    for line in lines[:MAX_BELOW_LINES]:
        taken.append(line)
        if clean_answer(line):
            break
    content = "\n".join(taken)
    return content.lstrip(" \t"), start + len(content)


def _exponent_groups(s: str) -> list[tuple[str, str]]:
    """(base token, exponent) pairs of `s`: the exponent is a braced group or one token; the base is the number
    or letter run right before `^`."""
    pairs = []
    for m in re.finditer(r"\^", s):
        base = re.search(r"(\d+(?:\.\d+)?|[A-Za-z]+|[)}\]])\s*$", s[: m.start()])
        rest = s[m.end() :].lstrip()
        if rest.startswith("{"):
            exp = rest[1 : (bracket_end(rest, 0) or len(rest) + 1) - 1]
        else:
            exp = re.match(r"\d+|\\?[A-Za-z]+|.?", rest).group(0)
        pairs.append((base.group(1) if base else "", exp))
    return pairs


def reject_reason(answer: str) -> str | None:
    """Why a (cleaned) answer is judged wrong without calling math-verify, or None to go ahead.

    Guards against inputs that could hang the parser or sympy in C code, where no timer can stop them: a very long
    answer, deep nesting, power towers, huge numeric powers and factorials.

    >>> reject_reason("2^{2^{2^{2^{2}}}}"), reject_reason("99999999999^{9999999}"), reject_reason("2^{10}")
    ('power tower', 'numeric power too large', None)
    """
    if len(answer) > MAX_ANSWER_CHARS:
        return "too long"
    depth = deepest = 0
    for ch in answer:
        depth += 1 if ch in "{([" else -1 if ch in "})]" else 0
        deepest = max(deepest, depth)
    if deepest > MAX_NESTING:
        return "nested too deeply"
    for base, exp in _exponent_groups(answer):
        if ("^" in exp or "!" in exp or "binom" in exp) and not re.fullmatch(r"[A-Za-z]+", base):
            return "power tower"  # a numeric tower (2^{2^{2^{9}}}); e^{x^2} and x^{y^z} stay symbolic
        if re.fullmatch(r"\s*\d+\s*", exp) and re.fullmatch(r"\d+(?:\.\d+)?", base):
            if int(exp) * math.log10(max(float(base), 2.0)) > MAX_POWER_DIGITS:
                return "numeric power too large"
        elif re.search(r"\d{6,}", exp):  # x^{1234567}, 10^{1000000}+1: expansion or digits blow up
            return "numeric power too large"
    for m in re.finditer(r"(\d+)\s*!", answer):
        if int(m.group(1)) > MAX_FACTORIAL:
            return "factorial too large"
    if re.search(r"[)}\]]\s*!", answer) and re.search(r"\d{4,}|\^", answer):
        return "factorial of a large expression"
    if "binom" in answer and re.search(r"\d{5,}|\^", answer):
        return "binomial too large"
    return None


def equiv_correct(response: str, ground_truth: str, *, timeout: float = 1.0) -> bool:
    """equiv mode. A final answer (`extract_final_answer`) that hedges (`is_hedge`: `540 or 541`, `$540$, $541$`
    for 540) is wrong unless every value it offers equals the ground truth (one value written twice: `\\boxed{12}`
    then `\\boxed{12.0}`, `$\\frac{1}{2}$ or $0.5$`; `_offers_one_value`). An answer that states a value and then
    only restates it (`540 (37 + 503)`, `540, since 540 = 4 \\cdot 135`; `_restated_value`) is that value; a value
    it rejects itself is no value offered (`x = 3 or x = -2 (rejected)` is `x = 3`; `hedges.without_rejected`).
    Otherwise it is correct iff any of, in order:

    1. its authors' normalisation equals the ground truth's (so strict-correct implies equiv-correct where both
       read the same answer, hedges aside: the authors' rules read a hedge's first `$...$` pair or its last `=`);
    2. the cleaned strings (`clean_answer`) are equal, or their normalisations are;
    3. both are integers and equal as integers;
    4. it passes `reject_reason` and math-verify proves it equivalent to the ground truth within `timeout` s;
    and 2-4 again with what a grader reads past left out (`without_remarks`: `The answer is 113`, `(C) 7`,
    `540 (the remainder)`, `540;`, `12 \\text{ cm}`); last, an answer ending in a percent sign as its number over
    100 (`12.5\\%` for `\\frac{1}{8}`).

    >>> equiv_correct("Answer: 0.5", "\\\\frac{1}{2}")
    True
    """
    answer = _final_answer_raw(response)  # unstripped, exactly as strict mode normalises its own
    # (no shortcut through the authors' rule on the whole text: where it reads another label than this answer, a
    # response was right for two values, `Answer: 42` then `**Answer**: 41`)
    if answer is None or len(answer) > MAX_ANSWER_CHARS:  # before any regex: the authors' rules are quadratic
        return False
    answer = without_rejected(answer)  # `x = 3 or x = -2 (rejected, since x > 0)`: x = 3
    gold = clean_answer(ground_truth)
    budget = _Budget(timeout)  # every math-verify call below shares the one budget
    if (amount := _amount_in_parts(answer)) is not None and not _MANY_VALUES.search(gold):
        return _amount_equivalent(amount, gold, budget)  # `\\boxed{2} hours and \\boxed{30} minutes`: 150 minutes
    if is_hedge(answer, ground_truth):
        return _offers_one_value(answer, gold, budget)
    if normalize_answer(answer) == normalize_answer(ground_truth):
        return True
    pred = clean_answer(answer)
    candidates = [p for p in dict.fromkeys((pred, without_remarks(pred))) if p]
    for p in candidates:  # a restated value is judged alone (`540 (37 + 503)` also reads as 540 x 540)
        if (value := _restated_value(p, budget)) is not None:
            return _cleaned_equivalent(value, gold, budget)
    if any(_cleaned_equivalent(p, gold, budget) for p in candidates) or _same_choice(pred, gold):
        return True
    # a percent for its fraction (`\boxed{12.5\%}` for 1/8): `clean_answer` drops the sign, leaving 12.5
    return _is_percent(answer) and _cleaned_equivalent(f"\\frac{{{pred}}}{{100}}", gold, budget)


def _same_choice(pred: str, gold: str) -> bool:
    """Whether a cleaned answer that opens with an AMC choice and its value (`\\textbf{(C)}\\ 12`, `The answer is
    (C) 12`) names the choice letter that is the ground truth (`without_remarks` keeps the value only), and no other
    choice after it (`(C) 12, (D) 13` offers two)."""
    if (g := _GOLD_CHOICE.fullmatch(gold)) is None or len(pred) > MAX_ANSWER_CHARS:
        return False
    s = pred[m.end() :] if (m := _ANSWER_IS.match(pred)) else pred
    if (c := _CHOICE.match(s)) is None or _CHOICE_LETTER.search(s, c.end()):
        return False
    return _CHOICE_LETTER.search(c.group()).group(1) == g.group(2)


_CHOICE_LETTER = re.compile(r"\(\s*([A-E])\s*\)")


MAX_OFFERED = 8  # a hedge offering more values is wrong without a look


def _offers_one_value(hedge: str, gold: str, budget: _Budget) -> bool:
    """Whether every value a hedge (`is_hedge`) offers equals the cleaned ground truth `gold`: one value written
    more than once is one answer (`\\boxed{12}, \\boxed{12.0}`); a value outside the boxes or math groups, or a
    second value, keeps it wrong (`\\boxed{12} or \\boxed{13}`, `7, $540$, $540.0$`). A percent and its fraction
    are one value too (`$\\boxed{20\\%}$, or $0.2$`, `$\\frac{3}{4}$ or $\\boxed{75\\%}$`), that value either
    way (20 or 0.2 for 20%). Boxed numbers in units of one quantity that name one amount are one answer, right
    in either unit (`\\boxed{5}$ km or $\\boxed{5000}$ m`: `_one_quantity`). An AMC choice with its value and
    that value alone are one answer, the choice (`\\boxed{\\textbf{(C)}\\ 12}`, then `\\boxed{12}`: right for C
    and for 12)."""
    raw = values_offered(hedge)
    if not 2 <= len(raw) <= MAX_OFFERED:
        return False
    values = [clean_answer(v) for v in raw]
    percents = [v for r, v in zip(raw, values, strict=True) if v and _is_percent(r)]

    def equal(v: str, is_percent: bool) -> bool:
        if _cleaned_equivalent(v, gold, budget):
            return True
        if is_percent:  # 50% for 1/2
            return _cleaned_equivalent(f"\\frac{{{v}}}{{100}}", gold, budget)
        # 0.2 written with 20%, which is the truth
        return any(
            _cleaned_equivalent(v, f"\\frac{{{p}}}{{100}}", budget) and _cleaned_equivalent(p, gold, budget)
            for p in percents
        )

    if _one_quantity(raw):  # `\\boxed{5}$ km or $\\boxed{5000}$ m`: one length, right in either unit
        return any(v and equal(v, False) for v in values)
    choices = [v for v in values if _CHOICE.match(v)]  # `(C) 12` and `12`: one answer, the choice with its value
    if choices and len({(_CHOICE_LETTER.search(v).group(1), without_remarks(v)) for v in choices}) == 1:
        if all(v in choices or v == without_remarks(choices[0]) for v in values):
            return _same_choice(choices[0], gold) or equal(without_remarks(choices[0]), False)
    return all(v and equal(v, _is_percent(r)) for r, v in zip(raw, values, strict=True))


# a hedge's value that is a boxed number and its unit after the box (`\boxed{5}$ km`, `$\boxed{120}$ minutes`)
# (or inside it: `\boxed{5\text{ km}}$`, `\boxed{5\ \mathrm{km}}`)
_BOXED_QUANTITY = re.compile(
    r"[\s$]*\\boxed\{\s*(?P<number>-?\d{1,30}(?:\.\d{1,30})?)\s*(?:\\[ ,;!]\s*)*"
    r"(?P<inside>\\(?:text|textrm|mathrm|mbox)\s*\{[^{}]{1,30}\}|[A-Za-z]{1,20})?\s*\}"
    r"[\s$]*(?P<after>.{0,40}?)[\s$.,;]*"
)


def _one_quantity(raw: list[str]) -> bool:
    """Whether a hedge's raw values are boxed numbers in different units of one quantity (`unit_scale`) that name
    one amount (`\\boxed{5}$ km or $\\boxed{5000}$ m`, `\\boxed{2}$ hours, or $\\boxed{120}$ minutes`, the units
    inside the boxes too: `\\boxed{5\\text{ km}}$ or $\\boxed{5000\\text{ m}}`; not `5 km or 500 m`, `3 m or 4 m`)."""
    amounts, scales = set(), set()
    for value in raw:
        m = _BOXED_QUANTITY.fullmatch(value)
        if m is None or bool(m.group("inside")) == bool(m.group("after")):  # one unit, inside the box or after it
            return False
        if (scale := unit_scale(m.group("inside") or m.group("after"))) is None:
            return False
        amounts.add((scale[0], Fraction(m.group("number")) * scale[1]))
        scales.add(scale)
    return len(amounts) == 1 and len(scales) == len(raw)


# a part of an amount written in parts (`\boxed{2}$ hours and`, `\boxed{30\text{ min}}`): a boxed number >= 0,
# its unit inside the box or after it, "and" or a comma after it
_AMOUNT_PART = re.compile(
    r"[\s$]*\\boxed\{\s*(?P<number>\d{1,30}(?:\.\d{1,30})?)\s*(?:\\[ ,;!]\s*)*"
    r"(?:\\(?:text|textrm|mathrm|mbox)\s*\{\s*(?P<inside>[A-Za-z]{1,20})\s*\}|(?P<bare>[A-Za-z]{1,20}))?\s*\}"
    r"[\s$]*(?:\\text\s*\{\s*)?(?P<after>(?!and(?![A-Za-z]))[A-Za-z]{1,20})?\s*\}?[\s$]*"
    r"(?:,?\s*and(?![A-Za-z])|,)?"
)


def _amount_in_parts(answer: str) -> tuple[Fraction, list[Fraction]] | None:
    """(amount, sizes of its units) when the raw `answer` is boxed parts of one amount and nothing else (`\\boxed{2}$
    hours and $\\boxed{30}$ minutes`, as `hedges.box_run` reads them: `presentation.compound_amount`), else None."""
    text, parts, pos = _END_MARKS.sub("", answer.strip()), [], 0
    while pos < len(text) and len(parts) < MAX_OFFERED:
        m = _AMOUNT_PART.match(text, pos)
        units = [u for u in (m.group("inside"), m.group("bare"), m.group("after")) if u] if m else []
        if len(units) != 1 or m.end() == pos:  # one unit each, inside the box or after it
            return None
        parts.append((m.group("number"), units[0]))
        pos = m.end()
    return compound_amount(parts) if pos == len(text) else None


def _amount_equivalent(amount: tuple[Fraction, list[Fraction]], gold: str, budget: _Budget) -> bool:
    """Whether an amount in parts (`_amount_in_parts`) is the cleaned ground truth `gold` in one of the units it is
    written in (`2 hours and 30 minutes`: 150 or 2.5; the question names the unit, the truth does not)."""
    total, sizes = amount
    for size in sizes:
        value = total / size
        latex = (
            str(value.numerator) if value.denominator == 1 else f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
        )
        if _cleaned_equivalent(latex, gold, budget):
            return True
    return False


def _is_percent(value: str) -> bool:
    """Whether a hedge's raw value ends in a percent sign, inside a box or math delimiters (`\\boxed{20\\%}$`)."""
    inner = ", ".join(_boxed_contents(value)) or value
    return re.search(r"%\s*$", _DELIMITERS.sub("", inner).strip().rstrip(".")) is not None


# an answer that states a value, then only restates it, as a grader reads it: `540 (37 + 503)`, `540 (i.e., m + n =
# 37 + 503)`, `540, since 540 = 4 \cdot 135`, `540. Indeed, 540 = 20 * 27`; each side of the restatement with a
# digit is arithmetic equal to the value, the others name it (`m + n`). Not a list (`5, 7`), a tuple, a product
# (`2 (1 + \sqrt{2})`), another value (`540 (m + n = 541)`, `540 (not 541)`) or a remark with prose and numbers.
_STATED = re.compile(r"(?:[A-Za-z]\w*\s*=\s*)?(-?\d+(?:\.\d+)?|-?\\[dt]?frac\{\d+\}\{\d+\})(?=[\s(,.])(.*)", re.S)
_CONNECTIVE = re.compile(
    r"(?:since|because|as|i\.\s?e\.|that is|which is|indeed|note(?: that)?|(?:we can |as a )?(?:check(?:ed|ing)?|"
    r"verif(?:y|ied|ication)))(?![A-Za-z])[\s:,]*",
    re.IGNORECASE,
)
_ARITHMETIC = re.compile(r"(?:[\d\s+\-*/^().{}\[\]]|\\(?:cdot|times|div|[dt]?frac|sqrt|left|right)(?![A-Za-z]))+")
MAX_RESTATED_SIDES = 4
_MOD_SIDE = re.compile(r"(\d{1,300})\s*(?:\\bmod|\\mod|mod)\s*\{?(\d{1,300})\}?")  # 2540 mod 1000: AIME's remainders


def _restated_value(answer: str, budget: _Budget) -> str | None:
    """The value a cleaned `answer` states when the rest only restates it (`_STATED`), else None."""
    m = _STATED.fullmatch(_END_MARKS.sub("", answer)) if len(answer) <= MAX_ANSWER_CHARS else None
    if m is None:
        return None
    value, rest = m.group(1), m.group(2).strip()
    if rest.startswith("(") and bracket_end(rest, 0) == len(rest):  # `540 (37 + 503)`, `540 (i.e., 37 + 503)`
        body = rest[1:-1].strip()
        body = body[c.end() :] if (c := _CONNECTIVE.match(body)) else body
    elif c := _CONNECTIVE.match(rest := rest.lstrip(",.").lstrip()):  # `540, since 540 = 37 + 503`
        body = rest[c.end() :]
    else:
        return None
    sides = [side.strip() for side in body.split("=")]
    numeric = [_remainder(side) for side in sides if re.search(r"\d", side)]
    if not numeric or len(sides) > MAX_RESTATED_SIDES or not all(_ARITHMETIC.fullmatch(x) for x in numeric):
        return None
    return value if all(_cleaned_equivalent(x, value, budget) for x in numeric) else None


def _remainder(side: str) -> str:
    """A restatement's side `a mod b` of two integers as the remainder (`2540 mod 1000` -> `540`), else `side`."""
    m = _MOD_SIDE.fullmatch(side)
    return str(int(m.group(1)) % int(m.group(2))) if m and int(m.group(2)) else side


class _Budget:
    """The math-verify seconds of one judgement, shared by its calls: `timeout` from the first call, once this
    thread's worker is ready. Its one-time start (seconds) is no part of it: on a cold worker the first answer that
    needs a second call (`x \\le 3` for `(-\\infty, 3]`, compared both ways) was judged wrong, then right."""

    def __init__(self, timeout: float) -> None:
        self.timeout, self.end = timeout, None

    def left(self) -> float:
        """Seconds left; the first call waits for the worker (lazily: strict mode needs neither it nor math-verify)."""
        if self.end is None:
            from rpgrl.rewards import _mathverify

            _mathverify.warm_up()  # (a worker killed by a hung answer is replaced: its start is waited for here too)
            self.end = time.monotonic() + self.timeout
        return self.end - time.monotonic()


def _cleaned_equivalent(pred: str, gold: str, budget: _Budget) -> bool:
    """Steps 2-4 of `equiv_correct` on cleaned answers; math-verify while `budget` has time left."""
    if pred == gold or normalize_answer(pred) == normalize_answer(gold):
        return True
    if _INTEGER.fullmatch(pred) and _INTEGER.fullmatch(gold):  # most AIME/AMC cases: no need for sympy
        return int(pred) == int(gold)
    if (scaled := _scaled_number(pred)) is not None:  # 12 \text{ thousand}: 12000
        return _cleaned_equivalent(scaled, gold, budget)
    if reject_reason(pred) is not None or _scaled_in_text(pred):
        return False
    from rpgrl.rewards import _mathverify  # lazily: strict mode needs neither math-verify nor a worker

    left = budget.left()
    if left <= 0:
        return False
    if _mathverify.equivalent(pred, gold, timeout=left):
        return True
    # an inequality for an interval (x \le 3 for (-\infty, 3]): with its defaults math-verify reads a relation as an
    # interval on the ground truth's side only, so the two are compared the other way round too, where the truth is
    # an interval beyond doubt (it reads (1, 2) and {1, 2} as intervals too: 1 < x < 2 is no answer for a pair)
    if not (_RELATION.search(pred) and _INTERVAL.fullmatch(gold)) or (left := budget.left()) <= 0:
        return False
    return _mathverify.equivalent(gold, pred, timeout=left)


# words in text that change the number before them: math-verify drops the text and reads the number alone, so
# `12 \text{ thousand}` (12000), `12 \text{ dozen}` and `12 \text{ squared}` (144) were right for 12
_TEXT_GROUP = re.compile(r"\\(?:text|textrm|textnormal|textit|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
# a multiplier word and the factor it scales by (not quarters: coins too)
_MULTIPLIERS = {
    "ten": Fraction(10), "hundred": Fraction(100), "thousand": Fraction(10**3), "million": Fraction(10**6),
    "billion": Fraction(10**9), "trillion": Fraction(10**12), "dozen": Fraction(12), "lakh": Fraction(10**5),
    "crore": Fraction(10**7), "tenth": Fraction(1, 10), "hundredth": Fraction(1, 100),
    "thousandth": Fraction(1, 10**3), "millionth": Fraction(1, 10**6), "half": Fraction(1, 2),
    "halve": Fraction(1, 2), "third": Fraction(1, 3), "fourth": Fraction(1, 4), "fifth": Fraction(1, 5),
    "sixth": Fraction(1, 6), "seventh": Fraction(1, 7), "eighth": Fraction(1, 8), "ninth": Fraction(1, 9),
}  # fmt: skip
_POWER_WORDS = ("squared", "cubed")  # on the number itself (`12 \text{ squared}`), not after a unit (`cm squared`)
_AFTER_NUMBER = re.compile(r"\d\s*(?:\\[ ,;:!]\s*)*$")


# a text group's first word, after a number inside it (`\text{12 thousand}`); a group opening with a parenthesis is
# a remark (`7 \text{ (thousands digit)}`, `1000 \text{ (one thousand)}`, `144 \text{ (12 squared)}`)
_FIRST_WORD = re.compile(r"\s*(?P<number>-?\d[\d.,]*\s*)?(?P<word>[a-z]+)(?P<rest>.*)", re.S)
# what after a multiplier makes it no multiplier: a compound (`hundred-dollar bills`), a place (`thousands digit`)
_NOT_SCALING = re.compile(r"-|\s*(?:digits?|places?|columns?)(?![a-z])")


# a number and one multiplier in text, a unit after it at most (`12 \text{ thousand}`, `12\ \text{thousand dollars}`):
# read as the number it names, as a grader reads it (was wrong for 12000 too; `\boxed{12} thousand`, `hedges.box_run`)
_SCALED_NUMBER = re.compile(
    r"(?:(?P<number>-?\d+(?:\.\d+)?)\s*(?:\\[ ,;!]\s*)*\\(?:text|textrm|mathrm|mbox)\s*\{\s*"
    r"|\\(?:text|textrm|mbox)\s*\{\s*(?P<inside>-?\d+(?:\.\d+)?)\s+)(?P<word>[A-Za-z]+)(?P<rest>[^{}]*)\}"
)


def _scaled_number(pred: str) -> str | None:
    """The number a cleaned answer names when it is a number and a multiplier in text (`_SCALED_NUMBER`), else None."""
    m = _SCALED_NUMBER.fullmatch(pred)
    if m is None or (word := m.group("word").lower().removesuffix("s")) not in _MULTIPLIERS:
        return None
    if m.group("rest").strip() and not _is_unit(m.group("rest")):  # `12 \text{ thousands digit}`, `hundred-dollar`
        return None
    if _ordinal(m.group("word").lower(), number := m.group("number") or m.group("inside")):  # `4 \text{ fifth graders}`
        return None
    value = Fraction(number) * _MULTIPLIERS[word]
    return str(value.numerator) if value.denominator == 1 else f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


_NUMBER_END = re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:\\[ ,;:!]\s*)*$")  # the number a text group follows


def _ordinal(word: str, number: str | None) -> bool:
    """Whether a fraction word names an ordinal, no fraction: singular after a number other than 1 (`4 \\text{ fifth
    graders}` was wrong for 4, read 4/5; `1 \\text{ tenth}` is 1/10); a singular "ten" too, a compound (`2 \\text{
    ten sided dice}`, `3 \\text{ ten dollar bills}` were read 20 and 30; tens are `12 \\text{ tens}`)."""
    factor = _MULTIPLIERS.get(word.removesuffix("s"))
    if factor is None or (factor.denominator == 1 and word != "ten") or word.endswith("s") or not number:
        return False
    try:
        return Fraction(number.strip().replace(",", "")) != 1
    except (ValueError, ZeroDivisionError):
        return False


def _scaled_in_text(pred: str) -> bool:
    """Whether a text group in `pred` scales the number before it: its first word a multiplier (`_MULTIPLIERS`; not
    `_NOT_SCALING`) or, on the number itself, a power (`_POWER_WORDS`) not followed by a unit (`squared units`)."""
    for m in _TEXT_GROUP.finditer(pred):
        if (first := _FIRST_WORD.match(m.group(1).lower())) is None:
            continue
        word = first.group("word")
        number = first.group("number") or ((n := _NUMBER_END.search(pred[: m.start()])) and n.group(1))
        if word.removesuffix("s") in _MULTIPLIERS and not _NOT_SCALING.match(first.group("rest")):
            if not _ordinal(word, number):
                return True
        # a unit after the power word is a unit read "squared units" (`25 \\text{ squared units}` was wrong for 25)
        unit = _is_unit(first.group("rest"))
        if word in _POWER_WORDS and not unit and (first.group("number") or _AFTER_NUMBER.search(pred[: m.start()])):
            return True
    return False


# a union of intervals, one at least unbounded, half-open or closed: [2, \infty), (-\infty, 3] \cup (5, 6), [-1, 1]
_INTERVAL_PART = r"[(\[][^()\[\]]*,[^()\[\]]*[)\]]"
_INTERVAL = re.compile(
    rf"(?=.*(?:\\infty|\[[^\]]*[)\]]|\([^)]*\]))\s*{_INTERVAL_PART}(?:\s*\\cup\s*{_INTERVAL_PART})*\s*"
)
_RELATION = re.compile(r"\\(?:le|ge|leq|geq|leqslant|geqslant|lt|gt)(?![A-Za-z])|[<>\u2264\u2265]")

# a leading phrase without digits or math ending in "is": "The answer is", "So the final answer is:", "It is"
_ANSWER_IS = re.compile(r"[A-Za-z][A-Za-z ,']{0,60}?\bis\s*:?\s+(?=\S)", re.I)
_CHOICE = re.compile(r"(?:\\(?:textbf|text|mathrm)\s*\{\s*)?\(\s*[A-E]\s*\)\s*\}?(?:\s|~|\\[ ,;:!]|\\q?quad\b)*(?=\S)")
# a trailing remark that holds no digit or math: in parentheses, after a dash, after a comma and a connective, or
# the value named (`540 is the largest real part`, `821 is the remainder`; not `540 is too small`, `3 is the
# minimum; the maximum is 9`)
_ASSIGNMENT = r"[A-Za-z]\w*\s*=\s*-?\d+(?:\.\d+)?"  # m = 37: a side value a grader reads past, as (m = 37, n = 3)
_REMARK = re.compile(
    r"\s*(?:\([^()\d$]*\)|(?:--|\u2013|\u2014)[^\d$]*|,\s*(?:which|as|that|since|because|where|so)\b[^\d$]*"
    r"|\s(?:is|are)\s+(?:the|our|my)\s+(?:final\s+|correct\s+|required\s+|desired\s+)?(?:(?:largest|smallest|"
    r"greatest|least|maximum|minimum)(?:\s+(?:possible|positive|real|integer|value|number|part|sum|one))*|(?:answer|"
    r"remainder|result|value|number|count|total|sum)(?:\s+of\s+(?:the\s+)?[A-Za-z]+(?:\s+[A-Za-z]+)?)?)"
    rf"|\(\s*{_ASSIGNMENT}(?:\s*,\s*{_ASSIGNMENT})*\s*\)"
    r"|\.\s+[Ii] hope it is correct)$"  # Minerva's closing: `540. I hope it is correct.` (no other sentence)
)
# a value given first in a reversed equation: 5 = x, 540 = m + n (the authors' rule reads the right side)
_REVERSED = re.compile(r"(-?\d+(?:\.\d+)?|-?\\frac\{\d+\}\{\d+\})\s*=\s*[A-Za-z][A-Za-z\s+\-]*")
_WRAPPED_NUMBER = re.compile(r"(?:\*|\\(?:text|mathrm|mathbf|textbf)\s*\{)\s*(-?[\d.]+)\s*(?:\*|\})")
# a number with its unit in text, after it or with it (`12 \text{ cm}^2`, `5\,\mathrm{kg}`, `\text{12 apples}`):
# math-verify drops a text group but reads none with the number inside; not words that change the value or hedge
_NUMBER_UNIT = r"(-?\d+(?:\.\d+)?)"
_UNIT = r"([A-Za-z]+(?:[ /][A-Za-z]+){0,2})"
_UNIT_AFTER = re.compile(
    rf"{_NUMBER_UNIT}(?:\s|\\[,;! ]|~)*\\(?:text|textrm|mathrm|mbox)\s*\{{\s*{_UNIT}\s*\}}(?:\^\{{?[23]\}}?)?"
)
_UNIT_INSIDE = re.compile(rf"\\(?:text|textrm|mbox)\s*\{{\s*{_NUMBER_UNIT}\s+{_UNIT}\s*\}}")
# a unit in plain words after the number (`42 km/h`, `5 m/s`: math-verify reads the slash as a division)
_UNIT_PLAIN = re.compile(rf"{_NUMBER_UNIT}\s+([A-Za-z]+(?:\s*/\s*[A-Za-z]+|\s+[A-Za-z]+){{0,2}})")


def without_remarks(answer: str) -> str:
    """A cleaned `answer` without what a human grader reads past: a leading phrase ending in "is" (`The answer is`,
    `It is`), an AMC choice letter before its value (`(C) 7`, `\\textbf{(C)}\\ 7`), a trailing remark that holds no
    digit or math (`540 (the remainder)`, `540 -- the count`, `540, which is the remainder`) or only assigns values
    (`540 (m = 37)`), end marks (`;`, `!`, `\\\\`, a check mark, `\\blacksquare`), a number in italics or text
    (`*540*`, `\\text{073}`), a unit in text (`12 \\text{ cm}`, `\\text{12 apples}`: a known unit or a plural count
    noun, `_is_unit`; not `\\text{12 pi}`), the value side of a reversed equation (`540 = m + n`). Tried only after
    `answer` itself, so it can only turn wrong into right.

    >>> without_remarks("The answer is 113"), without_remarks("(C) 7"), without_remarks("540 (the remainder);")
    ('113', '7', '540')
    """
    if len(answer) > MAX_ANSWER_CHARS:  # judged wrong anyway; the remark patterns are quadratic in long spaces
        return answer
    s = answer[m.end() :] if (m := _ANSWER_IS.match(answer)) else answer
    s = m.group(1) if (m := _REVERSED.fullmatch(s)) else s
    s = s[m.end() :] if (m := _CHOICE.match(s)) else s
    for _ in range(3):  # remarks and marks in any order: 540 (the remainder);  540; (mod) ...
        s = _END_MARKS.sub("", _REMARK.sub("", s)).strip()
    m = _WRAPPED_NUMBER.fullmatch(s)
    return m.group(1) if m else _without_unit(s)


def _without_unit(s: str) -> str:
    """The number of `s` when `s` is a number with its unit in text or in plain words (`_UNIT_AFTER`, `_UNIT_INSIDE`,
    `_UNIT_PLAIN`), else `s`."""
    m = _UNIT_AFTER.fullmatch(s) or _UNIT_INSIDE.fullmatch(s) or _UNIT_PLAIN.fullmatch(s)
    return m.group(1) if m is not None and _is_unit(m.group(2), one=m.group(1) == "1") else s


# ---------------------------------------------------------------------------------------------------------------
# the public verifier
# ---------------------------------------------------------------------------------------------------------------


def math_score(response: str, ground_truth: str, mode: Mode = "equiv", *, timeout: float = 1.0) -> bool:
    """True iff `response` answers `ground_truth` correctly under `mode` ("strict" or "equiv").

    Never raises for anything a model can write: a malformed, unparseable or pathological answer is simply wrong.
    equiv mode spends at most `timeout` seconds in math-verify and returns within `timeout + 0.3` s whatever happens
    there (once its worker process runs; see `rpgrl.rewards._mathverify`). Nothing in `response` is ever executed.

    A ground truth may be a number (a dataset column of integers): it is judged as its `str`. A response that is not
    a string, a ground truth that is neither, or a timeout that is not a finite number of seconds > 0 is a ValueError.

    >>> math_score("Answer: 540", "540", mode="strict"), math_score("Answer: 540", 540)
    (True, True)
    """
    ground_truth = _checked_inputs(response, ground_truth, timeout)
    if mode == "strict":
        return strict_correct(response, ground_truth)
    if mode == "equiv":
        return equiv_correct(response, ground_truth, timeout=timeout)
    raise ValueError(f"unknown math scoring mode {mode!r}; valid: {', '.join(MODES)}")


def _valid_timeout(t: Any) -> bool:
    return not isinstance(t, bool) and isinstance(t, int | float) and 0 < t < math.inf


def _checked_inputs(response: Any, ground_truth: Any, timeout: Any) -> str:
    """The ground truth as a string, after refusing what `math_score` cannot judge, in one line each."""
    if not isinstance(response, str):
        raise ValueError(f"math_score: the response must be a string, got {type(response).__name__}")
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, str | int | float):
        what = type(ground_truth).__name__
        raise ValueError(f"math_score: the ground truth must be a string or a number, got {what}")
    if not _valid_timeout(timeout):
        raise ValueError(f"math_score: timeout must be a finite number of seconds > 0, got {timeout!r}")
    return ground_truth if isinstance(ground_truth, str) else str(ground_truth)


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
        if not _valid_timeout(self.timeout):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {self.timeout!r}")

    def __call__(self, completion: str, answer: str) -> Reward:
        correct = bool(math_score(completion, answer, self.mode, timeout=self.timeout))
        fmt = 1.0 if has_answer_line(completion) else 0.0
        value = (self.correct_value if correct else self.wrong_value) + self.format_weight * fmt
        return Reward(value=value, correct=correct, parts={"correct": float(correct), "format": fmt})


MATH_REWARD = register_reward("math")(MathReward())
MATH01_REWARD = register_reward("math01")(MathReward(correct_value=1.0, wrong_value=0.0))
# The authors' exact rule (spec 7.6), as their training reward: +1/-1 and 1/0.
MATH_STRICT_REWARD = register_reward("math_strict")(MathReward(mode="strict"))
MATH01_STRICT_REWARD = register_reward("math01_strict")(MathReward(mode="strict", correct_value=1.0, wrong_value=0.0))
