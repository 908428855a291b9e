"""Notation a model writes that the equivalence check does not parse, rewritten as the LaTeX it means: Unicode
radicals, vulgar fractions and infinity (`unicode_to_latex`), repeating decimals (`repeating_to_fraction`), and
fractions and roots whose arguments are not braced (`braced_arguments`: `\\sqrt[3]2`, `\\frac\\pi2`).
`rewards.math.clean_answer` applies them to answers of at most `MAX_ANSWER_CHARS` characters. Numbers are read up to
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


# a command whose arguments LaTeX reads as one token each when they are not braced: `\frac12`, `\sqrt[3]2`
_ARGUMENT_COMMAND = re.compile(r"\\(?:([dtc]?frac)|sqrt)(?![A-Za-z])")
_TOKEN = re.compile(r"\s*(\\[A-Za-z]+|[A-Za-z0-9{])")  # an argument: a letter, a digit, a command, or a `{`


def braced_arguments(s: str) -> str:
    """`s` with the unbraced arguments of `\\frac` and `\\sqrt` braced, as LaTeX reads them (one token each; the
    equivalence check reads `\\frac12` and `\\sqrt3` but not `\\sqrt[3]2`, `\\frac\\pi2` or `2^\\frac12`),
    and such a command after `^` or `_` braced whole. An argument that is itself a command taking arguments
    (`\\sqrt\\frac12`, no valid LaTeX) leaves its command as written. Linear: the braces are matched once. Braces
    nested deeper than MAX_BRACE_DEPTH leave `s` as it is (the rewrite recurses into braced arguments).

    >>> braced_arguments("4\\\\sqrt[3]2 + \\\\frac\\\\pi2"), braced_arguments("2^\\\\frac12")
    ('4\\\\sqrt[3]{2} + \\\\frac{\\\\pi}{2}', '2^{\\\\frac{1}{2}}')
    """
    if "frac" not in s and "\\sqrt" not in s:
        return s
    closing, deepest = _matching_braces(s)
    return s if deepest > MAX_BRACE_DEPTH else _braced(s, 0, len(s), closing)


MAX_BRACE_DEPTH = 50  # three stack frames per level: far below Python's recursion limit (an answer of at most
# MAX_ANSWER_CHARS = 300 characters nests at most 50 `\frac{`)


def _matching_braces(s: str) -> tuple[dict[int, int], int]:
    """The position of the `}` closing each `{` of `s` that is closed, and the deepest nesting of braces."""
    stack, closing, deepest = [], {}, 0
    for i, ch in enumerate(s):
        if ch == "{":
            stack.append(i)
            deepest = max(deepest, len(stack))
        elif ch == "}" and stack:
            closing[stack.pop()] = i
    return closing, deepest


def _braced(s: str, pos: int, stop: int, closing: dict[int, int]) -> str:
    """`braced_arguments` of `s[pos:stop]`."""
    out = []
    while (m := _ARGUMENT_COMMAND.search(s, pos, stop)) is not None:
        out.append(s[pos : m.start()])
        command, pos = _command_braced(s, m, stop, closing)
        after_power = "".join(out[-1:]).rstrip().endswith(("^", "_"))
        out.append(f"{{{command}}}" if after_power and command != m.group() else command)
    out.append(s[pos:stop])
    return "".join(out)


def _command_braced(s: str, m: re.Match, stop: int, closing: dict[int, int]) -> tuple[str, int]:
    """The command matched by `m` (`_ARGUMENT_COMMAND`) with its arguments braced, and where it ends in `s`; the
    command alone when an argument is missing or takes arguments itself."""
    parts, pos = [m.group()], m.end()
    if m.group(1) is None and (index := _ROOT_INDEX.match(s, pos, stop)):  # \sqrt[3]: the root's index
        parts.append(index.group().strip())
        pos = index.end()
    for _ in range(2 if m.group(1) else 1):
        argument = _argument(s, pos, stop, closing)
        if argument is None:
            return m.group(), m.end()
        parts.append(f"{{{argument[0]}}}")
        pos = argument[1]
    return "".join(parts), pos


_ROOT_INDEX = re.compile(r"\s*\[[^\[\]{}]*\]")


def _argument(s: str, pos: int, stop: int, closing: dict[int, int]) -> tuple[str, int] | None:
    """(the argument at `pos`, a braced one with its own arguments braced, and its end), or None."""
    m = _TOKEN.match(s, pos, stop)
    if m is None:
        return None
    if m.group(1) == "{":
        end = closing.get(m.start(1), stop)
        return None if end >= stop else (_braced(s, m.end(), end, closing), end + 1)
    if _ARGUMENT_COMMAND.fullmatch(m.group(1)) or m.group(1) in ("\\left", "\\right"):
        return None
    return m.group(1), m.end()
