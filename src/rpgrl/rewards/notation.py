"""Notation a model writes that the equivalence check does not parse, rewritten as the LaTeX it means: Unicode
radicals, vulgar fractions and infinity (`unicode_to_latex`), and repeating decimals (`repeating_to_fraction`).
`rewards.math.clean_answer` applies both to answers of at most `MAX_ANSWER_CHARS` characters. Numbers are read up to
20 digits (a mixed number's whole part) and 50 (a repeating decimal's parts), so no pattern backtracks over a long run
of digits and no integer conversion meets Python's digit limit. Standard library only.
"""

from __future__ import annotations

import re
from fractions import Fraction

_VULGAR = {"\u00bd": (1, 2), "\u2153": (1, 3), "\u2154": (2, 3), "\u00bc": (1, 4), "\u00be": (3, 4),
           "\u2155": (1, 5), "\u2156": (2, 5), "\u2157": (3, 5), "\u2158": (4, 5), "\u2159": (1, 6),
           "\u215a": (5, 6), "\u2150": (1, 7), "\u215b": (1, 8), "\u215c": (3, 8), "\u215d": (5, 8),
           "\u215e": (7, 8), "\u2151": (1, 9), "\u2152": (1, 10)}  # fmt: skip
# a fraction sign and the whole number before it (none, or one of at most 20 digits: a longer run is left as written)
_VULGAR_RE = re.compile(f"(?<!\\d)(\\d{{1,20}})?([{''.join(_VULGAR)}])")
_RADICALS = {"\u221a": "\\sqrt", "\u221b": "\\sqrt[3]", "\u221c": "\\sqrt[4]"}  # square, cube, fourth roots
_RADICAND = re.compile(r"\s*(\d+(?:\.\d+)?|\\[A-Za-z]+|[^\W\d_])")  # what an unbracketed radical reads


def bracket_end(text: str, start: int) -> int | None:
    """Index just past the bracket closing the `(` or `{` at `start`, or None."""
    opening = text[start]
    closing, depth = ")" if opening == "(" else "}", 0
    for i in range(start, len(text)):
        depth += (text[i] == opening) - (text[i] == closing)
        if depth == 0:
            return i + 1
    return None


def _vulgar(m: re.Match) -> str:
    (num, den), whole = _VULGAR[m.group(2)], m.group(1)
    frac = f"\\frac{{{num}}}{{{den}}}"
    if whole:
        return f"({whole}+{frac})"  # 2\u00bd is the mixed number 2 + 1/2
    return f"{{{frac}}}" if m.start() and m.string[m.start() - 1] in "^_" else frac  # 2^\u00bd: braced


# 0.1\overline{6}, -2.\overline{27}, 0.\overline3; not inside a longer number (1,000.\overline{3}, 0.1\overline{6}7)
_REPEATING = re.compile(r"(?<![\d.,])(-?)(\d{0,50})\.(\d{0,50})\\overline\s*(?:\{(\d{1,50})\}|(\d))(?![\d.])")


def _repeating(m: re.Match) -> str:
    sign, whole, fixed, rep = m.group(1), m.group(2) or "0", m.group(3), m.group(4) or m.group(5)
    value = int(whole) + Fraction(int(fixed + rep) - int(fixed or "0"), 10 ** len(fixed) * (10 ** len(rep) - 1))
    return f"{sign}\\frac{{{value.numerator}}}{{{value.denominator}}}"


def repeating_to_fraction(s: str) -> str:
    """A repeating decimal written with `\\overline` as the exact fraction it is.

    >>> repeating_to_fraction("0.1\\overline{6}"), repeating_to_fraction("-2.\\overline{27}")
    ('\\\\frac{1}{6}', '-\\\\frac{25}{11}')
    """
    return _REPEATING.sub(_repeating, s)


def unicode_to_latex(s: str) -> str:
    """Unicode math as LaTeX, which the equivalence check parses: vulgar fractions (`\u00bd` -> `\\frac{1}{2}`, a
    mixed number `2\u00bd` -> `(2+\\frac{1}{2})`), radicals over a braced or parenthesised group, a number, a
    letter or a command with its braced arguments (`\u221a2`, `3\u221a(x+1)`, `\u221b{27}`, `\u221a\\frac{1}{4}`),
    and `\u221e` (`\\infty`). Other Unicode (`\u2212`, `\u00d7`, `\u2264`, `\u03c0`) math-verify reads itself.

    >>> unicode_to_latex("3\u221a2 + \u00be")
    '3\\\\sqrt{2} + \\\\frac{3}{4}'
    """
    s = _VULGAR_RE.sub(_vulgar, s).replace("\u221e", "\\infty")
    for i in range(len(s) - 1, -1, -1):  # from the right, so a radical's radicand is converted first: \u221a\u221a16
        if s[i] in _RADICALS:
            s = s[:i] + _radical(s, i)
    return s


def _radical(s: str, i: int) -> str:
    """s[i:] with the radical sign at i written as LaTeX over its radicand (unchanged if it has none)."""
    root, j = _RADICALS[s[i]], i + 1
    while j < len(s) and s[j].isspace():
        j += 1
    if j < len(s) and s[j] in "({" and (end := bracket_end(s, j)) is not None:
        radicand = s[j + 1 : end - 1] if s[j] == "{" else s[j:end]  # {...} keeps its contents, (...) its parentheses
        return f"{root}{{{radicand}}}{s[end:]}"
    m = _RADICAND.match(s, i + 1)
    if m is None:
        return s[i:]
    end = m.end()
    while m.group(1).startswith("\\") and end < len(s) and s[end] == "{":  # a command's arguments: \frac{1}{4}
        end = bracket_end(s, end) or len(s)
    return f"{root}{{{s[m.start(1) : end]}}}{s[end:]}"
