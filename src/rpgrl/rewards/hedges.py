"""Whether a response commits to one final answer or hedges between several, as a careful grader reads it.

`rewards.math` reads the answer of a response's boxes through `box_run(text, boxes)`: the last box, with the boxes
that only a separator parts from it (`\\boxed{2}$ and $\\boxed{3}`: one answer of two values; `\\boxed{4} or
\\boxed{5}`: a hedge), the box of the paragraph before an `Alternatively, ...` one, and a value offered with "or"
after the box (`\\boxed{12} or 13`, `, or maybe six`) or before it (`4 or \\boxed{5}`), unless that value restates
the answer (`\\$2.50, or \\boxed{250} cents`), is an operand or an equation (`40% of 30, or \\boxed{12}`), or is
rejected after the box (`$x=-2$ or $x=\\boxed{3}$; the negative root is extraneous`). The answer so read is a hedge
when `is_hedge(answer, ground_truth)` says it offers several values where the truth is one; `values_offered(hedge)`
lists them, for `rewards.math` to judge whether they are all one value (`\\boxed{12}, \\boxed{12.0}`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from rpgrl.rewards.presentation import (
    _DELIMITERS,
    _END_MARKS,
    _GOLD_CHOICE,
    _PARAGRAPH_BREAK,
    _SENTENCE_END,
    MAX_ANSWER_CHARS,
    _boxed_contents,
    _boxes,
    _is_unit,
    clean_answer,
    compound_amount,
    unit_scale,
)

# a dash that sets off an "or" as a comma does (`\boxed{3} — or 5`, `4 --- or \boxed{5}`): an em dash, an en dash,
# `--` or `---` (one run: no quantifier around it, so no backtracking over a long run of hyphens)
_DASH = r"(?:--+|\u2013|\u2014)"
# what may separate the boxes of one answer: `\boxed{2}$ and $\boxed{3}`, `\boxed{4}, \boxed{5}`, `, and`,
# `\boxed{4} (or \boxed{5})`, `\boxed{4} — or \boxed{5}`
_BOX_GAP = re.compile(  # (the next box's `n =` too: `$n = \boxed{4}$ or $n = \boxed{5}$`)
    rf"(?:\s|\$|\\[(),;]|\\q?quad)*(?:;|(?:,|{_DASH})?\s*(?:and|or)|,"
    r"|\\text\s*\{\s*(?:and|or)\s*\}|\(\s*(?:and|or))?"
    r"(?:\s|\$|\\[(),;]|\\q?quad)*"
    r"(?:[A-Za-z]\w{0,3}\s*=\s*)?"
)


def box_run(text: str, boxes: list[tuple[int, str]]) -> str:
    """The last box, with the boxes right before it that only a separator parts from it (`$\\boxed{2}$ and
    $\\boxed{3}$`: one answer of two values, or a hedge `\\boxed{4} or \\boxed{5}`; a unit and "or" too, the last
    box's unit read with the run: `$\\boxed{5}$ km or $\\boxed{5000}$ m`, `_unit_gap`) or, alone, with the box of the
    paragraph before its `Alternatively, ...` one (`_alternative`), as raw text, with a value offered with "or"
    before the run (`_hedge_before`) or after it (`_hedge_after`). `boxes`: the boxes of `text` that hold a value
    (`_boxes`), one at least."""
    first = len(boxes) - 1
    while first > 0:
        j, c = boxes[first - 1]
        command = text.rfind("\\", 0, boxes[first][0])  # the backslash of the next box's \boxed
        gap = text[j + len(c) + 2 : command]
        if len(gap) > 40 or "\n\n" in gap:  # a paragraph apart: no run
            break
        if not (_BOX_GAP.fullmatch(gap) or _unit_gap(gap) or _parts_of_one_amount(text, boxes, first)):
            break
        first -= 1
    previous_end = boxes[first - 1][0] + len(boxes[first - 1][1]) + 2 if first > 0 else 0
    alternative = (
        first == len(boxes) - 1
        and first > 0
        and _alternative(text, previous_end, boxes[first][0], _stated(text, boxes[first - 1][0]))
    )
    if alternative:
        first -= 1  # `\\boxed{4}.` then a paragraph `Alternatively, ... \\boxed{8}`: two answers offered, a hedge
    j, c = boxes[-1]
    end, start = j + len(c) + 2, text.rfind("\\", 0, boxes[first][0])
    before, hedge = _hedge_before(text, start, end), _hedge_after(text, end, c)
    if first == len(boxes) - 1 and not (before or hedge):
        # the box alone: a word after it does not scale it (`\\boxed{12} thousand` is 12, the question asking in
        # thousands; scaled, 16 of a probe's 345 responses were judged wrong)
        return c
    run = text[start:end]
    if alternative:  # the two boxes offered, not the paragraph's reasoning between them (its numbers, its length)
        j0, c0 = boxes[first]
        run = text[start : j0 + len(c0) + 2] + " or " + text[text.rfind("\\", 0, j) : end]
    runs = first < len(boxes) - 1 and not alternative  # boxes a separator or a unit and "or" part (`_unit_gap`)
    if runs and not hedge and (unit_end := _unit_end(text, end)) is not None:
        run = text[start:unit_end]  # `$\\boxed{5}$ km or $\\boxed{5000}$ m`: each value with its unit
        run = run if _OR_WORD.search(run) else _listed(text, start, unit_end) or run
    return before + run + hedge


# words that make boxes in units values of several things, not parts of one amount (`The sides are $\boxed{3}$ m and
# $\boxed{40}$ cm`, `$\boxed{2}$ hours and $\boxed{30}$ minutes, respectively`): a plural verb or an `Answers:`
# label right before the first box (not "there are": `There are $\boxed{2}$ hours and ...` is one amount),
# "respectively" after the last
_PLURAL_BEFORE = re.compile(
    r"(?<![A-Za-z])(?<!there\s)(?:(?:are|were)[ \t]*:?|answers\**\s*:\**)[ \t]*\$?[ \t]*$", re.IGNORECASE
)
_RESPECTIVELY = re.compile(r"[ \t$]*,?[ \t]*respectively(?![A-Za-z])", re.IGNORECASE)


def _listed(text: str, start: int, end: int) -> str | None:
    """The run of boxes in units joined by "and" `text[start:end]` with the words that make it a list of values of
    several things (`_PLURAL_BEFORE`, `_RESPECTIVELY`), kept in the answer so that it is not read as one amount in
    parts (`math._amount_in_parts` reads boxes and units alone), else None."""
    plural = _PLURAL_BEFORE.search(text, max(0, start - 20), start)
    respectively = _RESPECTIVELY.match(text, end)
    if plural is None and respectively is None:
        return None
    return text[plural.start() if plural else start : respectively.end() if respectively else end]


# the first word after a box (`m` of `$\boxed{5000}$ m long`, `\text{ m}`)
_WORD_AFTER_BOX = re.compile(r"[ \t$]*(?:\\text\s*\{\s*)?([A-Za-z]+)(?![A-Za-z])[ \t]*\}?")


def _unit_end(text: str, end: int) -> int | None:
    """Where the unit after a run's last box (ending at `end`) ends: a unit of a known size alone (`unit_scale`: `m`
    of `m long`, of `m in total`, which read as one unit was no unit, or `min`), else one or two words that name a
    unit (`_UNIT_BEFORE_OR`, `_is_unit`: `subsets`, `square units`); None when no unit follows."""
    if (word := _WORD_AFTER_BOX.match(text, end)) and unit_scale(word.group(1)) is not None:
        return word.end()
    if (unit := _UNIT_BEFORE_OR.match(text, end)) and _is_unit(unit.group(1)):
        return unit.end()
    return None


# a unit after a box, then "and" or a comma before the next box (`$\boxed{2}$ hours and $\boxed{30}$ minutes`)
_UNIT_AND_GAP = re.compile(r"[ \t$]*(?:\\text\s*\{\s*)?([A-Za-z]+)[ \t]*\}?[ \t$]*(?:,?[ \t]*and|,)[ \t$]*")


def _parts_of_one_amount(text: str, boxes: list[tuple[int, str]], i: int) -> bool:
    """Whether boxes `i - 1` and `i` of `text` are parts of one amount, each with its unit after it, "and" or a comma
    between them (`$\\boxed{2}$ hours and $\\boxed{30}$ minutes`: `presentation.compound_amount`)."""
    (j0, c0), (j1, c1) = boxes[i - 1], boxes[i]
    gap = _UNIT_AND_GAP.fullmatch(text, j0 + len(c0) + 2, text.rfind("\\", 0, j1))
    unit = _WORD_AFTER_BOX.match(text, j1 + len(c1) + 2)
    return (
        gap is not None and unit is not None and compound_amount([(c0, gap.group(1)), (c1, unit.group(1))]) is not None
    )


# a unit after a box, then "or" before the next box (`$\boxed{5}$ km or $\boxed{5000}$ m`, `\boxed{4} subsets or
# \boxed{5} subsets`): the boxes are one run, two values offered (one quantity in two units, or a hedge)
_UNIT_GAP = re.compile(
    rf"[ \t$]*(?:\\text\s*\{{\s*)?((?!or(?![A-Za-z]))[A-Za-z]+(?:[ \t]+(?!or(?![A-Za-z]))[A-Za-z]+)?)[ \t]*\}}?"
    rf"[ \t$]*(?:,|{_DASH})?[ \t]*or[ \t$]*"
)


def _unit_gap(gap: str) -> bool:
    """Whether the text between two boxes is a unit of the first (`_is_unit`) and "or" (`_UNIT_GAP`)."""
    m = _UNIT_GAP.fullmatch(gap)
    return m is not None and _is_unit(m.group(1))


# a paragraph that opens with "Alternatively" or "Or" and ends in the last box, right after the paragraph of the box
# before it: another answer offered, not a correction (`... the answer is $\boxed{4}$.` then `Alternatively, if we
# count both orders, $\boxed{8}$.` was right for 8: the last box read alone); not a later paragraph (a step's box), nor
# "Or wait" / "Or, actually", a correction. In one paragraph the same, by sentences or lines.
# Nor "Or rather", "Or so it seems", or a doubt asked of the answer before it and closed before the box ("Or is it?",
# "Or did I overcount?", "Or should we count orders? Yes: ..."): corrections too; a question that a condition
# follows offers another answer (`Or should we count orders? If so, $\boxed{8}$.`: a hedge).
_DOUBT = (
    r"(?:rather|so\s+it\s+(?:seems|appears))(?![A-Za-z])"
    r"|(?:is|was|are|were|am|did|do|does|have|has|had|should|could|would|can|will|might|must)\s+"
    r"(?:i|we|it|that|this|they|there)(?![A-Za-z])[^?\n]*\?(?!\s*if(?![A-Za-z]))"
)
# "Alternative" opens a heading as "Alternatively" a sentence (`**Alternative approach:**`, `### Alternative method`,
# `**Alternative approach (ordered pairs):**`): a few words, then a colon or the line's end
_HEADING = r"alternative(?:[ \t]+[A-Za-z]+){0,2}(?:[ \t]*\([^()\n]{0,40}\))?[ \t*_]*(?::|(?=\n)|\Z)"
_ALTERNATIVE = re.compile(
    r"[\s#>*_]*(?:(?:[-+]|\d{1,2}[.)])[ \t]+[*_]*)?"  # a list item's marker (`- Alternatively, with order: ...`)
    rf"(?:alternatively|{_HEADING}|or(?![A-Za-z])(?![\s,]*(?:{_DOUBT})))(?![A-Za-z])"
    r"(?![\s,:\-\u2014]*(?:wait|actually|no)(?![A-Za-z]))",
    re.IGNORECASE,
)


def alternative_to_label(text: str, label: tuple[str, int], boxes: list[tuple[int, str]]) -> str | None:
    """`<the label's answer> or <the last box>` when the last box, the only one after an answer label's answer
    (`label`: its content and where it ends), ends an `_ALTERNATIVE` paragraph right after the label's (`Answer: 4`
    then `Alternatively, if we count both orders, \\boxed{8}.`: a hedge, as after a box), else None."""
    content, end = label
    j, c = boxes[-1]
    if j < end or (len(boxes) >= 2 and boxes[-2][0] >= end) or not _alternative(text, end, j, stated=True):
        return None
    return (
        content.rstrip()
        + " or "
        + text[text.rfind("\\", 0, j) : j + len(c) + 2]
        + _hedge_after(text, j + len(c) + 2, c)
    )


_RULE = re.compile(r"[ \t]*(?:-{3,}|\*{3,}|_{3,})[ \t]*")  # a markdown rule alone in its paragraph (`---`, `***`)
# a paragraph that opens a section going on below it: a heading (`### Alternative method`) or a bold label ending in a
# colon (`**Alternative approach:** ...`; not `**Alternatively**, ...`)
_SECTION = re.compile(r"[ \t]*(?:#{1,6}[ \t]|(?:\*\*|__)[^*_\n]{1,60}(?::[ \t]*(?:\*\*|__)|(?:\*\*|__)[ \t]*:))")
_LIST_ITEM = re.compile(r"[ \t]*(?:[-+*]|\d{1,2}[.)])[ \t]")
# the answer's display math closed on a line of its own (`\]`, `$$`), before an "Alternatively" line: spaces and
# marks alone, or a closing delimiter after spaces (as two alternatives: spaces that both the leading and the trailing
# part could take were tried at every split, quadratic on a long line of them)
_CLOSING_LINE = re.compile(r"[ \t.,;]*|[ \t]*(?:\\\]|\$\$|\\\))[ \t.,;]*")
# an error found in the text before the last box: a correction, not another answer (`Alternatively, let me recount:
# ... I missed $(2,4)$, so the answer is $\boxed{5}$.`, `I previously missed one`, `I must have miscounted`); or
# the last value named the correct answer (`_NAMED_CORRECT`: `**Alternative method:** ... So the correct answer is
# $\boxed{16}$.`, `the actual answer is`, `the answer is actually`: the first answer dropped)
_CORRECTION = re.compile(
    r"(?<![A-Za-z])(?:wait|actually(?=,)|(?:a|my|an)\s+(?:mistake|error)|I\s+(?:(?:previously|initially|earlier"
    r"|originally|first|must\s+have)\s+)?(?:missed|forgot|overcounted|undercounted|miscounted|misread)"
    r"|(?:was|is)\s+(?:wrong|incorrect))(?![A-Za-z])",
    re.IGNORECASE,
)
# the last value named the correct answer, with no condition in the text (`Alternatively, if order matters, the
# correct answer is $\boxed{8}$` offers it, a hedge still)
_NAMED_CORRECT = re.compile(
    r"(?<![A-Za-z])(?:(?:correct|actual|right|true)\s+answer\s+(?:is|must\s+be)|answer\s+is\s+actually)(?![A-Za-z])",
    re.IGNORECASE,
)
_CONDITION = re.compile(r"(?<![A-Za-z])(?:if|unless|assuming|when)(?![A-Za-z])", re.IGNORECASE)


def corrects(alternative: str) -> bool:
    """Whether the text before the last box corrects the answer (`_CORRECTION`, or `_NAMED_CORRECT` unconditioned)."""
    if _CORRECTION.search(alternative):
        return True
    return _NAMED_CORRECT.search(alternative) is not None and _CONDITION.search(alternative) is None


def _alternative(text: str, after: int, last: int, stated: bool = False) -> bool:
    """Whether the box opening at `last` ends an `_ALTERNATIVE` text right after the answer ending at `after`: in
    the paragraph right after the answer's (`_alternative_paragraphs`: a section that goes on below it too), or in
    the answer's paragraph, right after its sentence or its line (`\\boxed{4}. Alternatively, if we count both
    orders, \\boxed{8}.`, `\\[\\boxed{4}\\]` then a line `Alternatively, ...`: a hedge in one paragraph as in two);
    when the answer is `stated` as one (a label, "the answer is", `_stated`) or the paragraph after it checks it
    (`_CHECK`: `The number of pairs is $\\boxed{6}$.`, then `Check: ...`), in a later paragraph too (`\\boxed{4}`,
    a paragraph checking it, then `Alternatively, ...`; a step's box, the next step after it, is not). Not when
    the text after the answer finds an error or names the last value the correct answer (`corrects`: the last box
    corrects the answer)."""
    between = text[after : text.rfind("\\", 0, last)]
    paragraphs = _PARAGRAPH_BREAK.split(between)
    paragraphs = paragraphs[:1] + [q for q in paragraphs[1:] if not _RULE.fullmatch(q)]  # `---` parts nothing
    if len(paragraphs) >= 2:
        later = [q for q in paragraphs[1:] if q.strip()]
        alternative = _alternative_paragraphs(later)
        checked = bool(later) and _CHECK.match(later[0]) is not None  # the answer checked before the alternative
        if alternative is None and (stated or checked) and _later_alternative(later):
            alternative = "\n\n".join(later)  # (the paragraphs before it searched for an error too)
    else:
        sentences = _SENTENCE_END.split(between, maxsplit=1)
        alternative = sentences[1] if len(sentences) == 2 and _ALTERNATIVE.match(sentences[1]) else None
        alternative = alternative or _alternative_line(between)
    return alternative is not None and not corrects(alternative)


# a paragraph that checks the result before it (`Check: ...`, `Let me verify: ...`, `To double-check, ...`): that
# result is an answer, not a step, though its sentence does not name it one
_CHECK = re.compile(
    r"[\s#>*_]*(?:(?:let(?:'s|\s+us|\s+me)\s+|to\s+|we\s+can\s+)?(?:double[- ]?check|check|verify|confirm)"
    r"|verification|sanity\s+check)(?![A-Za-z])",
    re.IGNORECASE,
)
_ANSWER_WORD = re.compile(r"(?<![A-Za-z])answer(?![A-Za-z])", re.IGNORECASE)


def _stated(text: str, box: int) -> bool:
    """Whether the box opening at `box` is stated as the answer: its sentence, in its paragraph, names "the answer"
    before it (`So the answer is $\\boxed{4}$`, `**Final Answer:** $\\boxed{10}$`, `**Final Answer**` then
    `\\[\\boxed{7}\\]` below; not `The number of pairs is $\\boxed{6}$`, a step's box). Reads at most 200
    characters before the box."""
    paragraph = _PARAGRAPH_BREAK.split(text[max(0, box - 200) : box])[-1]
    return _ANSWER_WORD.search(_SENTENCE_END.split(paragraph)[-1]) is not None


def _alternative_paragraphs(paragraphs: list[str]) -> str | None:
    """The text of the paragraphs from an answer's to the last box (none empty) when they are one `_ALTERNATIVE`
    text: one paragraph, or one that goes on below, to the box's paragraph: a section (`_SECTION`: `**Alternative
    approach:**`, `### Alternative method`) up to the next, or a paragraph ending in a colon (`Alternatively, if
    order matters:`) through lists, display math and paragraphs ending in a colon; else None."""
    if not paragraphs or not _ALTERNATIVE.match(paragraphs[0]):
        return None
    middle = paragraphs[1:-1]
    if _SECTION.match(paragraphs[0]):
        goes_on = not any(_SECTION.match(q) for q in paragraphs[1:])
    elif len(paragraphs) >= 2 and paragraphs[0].rstrip().endswith(":"):
        goes_on = all(_continued(q) for q in middle)
    else:
        goes_on = len(paragraphs) == 1
    return "\n\n".join(paragraphs) if goes_on else None


def _later_alternative(paragraphs: list[str]) -> bool:
    """Whether a paragraph after the first of `paragraphs` opens one `_ALTERNATIVE` text that ends with them, as
    `_alternative_paragraphs` reads one from the first. From the last paragraph back, each read once: the
    paragraphs after a candidate are all continued (`_continued`) and hold no section, or it may open none."""
    last = len(paragraphs) - 1
    sections_after, continued = False, True
    for k in range(last, 0, -1):
        q = paragraphs[k]
        if _ALTERNATIVE.match(q):
            section = _SECTION.match(q) is not None
            if (not sections_after) if section else (k == last or (q.rstrip().endswith(":") and continued)):
                return True
        if k < last:
            continued = continued and _continued(q)
        sections_after = sections_after or _SECTION.match(q) is not None
        if sections_after and not continued and k < last:
            return False
    return False


def _continued(paragraph: str) -> bool:
    """Whether a paragraph goes on the one before it, ended in a colon: a list, display math, or a paragraph that
    ends in a colon itself."""
    stripped = paragraph.strip()
    if stripped.startswith(("$$", "\\[")) or stripped.endswith(":"):
        return True
    return all(_LIST_ITEM.match(line) for line in stripped.split("\n"))


def _alternative_line(between: str) -> str | None:
    """The text after the answer's line (and the lines that only close its display math: `\\]`, `$$`) when it
    opens with `_ALTERNATIVE` (`Answer: 4` then a line `Or, if order matters, $\\boxed{8}$.`), else None."""
    lines = between.split("\n")[1:]
    while lines and _CLOSING_LINE.fullmatch(lines[0]):
        lines.pop(0)
    return "\n".join(lines) if lines and _ALTERNATIVE.match(lines[0]) else None


# the word "or" right after an answer's last box (past closing math delimiters, a comma, a parenthesis, a dash):
# `\boxed{12} or 13`, `$\boxed{12}$, or $13$`, `\boxed{12} (or 13)`, `\boxed{12} \text{ or } 13`, `\boxed{12} — or 13`
_OR_AFTER = re.compile(
    rf"(?:\s|\$|\\[)\] ]|\\q?quad|[,;(])*(?:{_DASH}\s*)?(?:(?<![A-Za-z\\])or(?![A-Za-z])|\\text\s*\{{\s*or\s*\}})"
)
# another value offered as "or" offers it (`\boxed{14}, but it could also be $15$`): read as "or"
_BUT_ALSO = re.compile(r"(?<![A-Za-z])but\s+(?:it|the\s+answer)\s+(?:could|might|may)\s+(?:also\s+)?be(?![A-Za-z])")
# a unit after the box, before that "or" (`\boxed{4} subsets — or 5`, `\boxed{5} hours, or 6 if ...`): one or two
# words, not "or" itself
_UNIT_BEFORE_OR = re.compile(r"[ \t$]*(?:\\text\s*\{\s*)?([A-Za-z]+(?:[ \t]+(?!or(?![A-Za-z]))[A-Za-z]+)?)[ \t]*\}?")


def _or_after(line: str) -> re.Match | None:
    """The match of `_OR_AFTER` on the box's `line`, after the box's unit if any (`_UNIT_BEFORE_OR`, `_is_unit`)."""
    m = _OR_AFTER.match(line)
    if m is None and (unit := _UNIT_BEFORE_OR.match(line)) and _is_unit(unit.group(1)):
        m = _OR_AFTER.match(line, unit.end())
    return m


# what may follow that "or" for a second value: a lone number or plain math, no words (`or approximately 2.83`,
# `or equivalently 2^2 \cdot 3`, `or 50\%` restate the answer in other terms; `or 13` offers another)
_LONE_VALUE = re.compile(
    r"(?:\s|\$|\\[()\[\] ]|\\q?quad|\\(?:d|t)?frac|\\sqrt|\\pi|\\cdot|\\times|[\d.,+\-*/^{}()])*\d"
    r"(?:\s|\$|\\[()\[\] ]|\\q?quad|\\(?:d|t)?frac|\\sqrt|\\pi|\\cdot|\\times|[\d.,+\-*/^{}()])*"
)


def _hedge_after(text: str, end: int, kept: str = "") -> str:
    """The rest of the sentence after a final box ending at `end` when it offers another value, "or" and then a
    digit (`\\boxed{12} or 13.`, `\\boxed{12}, \\boxed{12.0}, or 13`: a hedge, judged as a whole), a number word
    (`or maybe six`) or, after a choice `kept` in the box, another choice (`or (D)`), else "" (also when the text
    after the sentence rejects a lone value offered: `_rejected`). Reads at most MAX_ANSWER_CHARS characters of the
    box's line (a longer answer is judged wrong anyway)."""
    line = _BUT_ALSO.sub("or", text[end : end + MAX_ANSWER_CHARS].split("\n", 1)[0], count=1)
    m = _or_after(line)
    if m is None:
        return ""
    sentence = _SENTENCE_END.split(line, maxsplit=1)[0]
    rest = _END_MARKS.sub("", sentence[m.end() :]).strip().lstrip(", ")  # `or, more likely, 13`: the words after it
    hedged, rest = _MAYBE.match(rest), _MAYBE.sub("", rest, count=1)
    if hedged is None and (case := _OTHER_CASE.match(rest)):  # `— or, in that case, $5$`: a condition first
        hedged, rest = case, rest[case.end() :].lstrip(", ")
    cased = hedged is not None and _OTHER_CASE.match(hedged.group()) is not None  # (judged without the words)
    if reworded := _REWORDED.match(rest):  # `or more precisely 12.0`, `or more likely 13`: the value after it
        rest = rest[reworded.end() :]
    rest = _ASSIGNED_START.sub(r"\1", rest, count=1)  # `\boxed{3} or $x = 4$`: another value for the variable
    if (word := rest.lower()) in _NUMBER_WORDS:  # `\\boxed{5}, or maybe six`: judged as 5 or 6
        return sentence[: m.end()] + " " + str(_NUMBER_WORDS[word])
    if _is_choice(kept) and _is_choice(rest):  # `\\boxed{(C)} or possibly (D)` (a value and a choice: one answer)
        return sentence[: m.end()] + " " + rest
    if _LONE_VALUE.fullmatch(rest):
        if _rejected(text[end + len(sentence) : end + MAX_ANSWER_CHARS], rest, kept):
            return ""  # `\\boxed{3} or $x = -2$. Only the positive root is valid.`: the value rejected, as before a box
        return sentence[: m.end()] + " " + rest if reworded or cased else sentence
    if _OPEN_ENDED.match(rest):
        return sentence
    if _converted(rest):  # `\\boxed{3} — or $300$ if measured in centimeters`: the value in another unit
        return ""
    # a value and words after it: another value when hedged or conditional (`, or perhaps 14 apples`, `(or 18 if we
    # count the empty set)`, `— or $4$ in that case`), judged without the words; else the words restate it (`or 125
    # cents`, `or -5, which is rejected`)
    value = _LONE_VALUE.match(rest)
    word = _WORD_AFTER_VALUE.match(rest, value.end()) if value else None
    # (not "or else" and a clause: "otherwise", a reason: `\\boxed{5}, or else $2$ of the points would coincide`)
    hedged = hedged and not hedged.group().lower().startswith("else")
    if (word and (hedged or reworded or _conditional(rest, word))) or (
        value and _conditional_after_unit(rest, value.end(), _amount(kept, _WORD_AFTER_BOX.match(text, end)))
    ):
        return sentence[: m.end()] + " " + value.group().strip()
    return ""


def _conditional(rest: str, word: re.Match) -> bool:
    """Whether `word` of `rest` sets a condition (`if`, `with`: `_CONDITIONS`; `in that case`: `_OTHER_CASE`)."""
    return word.group(1).lower() in _CONDITIONS or _OTHER_CASE.match(rest, word.start()) is not None


def _conditional_after_unit(rest: str, end: int, box: tuple[str, Fraction] | None) -> bool:
    """Whether a unit after the value ending at `end` of `rest` is followed by a condition (`or 3 hours if it rains`,
    `or 4 m in that case`): the value is offered under it, as without the unit; not when it is the box's own amount
    `box` (`_amount`) in that unit (`\\boxed{2} hours, or 120 minutes if you prefer`: restated)."""
    unit = _UNIT_AFTER_VALUE.match(rest, end)
    word = _WORD_AFTER_VALUE.match(rest, unit.end()) if unit and _is_unit(unit.group(1)) else None
    return word is not None and _conditional(rest, word) and (box is None or _amount(rest[:end], unit) != box)


def _amount(number: str, unit: re.Match | None) -> tuple[str, Fraction] | None:
    """(quantity, size in its base unit) of a plain `number` (`2`, `$120$`) in the unit `unit` names (its group 1,
    `unit_scale`), else None."""
    n = re.fullmatch(r"[\s$]*(-?\d{1,30}(?:\.\d{1,30})?)[\s$]*", number)
    scale = unit_scale(unit.group(1)) if unit else None
    return (scale[0], Fraction(n.group(1)) * scale[1]) if n and scale else None


# a value, then the unit it is in (`$300$ if measured in centimeters`, `300 when expressed in cm`, `$\frac{\pi}{2}$ in
# radians`): after a box's "or", the box's value converted, no other value offered
_CONVERSION = re.compile(
    r"(?:(?:if|when)\s+(?:(?:it\s+is|it's|we|they\s+are)\s+)?(?:measured|expressed|written|given|converted|measure"
    r"|express|write|convert)\s+(?:it\s+)?)?(?:in|into|to)\s+(?P<unit>[A-Za-z]+(?:\s+[A-Za-z]+)?)[\s.,;!)]*",
    re.IGNORECASE,
)


def _converted(rest: str) -> bool:
    """Whether the words after a box's "or" are a value (`_LONE_VALUE`) in a unit (`_CONVERSION`; the unit known:
    `_is_unit`), its own unit before them or not (`$300$ cm if measured in centimeters`)."""
    value = _LONE_VALUE.match(rest)
    if value is None:
        return False
    m = _CONVERSION.fullmatch(rest, value.end())
    if m is None and (unit := _UNIT_AFTER_VALUE.match(rest, value.end())) and _is_unit(unit.group(1)):
        m = _CONVERSION.fullmatch(rest, unit.end())
    return m is not None and _is_unit(m.group("unit"))


def _hedge_before(text: str, start: int, end: int) -> str:
    """A value and "or" right before the box run from `start` to `end`, in its paragraph (`The answer is 4 or
    \\boxed{5}`, `x = 4 or x = \\boxed{5}`: a hedge, judged as a whole), unless the text after the box rejects that
    value (`_rejected`), else ""."""
    # its paragraph, not its line: a line break is no sentence's end (`4 or` then `$\\boxed{5}$` below was right for 5)
    line = _PARAGRAPH_BREAK.split(text[max(0, start - MAX_ANSWER_CHARS) : start])[-1]
    m = _OR_BEFORE.search(line)
    if m is None or _equation_before_or(line[: m.start()], m.group("value")):
        return ""
    # ", or" restates a result or a conversion (`\\$2.50, or \\boxed{250} cents`, `40% of 30, or \\boxed{12}`,
    # `$\\binom{4}{2}$, or $\\boxed{6}$`); after a lone value it offers another (`The answer is 4, or \\boxed{5}`;
    # `$12\\%$, or $\\boxed{0.12}$` is one value written twice), as "or" alone does, or ", or maybe"
    before, value = line[: m.start()], m.group("value")
    if value.lower() == "one" and _PRONOUN_BEFORE.search(before):  # `the positive one, or \\boxed{3}`: no number
        return ""
    if _COMMA_OR.search(m.group()) and not m.group("hedged") and not _offered(before, value):
        return ""
    if not m.group("hedged") and _CUT_DECIMAL.search(value):  # `0.333... or \\boxed{\\frac{1}{3}}`: an approximation
        return ""
    kept = _boxed_contents(text[start:end])[-1]
    if _rejected(text[end : end + MAX_ANSWER_CHARS], value, kept):
        return ""
    # a value and an AMC choice letter name one answer twice (`$12$, or $\\boxed{(C)}$`, `(C), or $\\boxed{12}$`)
    if _is_choice(value) != _is_choice(kept):
        return ""
    if (word := value.lower()) in _NUMBER_WORDS:  # `four or \\boxed{5}`: the hedge judged as 4 or 5
        return str(_NUMBER_WORDS[word]) + line[m.end("value") :]
    return line[m.start() :]


_PRONOUN_BEFORE = re.compile(r"(?<![A-Za-z])(?:the(?:\s+[A-Za-z]+)?|this|that|which|each|every|any)\s+$", re.I)
_CUT_DECIMAL = re.compile(r"\d\.\.\.+[\s,$]*$")  # a decimal cut with "...": an approximation, no value offered


def _is_choice(value: str) -> bool:
    """Whether a raw value is an AMC choice letter alone (`(C)`, `\\textbf{(C)}`, `C`), no value with it."""
    return _GOLD_CHOICE.fullmatch(clean_answer(value)) is not None


def _offered(before: str, value: str) -> bool:
    """Whether the value before a box's ", or" is one offered for the answer: assigned to a variable (`x = -3, or
    x = \\boxed{5}`), or a lone value (`4`, `$\\frac{1}{3}$`, `$12\\%$`, `(B)`, `four`) that is no operand (`40% of
    30`, `10 - 3`, `1:3`) nor a sum of money (`\\$2.50`)."""
    if _assigned(before, value):
        return True
    value = value[1:-1] if value.startswith("$") else value
    if _CUT_DECIMAL.search(value):  # a decimal cut with "..." (`0.333..., or \\boxed{\\frac{1}{3}}`)
        return False
    if "." in value and _ABOUT_END.search(before):  # a decimal rounded (`about 0.33, or \\boxed{\\frac{1}{3}}`)
        return False
    lone = _LONE_OFFER.fullmatch(value) is not None
    return lone and _OPERAND_END.search(before) is None


# after the box, in its paragraph, the value offered before the "or" rejected, so the box is the one answer (`$x=-2$
# or $x=\boxed{3}$; only the positive root is valid` was a hedge, wrong for 3): by sign (`only the positive root`),
# the kept box of that sign and the other not; or named with a rejecting word (`but $x = -2$ is extraneous`). Not
# `; only one root is valid`, `; both are valid`, nor `only the positive root` where both are positive. A sign kept
# (`only the positive root`, `we take the positive root`, `since $n$ must be positive`) or rejected (`the negative
# root is extraneous`, `we discard the negative solution`); a named value that fails (`does not satisfy`, `is not in
# the domain`, `is excluded`).
_ROOT = r"\s+(?:root|solution|value|answer|one)"
_KEPT_SIGN = re.compile(
    rf"(?:only\s+the|(?:take|keep|choose|use)\s+the)\s+(positive|negative){_ROOT}|\bmust\s+be\s+(positive|negative)",
    re.IGNORECASE,
)
_REJECTED_SIGN = re.compile(
    rf"(?:discard|reject|exclude)\s+the\s+(positive|negative){_ROOT}"
    rf"|\bthe\s+(positive|negative){_ROOT}\s+(?:is|are)\s+(?:extraneous|rejected|invalid|discarded|not\s+valid)",
    re.IGNORECASE,
)
_REJECTING = re.compile(
    r"\b(?:(?:is|are)\s+(?:extraneous|rejected|invalid|discarded|excluded|impossible"
    r"|not\s+(?:valid|allowed|possible|a\s+solution|in\s+the\s+domain))"
    r"|reject|discard|(?:does\s+not|doesn't|do\s+not|don't)\s+(?:satisfy|work))",
    re.IGNORECASE,
)

# a reason, then the value kept stated (`Since $x$ is a length, $x = 3$`, `because $x$ is positive, we get $x = 3$`,
# `as lengths are positive, $x=3$`, `..., the answer is $x = 3$`, `..., the only solution is $3$`): "since",
# "because" or "as", a property the answer must have (a measure, a sign, an integer), a comma, and `<variable> =
# <value>` or a statement of the answer (`_STATING`) and a value, ending its clause; the value is read up to a
# space, a comma, a semicolon or a period that ends the sentence (`x = 3.5.`), or to the end of its math (`$x = 3
# \sqrt{2}$`), and no other after it (`x = 3 or x = -2`). Its clause ends there, or after one word (a unit: `x =
# 3$ cm.`, `x = 3$ only.`): at a period or a semicolon, a line's end, a comma not before "or", or "and" (`x = 3$,
# so ...`, `x = 3$, and the area is $9$`); a clause that goes on names no choice (`$x = 3$ is a solution. $x = -2$
# is one too.`, `$k = 3$ gives $9$ and ...` were right for 3), nor does one after it that names the other value
# (`$x = 3$ works, and so does $x = -2$`: `_names_other`)
_PROPERTY = (
    r"(?:length|distance|side|radius|diameter|width|height|area|perimeter|volume|time|age|speed|count|positive"
    r"|non-?negative|integer|whole\s+number|natural\s+number|digit|probability)s?"
)
# what states the answer before its value: `the answer is`, `the only valid solution is`, `x must be`, `we get`
_ANSWER_NOUN = r"(?:the\s+)?(?:(?:only|final|valid|correct|required|positive|negative)\s+){0,2}(?:answer|solution|root)"
_STATING = (
    rf"(?P<answer>{_ANSWER_NOUN}\s+(?:is|must\s+be))"
    r"|(?:it|[A-Za-z]\w{0,3})\s+(?:is|must\s+be|equals)|we\s+(?:get|have|take|keep|find|obtain|choose)"
)
_REASON_KEPT = re.compile(
    r"(?<![A-Za-z])(?:since|because|as)\s+[^.;\n]{0,80}?(?<![A-Za-z])(?:is|are|must\s+be|has\s+to\s+be|represents"
    rf"|denotes)\s+(?:(?:a|an|the)\s+)?(?:[A-Za-z-]+\s+){{0,2}}?{_PROPERTY}(?![A-Za-z])[^.;\n]{{0,60}}?,\s*"
    rf"(?:(?:so|then|thus|hence|therefore)\s+)?(?:(?P<stating>{_STATING})\s+)?"
    r"(?(stating)|(?=\$?\s*[A-Za-z]\w{0,3}\s*=))"  # no statement of the answer: a variable assigned
    r"(?:\$\s*(?:[A-Za-z]\w{0,3}\s*=\s*)?(?P<math>[^$\n]{0,60}?\d[^$\n]{0,60}?)\s*\$"  # a digit: a value
    r"|(?:[A-Za-z]\w{0,3}\s*=\s*)?(?P<value>[^$\s,;]*?\d[^$\s,;]*?)\s*\$?)"
    r"(?=[.;,]?(?:\s|$))(?![.;,]?\s*or(?![A-Za-z]))(?:[ \t]+[A-Za-z]+)?"
    r"(?=[.;](?:\s|$)|[ \t]*(?:\n|$)|,(?!\s*or(?![A-Za-z]))|\s+and(?![A-Za-z]))",
    re.IGNORECASE,
)


def _rejected(after: str, other: str, kept: str) -> bool:
    """Whether `after`, the text after a box that holds `kept`, rejects `other`, the value before the box's "or":
    by a reason that states `kept` alone (`_reason_states`), or by a sign or by name (`_KEPT_SIGN`,
    `_REJECTED_SIGN`, `_REJECTING`), unless a reason states another value (`Since $x$ must be positive, the answer
    is $x = 2$.`: a hedge still)."""
    after = _PARAGRAPH_BREAK.split(after, maxsplit=1)[0]
    if (reason := _reason_states(after, other, kept)) is not None:
        return reason
    kept_sign, rejected_sign = _KEPT_SIGN.search(after), _REJECTED_SIGN.search(after)
    if kept_sign or rejected_sign:
        sign = next(g for g in (kept_sign or rejected_sign).groups() if g).lower()
        negative = (sign == "negative") == bool(kept_sign)  # the sign kept
        return _negative(kept) == negative and _negative(other) != negative
    number = re.sub(r"[$\s]", "", other).rsplit("=", 1)[-1]
    named = re.search(rf"(?<![\d.]){re.escape(number)}(?![\d.])", re.sub(r"\s", "", after))
    if re.search(r"\bneither\b", after, re.IGNORECASE):  # `neither $-2$ nor $3$ is extraneous`: none rejected
        return False
    return bool(number) and named is not None and _rejects(after)


# what makes a rejecting word reject nothing: a negation right before it (`we do not reject $x = -2$`, `we cannot
# discard it`) or a condition in its clause (`If $4$ is not allowed, the answer is $3$.`: a hedge still, as a grader
# reads it); not a condition of an earlier clause (`If we substitute $x=-2$, ..., so it is extraneous.` rejects)
_NEGATED = re.compile(r"(?:(?<![A-Za-z])(?:not|never|cannot)|n't)\s+(?:[A-Za-z]+\s+){0,2}$", re.IGNORECASE)
_CONDITION_IN_CLAUSE = re.compile(r"(?<![A-Za-z])(?:if|unless|whether)(?![A-Za-z])[^,.;:!?]*$", re.IGNORECASE)


def _rejects(after: str) -> bool:
    """Whether `after` holds a rejecting word (`_REJECTING`) that is neither negated nor in a condition."""
    for m in _REJECTING.finditer(after):
        before = after[max(0, m.start() - 200) : m.start()]
        if not (_NEGATED.search(before) or _CONDITION_IN_CLAUSE.search(before)):
            return True
    return False


def _reason_states(after: str, other: str, kept: str) -> bool | None:
    """What a reason in the paragraph `after` a box holding `kept` says of the hedge (`_REASON_KEPT`): True when it
    states `kept` (in any simple form: `x = 1.5` for `\\frac{3}{2}`, `_same_value`) and not `other`, its sentence
    naming `other` no more (`_names_other`); False when it states `other`, or states another number for the answer
    (`the answer is $x = 2$`); else None (no reason, one stating a value of something else: `A = 9`, or one whose
    value is written in a form `_same_value` cannot compare: `the answer is $x = \\sqrt 2$` for `\\sqrt{2}`, left to
    the sign rules as before)."""
    m = _REASON_KEPT.search(after)
    if m is None:
        return None
    stated = m.group("math") if m.group("math") is not None else m.group("value")
    if _same_value(stated, other):
        return False
    if _same_value(stated, kept) and not _same_value(kept, other):
        return None if _names_other(_SENTENCE_END.split(after[m.end() :], maxsplit=1)[0], other) else True
    return False if m.group("answer") and _other_number(stated, kept) else None


_NOT_BEFORE = re.compile(r"(?:not|rather\s+than|instead\s+of)[\s$]*(?:[A-Za-z]\w{0,3}\s*=\s*)?$", re.IGNORECASE)
_SIMPLE_NUMBER = re.compile(r"[-+]?(?:\\[dt]?frac\{\d{1,30}\}\{\d{1,30}\}|\d{1,30}(?:\.\d{1,30}|/\d{1,30})?)")


def _names_other(rest: str, other: str) -> bool:
    """Whether `rest`, the sentence after a reason's value, names `other` again (`, and so does $x = -2$`, `and $x =
    -2$ are candidates`), not after "not" (`, not $x = -2$`), or names "both" or "either"."""
    if re.search(r"(?<![A-Za-z])(?:both|either)(?![A-Za-z])", rest, re.IGNORECASE):
        return True
    for m in _SIMPLE_NUMBER.finditer(rest):
        if _same_value(m.group(), other) and not _NOT_BEFORE.search(rest[: m.start()]):
            return True
    return False


_FRACTION = re.compile(r"(-?)\\frac\{(\d{1,30})\}\{(\d{1,30})\}")
_RATIONAL = re.compile(r"[-+]?\d{1,30}(?:\.\d{1,30}|/\d{1,30})?")


def _same_value(a: str, b: str) -> bool:
    """Whether two raw values (`$x = -2$`, `\\frac{3}{2}`, `1.5`, `3 \\sqrt{2}`) are one value: numerically equal
    when both are simple numbers (an integer, a decimal, a fraction `a/b` or `\\frac{a}{b}`), else equal as written
    (their spaces, `$`, `\\left` / `\\right` and a `\\dfrac`'s d aside)."""
    a, b = (_simple_form(v) for v in (a, b))
    if _RATIONAL.fullmatch(a) and _RATIONAL.fullmatch(b):
        try:
            return Fraction(a) == Fraction(b)
        except ZeroDivisionError:
            return False
    return a == b


def _other_number(a: str, b: str) -> bool:
    """Whether two raw values are simple numbers (as `_same_value` reads them) of different values: not merely
    written otherwise (`\\sqrt 2`, `\\frac12`, `4.` for `\\sqrt{2}`, `\\frac{1}{2}`, `4`)."""
    a, b = (_simple_form(v) for v in (a, b))
    if not (_RATIONAL.fullmatch(a) and _RATIONAL.fullmatch(b)):
        return False
    try:
        return Fraction(a) != Fraction(b)
    except ZeroDivisionError:
        return False


def _simple_form(value: str) -> str:
    """A raw value's right side without spaces, `$`, `\\left` / `\\right`, `\\,`, with `\\dfrac` / `\\tfrac` as
    `\\frac` and a fraction of integers as `a/b`."""
    value = re.sub(r"\$|\s|\\[,!;]|\\left|\\right", "", value).rsplit("=", 1)[-1]
    value = re.sub(r"\\[dt]frac", r"\\frac", value)
    return _FRACTION.sub(r"\1\2/\3", value) if _FRACTION.fullmatch(value) else value


def _negative(value: str) -> bool:
    """Whether a raw value (`$x = -2$`, `-\\frac{1}{2}`) is negative: its right side opens with a minus sign."""
    return _DELIMITERS.sub("", value).rsplit("=", 1)[-1].strip().startswith("-")


def _assigned(before: str, value: str) -> bool:
    """Whether the value before a box's "or" is assigned to a variable (`x = -3, or x = \\boxed{5}`, `$x = -3$`): one
    of two values offered for it."""
    if value.startswith("$"):
        return _OR_ASSIGNED.fullmatch(value[1:-1]) is not None
    return _OR_ASSIGNED_END.search(before) is not None


def _equation_before_or(before: str, value: str) -> bool:
    """Whether the value before a box's "or" is an equation or inequality, not a value offered (`$2x = 10$, or $x =
    \\boxed{5}$`, `n - 3 = 4, or n = \\boxed{7}`: the "or" restates it solved, as MATH's solutions write); `x = 4 or
    x = \\boxed{5}` offers 4."""
    if value.startswith("$"):
        return _OR_RELATION_IN.search(value) is not None and _OR_ASSIGNED.fullmatch(value[1:-1]) is None
    return _OR_RELATION_END.search(before) is not None and _OR_ASSIGNED_END.search(before) is None


# a variable assigned at the start of what follows that "or" (`or $x = 4$`): the value after it is read
_ASSIGNED_START = re.compile(r"^((?:\s|\$|\\[(\[ ])*)[A-Za-z]\w{0,3}\s*=(?!=)")
_WORD_AFTER_VALUE = re.compile(r"(?:\\text\s*\{\s*)?([A-Za-z]{2,})(?![A-Za-z])")  # a word, not a variable
# a value's unit (`3 hours` of `or 3 hours if it rains`, `3 m`, `$3$ \text{ km}`), passed over to the word after it
_UNIT_AFTER_VALUE = re.compile(r"(?:\\text\s*\{\s*)?([A-Za-z]+(?:/[A-Za-z]+)?)\s*\}?[\s$]*")
# `or 14 if ...`, `or 5 with the empty set`, `or 6 including the stop`
_CONDITIONS = frozenset("if when whenever unless depending assuming provided with without including excluding".split())
# a case named as a condition (`— or $4$ in that case`, `, or 4 in which case ...`, `(or $4$ otherwise)`): read as "if"
_OTHER_CASE = re.compile(
    r"(?:in\s+(?:that|this|which|the\s+other|either|such\s+a)\s+case|otherwise)(?![A-Za-z])", re.IGNORECASE
)
# a word after "or" that offers another value, hedged; "or else" too (`$\boxed{12}$, or else 13` and `13, or else
# \boxed{12}` were right for 12: "else" read as words restating it); not "or at least 12", which restates
_HEDGING = r"(?:(?:maybe|perhaps|possibly|probably)(?:[\s,]+even)?|else)"  # `or maybe even 13` too
_MAYBE = re.compile(rf"^{_HEDGING}\b[\s,]*", re.IGNORECASE)
# "or", then "more" or "less" and an adverb (`or more precisely`, `or more simply, twelve`, `or more likely`), or a
# bound (`or at least 7`, `or at most 7`: `\boxed{6}, or at least 7` was right for 6): no open range; a value after
# it is read as one offered (the same value restated, or another)
_REWORDED = re.compile(r"^(?:(?:more|less)\s+[A-Za-z]+ly|at\s+(?:least|most))\b[\s,]*", re.IGNORECASE)
# an open range after the "or" (`\boxed{12} or more`, `or more than that`): no single value either
_OPEN_ENDED = re.compile(r"(?:more|less|fewer|greater|higher|lower|larger|smaller|above|below)(?![A-Za-z])", re.I)
# a number written as a word, up to ninety-nine (`four or \boxed{5}` was right for 5: no digit before the "or"; a
# compound is one number: `twenty-one or \boxed{21}` was read 1 or 21)
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split()
    )
}
for _tens, _word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2):
    _NUMBER_WORDS[_word] = 10 * _tens
    for _unit, _unit_word in enumerate("one two three four five six seven eight nine".split(), start=1):
        _NUMBER_WORDS[f"{_word}-{_unit_word}"] = 10 * _tens + _unit
_NUMBER_WORD = "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))  # a compound before its parts
# a value (a number, or math holding a digit), then "or", right before a box: what `_hedge_before` reads
# (a number, `\frac{1}{2}` or `\sqrt{2}` in display math, `$...$`; closing `\)` and spacing before the "or", a
# hedging word after it: `\(4\) or \(\boxed{5}\)`, `4 \quad\text{or}\quad \boxed{5}`, `4, or maybe \boxed{5}`,
# `4 (or \boxed{5})`); an AMC choice too (`either (B) or $\boxed{(C)}$` was right for C: no digit before the "or"),
# and a number word (`_NUMBER_WORDS`); a math group opens at an unescaped `$` (`$\$2.50$` is a sum of money); a
# number's `{,}` separators are its own (`\$1{,}200, or \boxed{1200}`: not 200)
_OR_BEFORE = re.compile(
    r"(?<![\w.])(?P<value>[-+]?(?:\d(?:[\d.,/]|\{,\}(?=\d))*|\\[dt]?frac\{[^{}]*\d[^{}]*\}\{[^{}]*\}|\\sqrt\{[^{}]*\d[^{}]*\})"
    rf"|(?<!\\)\$[^$\n]*\d[^$\n]*\$|(?:\\textbf\s*\{{\s*)?\(\s*[A-E]\s*\)\}}?|(?i:{_NUMBER_WORD})(?![A-Za-z]))"
    rf"(?:\s|\$|\\[)\] ]|\\q?quad|~)*(?:,|\(|{_DASH})?\s*"
    r"(?:(?<![A-Za-z\\])or(?![A-Za-z])|\\(?:text|textrm|mbox|mathrm)\s*\{\s*or\s*\})"
    rf"(?:\s|\$|\\[(\[ ]|\\q?quad|~)*(?P<hedged>{_HEDGING}(?![A-Za-z])[\s,]*)?"
    r"(?:\s|\$|\\[(\[ ]|\\q?quad|~)*(?:[A-Za-z]\w{0,3}\s*=\s*)?\$?\s*$"
)
# what `_equation_before_or` reads: a relation, and a value assigned to a variable (`x = 4`, not `2x = 10`)
_OR_RELATION = r"(?:=|<|>|\u2264|\u2265|\u2260|\\(?:le|ge|leq|geq|leqslant|geqslant|lt|gt|ne|neq)(?![A-Za-z]))"
_OR_RELATION_IN = re.compile(_OR_RELATION)
_OR_RELATION_END = re.compile(_OR_RELATION + r"\s*$")  # a number right after a relation: its right side
_OR_ASSIGNED = re.compile(rf"\s*[A-Za-z]\w{{0,3}}\s*=(?:(?!{_OR_RELATION}).)*")
_OR_ASSIGNED_END = re.compile(r"(?<![\w^}])[A-Za-z]\w{0,3}\s*=\s*$")


# ", or" (or a dash and "or"): what comes after may restate what comes before
_COMMA_OR = re.compile(rf"(?:,|{_DASH})[\s$]*(?:or|\\text)")
_ABOUT_END = re.compile(r"(?<![A-Za-z])(?:about|roughly|around|nearly|almost)\s*\$?\s*$", re.I)  # a rounding
# a value offered alone (a number, a fraction, a root, a percent, an AMC choice: `(B), or \boxed{(C)}`, a number
# word: `four, or \boxed{5}`), not math around one (`2^{10}`, `\binom{4}{2}`)
_LONE_OFFER = re.compile(
    r"\s*(?:[-+]?(?:\d(?:[\d.,/]|\{,\}(?=\d))*|\\[dt]?frac\{\d+\}\{\d+\}|\\sqrt\{\d+\})\s*(?:\\?%)?"
    rf"|(?:\\textbf\s*\{{\s*)?\(\s*[A-E]\s*\)\}}?|(?i:{_NUMBER_WORD}))\s*"
)
# what makes the value after it an operand of the boxed result (`40% of 30`, `1 in 4`, `10 - 3`, `3 \times 4`, `1:3`,
# `5 choose 2`, `twice 18`, `2023 mod 7`, `6 ... among 36`), a base (`in base 2`), a sign written out (`negative 3`),
# an amount converted (`\$2.50`) or an approximation (`\approx 0.33, or \boxed{\frac{1}{3}}`)
_OPERAND_END = re.compile(
    r"(?:(?<![A-Za-z])(?:of|in|to|by|per|from|than|into|over|times|plus|minus|approximately|choose|twice|thrice"
    r"|double|triple|among|base|b?mod|negative)|[-+*/^:\u2248]"
    r"|\\(?:times|cdot|div|approx|\$))"
    r"\s*\$?\s*$",
    re.I,
)


_OR_WORD = re.compile(r"(?<![A-Za-z\\])or(?![A-Za-z])")  # "or" as a word: 4 or 5, 4 \text{ or } 5 (not \operatorname)
_MATH_GROUP = re.compile(r"\$\$?([^$]+)\$\$?")
_BETWEEN_VALUES = re.compile(r"\s*(?:,|;|/|and|\\text\s*\{\s*and\s*\})?\s*")  # what may separate two values
_MANY_VALUES = re.compile(r",|;|(?<![A-Za-z\\])(?:or|and)(?![A-Za-z])|\\cup|\\pm|\\mp")  # a multi-valued truth


def is_hedge(answer: str, ground_truth: str) -> bool:
    """Whether the final `answer` offers several values where `ground_truth` is one value: a word "or" (`540 or
    541`, `x = 4 \\text{ or } x = 5`), or two math groups holding different values with only a separator between
    them (`$540$, $541$`, `$540$ and $541$`). A remark in math around one value (`$540$ (since $m = 37$)`) is none.

    >>> is_hedge("$540$ or $541$", "540"), is_hedge("$540$ (since $m=37$)", "540"), is_hedge("4 or 5", "4, 5")
    (True, False, False)
    """
    if _MANY_VALUES.search(clean_answer(ground_truth)):  # 1,000 is one value
        return False
    if _OR_WORD.search(answer) or len({clean_answer(b) for b in _boxed_contents(answer)}) >= 2:  # 4 or 5; [4] [5]
        return True
    if len({clean_answer(g) for g in _MATH_GROUP.findall(answer)}) < 2:
        return False
    between = _MATH_GROUP.sub("\0", answer).split("\0")[1:-1]
    return all(_BETWEEN_VALUES.fullmatch(b) for b in between)


_OR_PARTS = re.compile(
    r"\\(?:text|textrm|mbox|mathrm)\s*\{\s*or\s*\}|(?<![A-Za-z\\])or(?![A-Za-z])"
)  # between a hedge's values


# a remark right after a value in the answer's own text that rejects it (`x = -2 (rejected, since x > 0)`, `-2
# (extraneous)`, `-2, which is extraneous`, `-2 — not valid`); a negation before the word rejects nothing (`(not
# rejected)`), nor the word opening a phrase about something else (`impossible to decide`, `excluded the empty set`,
# `rejected x = -2`: another value named) or set under a condition (`invalid if n must be odd`): after it only an
# end, a reason, a noun for the value, or after "impossible" a verb but one of knowing (`impossible to be
# negative` rejects, `impossible to tell` does not); the value may be named before it (`(-2 is rejected)`:
# `_rejects_itself`)
_REJECTED_REMARK = re.compile(
    rf"(?:\(\s*(?:(?P<named>(?:[A-Za-z]\s*=\s*)?[-+]?\d[\d.]*)\s+(?:is|was)\s+)?"
    rf"|,\s*(?:which\s+(?:is|was)\s+|but\s+(?:it|this)\s+is\s+)?|\s*{_DASH}\s*)"
    r"(?:rejected|extraneous|discarded|excluded|invalid|impossible"
    r"|not\s+(?:valid|allowed|possible|a\s+solution|in\s+the\s+domain))(?![A-Za-z])"
    r"(?![^()]*(?<![A-Za-z])(?:if|unless|when|whenever|depending)(?![A-Za-z]))"
    r"(?:\s*(?:[,;:.)]|$)|\s+(?:since|as|because|for|by|due|given|here|roots?|solutions?|values?|answers?|cases?)"
    r"(?![A-Za-z])|(?<=possible)\s+to\s+(?!(?:decide|say|tell|know|determine|distinguish|choose|pick|be\s+sure)"
    r"(?![A-Za-z]))[A-Za-z])[^()]*\)?$",
    re.IGNORECASE,
)


def without_rejected(answer: str) -> str:
    """The one value of a hedge (`4 or 5`: "or" parts, `_OR_PARTS`) that the answer does not reject itself right
    after it (`_REJECTED_REMARK`: `x = 3 or x = -2 (rejected, since x > 0)` reads as `x = 3`, as a grader reads it:
    a value struck out is not offered), else `answer` as it is (no value rejected, two or none left)."""
    if len(answer) > MAX_ANSWER_CHARS or not _OR_WORD.search(answer):
        return answer
    parts = [_END_MARKS.sub("", _without_separator(p)).strip() for p in _OR_PARTS.split(answer)]
    kept = [p for p in parts if not _rejects_itself(p)]
    return kept[0] if len(kept) == 1 < len(parts) and re.search(r"\d", kept[0]) else answer


def _rejects_itself(part: str) -> bool:
    """Whether a hedge's `part` is a value and a remark rejecting it (`_REJECTED_REMARK`), one that names no value or
    names this one (`-2 (-2 is rejected)`; not `-2 (3 is rejected)`)."""
    m = _REJECTED_REMARK.search(part)
    values = re.findall(r"[-+]?\d[\d.]*", part[: m.start()]) if m else []
    if not values:
        return False
    named = m.group("named")
    return named is None or re.sub(r"^[A-Za-z]\s*=\s*", "", named).rstrip(".") == values[-1].rstrip(".")


def values_offered(hedge: str) -> list[str]:
    """The values a hedge (`is_hedge`) offers, raw (`_values_offered`), each without the parenthesis and end marks
    its "or" left (`_unparenthesized`)."""
    return [_unparenthesized(v) for v in _values_offered(hedge)]


def _values_offered(hedge: str) -> list[str]:
    """The values a hedge offers, raw: the parts around its word "or", else its boxes, else its math groups (none
    when the text around those boxes or groups holds a digit: another value). A part's comma or dash before its
    "or" is no part of its value (`0.25, or \\boxed{\\frac{1}{4}}`, `5 — or \\boxed{5}`)."""
    if _OR_WORD.search(hedge):
        return [_undelimited(_without_separator(part)) for part in _OR_PARTS.split(hedge)]
    boxes = _boxes(hedge)
    if len(boxes) >= 2:
        values, outside, pos = [c for _, c in boxes], [], 0
        for j, c in boxes:
            outside.append(hedge[pos : hedge.rfind("\\", pos, j)])
            pos = j + len(c) + 2
        outside.append(hedge[pos:])
        outside = "".join(outside)
    else:
        values, outside = _MATH_GROUP.findall(hedge), _MATH_GROUP.sub(" ", hedge)
    return [] if re.search(r"\d", outside) else values


def _without_separator(part: str) -> str:
    """A hedge's part without the comma or the dash (`_DASH`) that sets off the "or" after it."""
    part = part.strip()
    if part.endswith(("\u2013", "\u2014", "--")):
        return part.rstrip("-\u2013\u2014")
    return part.removesuffix(",")


def _undelimited(part: str) -> str:
    """A hedge's part without the math delimiter its "or" cut from its pair (`\\(4\\) or \\(\\boxed{5}\\)`)."""
    part = part.strip()
    for opening, closing in (("\\(", "\\)"), ("\\[", "\\]")):
        if part.endswith(closing) and opening not in part:
            part = part[: -len(closing)].strip()
        if part.startswith(opening) and closing not in part:
            part = part[len(opening) :].strip()
    return part


def _unparenthesized(value: str) -> str:
    """`value` without the unmatched parenthesis a hedge's "or" left at its end (`$\\frac{1}{2}$ (or $0.5$)`, and
    the sentence's end marks after it: `(or $0.5$).`)."""
    value = _END_MARKS.sub("", value.strip()).strip()
    if value.endswith("(") and value.count("(") > value.count(")"):
        return value[:-1]
    if value.endswith(")") and value.count(")") > value.count("("):
        return value[:-1]
    return value
