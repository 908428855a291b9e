"""How a model writes an answer around its value, shared by `rewards.math` (which answer is judged, and whether it
equals the truth) and `rewards.hedges` (whether it commits to one value): the boxes of a text (`_boxes`), the
presentation stripped before any comparison (`clean_answer`), the marks that end a sentence, a paragraph or an
answer, and the words that name a unit (`_is_unit`) and its size (`unit_scale`). Standard library only; it imports
no other reward module but `notation`.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rpgrl.rewards.notation import braced_arguments, repeating_to_fraction, unicode_to_latex

MAX_ANSWER_CHARS = 300  # longer final answers are judged wrong (MATH's longest answer has 159 characters)
MAX_NESTING = 12  # deeper {([ nesting is judged wrong (the ANTLR parser recurses)

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")

_MODULUS = re.compile(r"\\pmod\s*\{[^{}]*\}|\(\s*(?:\\?mod|\\bmod)\s*[^()]*\)")
_DELIMITERS = re.compile(r"\$|\\\(|\\\)|\\\[|\\\]")
# between digit groups: 1,000  1{,}000  1\text{,}000  1\,000  1\!000  1\ 000  1~000
_SEPARATOR = r"(?:,|\{,\}|\\text\{,\}|\\,|\\!|\\ |~)"
_THOUSANDS = re.compile(rf"(?<=\d){_SEPARATOR}(?=\d{{3}}(?!\d))")
# a number written with thousands separators, alone or assigned (x = 1,000): elsewhere a comma separates elements
_GROUPED_NUMBER = re.compile(rf"(?:[A-Za-z]\w*\s*=\s*)?-?\d{{1,3}}(?:{_SEPARATOR}\d{{3}})+(?:\.\d+)?")
_MARKDOWN = re.compile(r"\*\*|__|`")
_TEXT_LABEL = re.compile(r"^\s*\\(?:text|textbf|mathrm)\s*\{[^{}]*answer(?:\s*:|\s+is)?\s*\}\s*:?\s*", re.IGNORECASE)

# the marks of a text's structure
_SENTENCE_END = re.compile(r"\.\s+(?=[A-Z])")  # a period before the next sentence (not 3.5, not \frac{1}{2}.)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# marks that may end an answer: a period, a semicolon, a line break `\\`, a check mark, an end-of-proof sign
_END_MARKS = re.compile(r"(?:\s*(?:[.;:!]|\\\\|\u2713|\u2714|\\checkmark|\\blacksquare|\\square|\\qed|\\Box))+$")
# a ground truth that is a choice letter: C, (C), \text{(C)}, \textbf{(C)}
_GOLD_CHOICE = re.compile(r"(?:\\(?:textbf|text|mathrm)\s*\{\s*)?(\(\s*)?([A-E])(?(1)\s*\))\s*\}?")


def _boxes(text: str) -> list[tuple[int, str]]:
    """(position of its opening brace, contents) of every complete `\\boxed{...}` / `\\fbox{...}` in `text` that
    lies in no other box (braces balanced), left to right; a box inside a box is part of its contents. One pass
    over the braces, and the contents copied once (linear: a response full of unclosed or nested boxes must not
    cost quadratic time or memory)."""
    box_opens = {m.end() - 1 for m in _BOXED.finditer(text)}  # positions of the "{" that open a box
    if not box_opens:
        return []
    stack, spans = [], []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            j = stack.pop()
            if j in box_opens:
                while spans and spans[-1][0] > j:  # boxes closed inside this one
                    spans.pop()
                spans.append((j, m.start()))
    return [(j, text[j + 1 : end]) for j, end in spans]


def _boxed_contents(text: str) -> list[str]:
    """Contents of every complete `\\boxed{...}` / `\\fbox{...}` in `text`, left to right (`_boxes`)."""
    return [content for _, content in _boxes(text)]


def clean_answer(answer: str) -> str:
    """Presentation stripped before the equivalence check: boxes (contents kept, several distinct ones joined by
    ", "), math delimiters and a currency `\\$`, markdown emphasis, trailing periods, a trailing percent sign, a
    trailing degree sign (`°`, `\\degree`), a congruence's modulus (`N \\equiv 42 \\pmod{1000}` and `42 (mod 1000)`
    read as 42), and thousands separators in a number (`1,000`, `x = 1\\,000`; not between elements: `\\{100,200\\}`
    stays a set); unbraced arguments are braced (`\\sqrt[3]2`: `notation.braced_arguments`).

    >>> clean_answer("The answer is $\\\\boxed{1\\\\,000}$.")
    '1000'
    >>> clean_answer("**-3.5%**")
    '-3.5'
    """
    s = answer
    for _ in range(MAX_NESTING if len(answer) <= 4 * MAX_ANSWER_CHARS else 1):  # \boxed{\boxed{5}}: contents
        boxed = _boxed_contents(s)
        if not boxed:
            break
        s = ", ".join(dict.fromkeys(boxed))  # a value boxed twice is one value: \boxed{12} ... \boxed{12}
    s = _TEXT_LABEL.sub("", s)  # \boxed{\text{Final Answer: } 540}: the label is no part of the answer
    if len(s) <= MAX_ANSWER_CHARS:  # (a longer answer is judged wrong; `rpgrl eval`'s vote still groups it)
        s = braced_arguments(repeating_to_fraction(unicode_to_latex(s)))  # \sqrt[3]2: \sqrt[3]{2}
    s = _MARKDOWN.sub("", _DELIMITERS.sub("", s.replace("\\$", ""))).strip()  # \$4.50: a currency sign first
    s = s.rstrip(".").strip()
    s = re.sub(r"\\?%$", "", s).strip()
    s = re.sub(r"(?<=\d)\s*(?:\u00b0|\\degree)$", "", s)  # 336°, 336\degree (^\circ is the authors' to remove)
    s = _MODULUS.sub("", s.split("\\equiv")[-1]).strip()  # N \equiv 42 \pmod{1000}, 42 (mod 1000): AIME's remainders
    if _GROUPED_NUMBER.fullmatch(s):  # not in {100,200}, [0,100] or (1,500): there a comma separates elements
        s = _THOUSANDS.sub("", s)
    return s


# a word of a unit: a unit of length, area, volume, time, mass, money or angle (singular, plural, abbreviated; the
# only single letters SI's m, g, s, l, h), or a plural count noun (`apples`, `students`, `ways`: 4 letters or more
# ending in one `s`; `people`, `children`), with connectors inside a unit of several words (`square units`,
# `meters per second`, `km/h`); not a word that changes the value (`pi`, `squared`, `factorial`, `tenths`, `halves`,
# `times`, `dozens`, `gross`) or hedges (`or`, `perhaps`). An allowlist: a word not known to name a unit keeps the
# answer as it is.
_UNIT_WORDS = frozenset(
    "m g s l h mm cm dm km nm mi ft yd kg mg lb lbs oz ml cl dl cc gal qt sec secs min mins hr hrs yr yrs ms mph kph "
    "kmh deg rad "
    "meter meters metre metres millimeter millimeters millimetre millimetres centimeter centimeters centimetre "
    "centimetres kilometer kilometers kilometre kilometres inch inches foot feet yard yards mile miles "
    "acre acres hectare hectares "
    "liter liters litre litres milliliter milliliters millilitre millilitres gallon gallons quart quarts pint pints "
    "cup cups teaspoon teaspoons tablespoon tablespoons "
    "second seconds minute minutes hour hours day days week weeks month months year years decade decades century "
    "centuries "
    "gram grams kilogram kilograms milligram milligrams pound pounds ounce ounces ton tons tonne tonnes "
    "dollar dollars cent cents penny pennies nickel nickels dime dimes euro euros yen yuan rupee rupees "
    "degree degrees radian radians celsius fahrenheit kelvin "
    "in unit units people children men women sheep fish mice geese teeth".split()  # and irregular plurals
)
_UNIT_CONNECTORS = frozenset("square cubic sq cu per".split())
_PLURAL_NOUN = re.compile(r"[a-z]{2,}[^s]s")
_NOT_COUNT_NOUNS = re.compile(  # plural-looking words that change the value or are no nouns
    r".*ths|halves|thirds|quarters|ones|twos|threes|tens|hundreds|thousands|millions|billions|trillions|dozens|"
    r"scores|pairs|couples|percents|times|sometimes|perhaps|always|besides|towards|afterwards|whereas|.*(?:us|is)"
)


def _is_unit(words: str, one: bool = False) -> bool:
    """Whether `words` (a number's text after it: `cm`, `square units`, `km/h`, `apples`) names a unit (`_UNIT_WORDS`,
    a plural count noun, connectors inside, `squared` / `cubed` after a unit). `one`: the number is 1, so a count
    noun is singular (`1 way`, `1 solution`)."""
    parts = words.lower().replace("/", " ").split()
    if not parts or parts[-1] in _UNIT_CONNECTORS:
        return False

    def noun(w: str) -> bool:
        plural = w + "s" if one and not w.endswith("s") else w
        return bool(_PLURAL_NOUN.fullmatch(plural)) and not _NOT_COUNT_NOUNS.fullmatch(plural)

    return all(
        w in _UNIT_WORDS or w in _UNIT_CONNECTORS or (i > 0 and w in ("squared", "cubed")) or noun(w)
        for i, w in enumerate(parts)
    )


# a unit's quantity and its size in that quantity's base unit (metres, seconds, grams, cents, litres): what two values
# of one quantity in two units are compared by (`5 km or 5000 m`); units of an irrational ratio (degrees, radians) and
# of area or volume written with connectors are not listed
_SCALES: dict[str, tuple[str, Fraction]] = {}
for _quantity, _entries in (
    ("length", "mm millimeter millimeters millimetre millimetres:1/1000 cm centimeter centimeters centimetre "
     "centimetres:1/100 m meter meters metre metres:1 km kilometer kilometers kilometre kilometres:1000 inch "
     "inches:127/5000 ft foot feet:381/1250 yd yard yards:1143/1250 mi mile miles:201168/125"),
    ("time", "s sec secs second seconds:1 min mins minute minutes:60 h hr hrs hour hours:3600 day days:86400 "
     "week weeks:604800"),
    ("mass", "mg milligram milligrams:1/1000 g gram grams:1 kg kilogram kilograms:1000"),
    ("money", "cent cents penny pennies:1 dollar dollars:100"),
    ("volume", "ml milliliter milliliters millilitre millilitres:1/1000 l liter liters litre litres:1"),
):  # fmt: skip
    for _words, _size in re.findall(r"([a-z ]+):([\d/]+)", _entries):
        _SCALES.update(dict.fromkeys(_words.split(), (_quantity, Fraction(_size))))


def unit_scale(words: str) -> tuple[str, Fraction] | None:
    """(quantity, size in its base unit) of a unit named by `words` (`km`, `hours`, `\\text{ cm}`), else None."""
    word = re.sub(r"\\(?:text|textrm|mathrm|mbox)\s*\{|[{}\s.,;]", "", words).lower()
    return _SCALES.get(word)


_PART_NUMBER = re.compile(r"\s*\d{1,30}(?:\.\d{1,30})?\s*")


def compound_amount(parts: list[tuple[str, str]]) -> tuple[Fraction, list[Fraction]] | None:
    """(the amount in its quantity's base unit, the sizes of the units used) of one amount written in parts, each a
    (number, unit) pair (`2 hours and 30 minutes`, `5 feet and 3 inches`, `3 dollars, 25 cents`), as a reader adds
    them up; None unless that sum is beyond doubt: two parts at least, each a number >= 0 in a known unit
    (`unit_scale`) of one quantity, each unit smaller than the one before it and each later part less than one of
    that unit (`2 hours and 90 minutes`, `30 minutes and 2 hours` may be two answers: not added)."""
    if len(parts) < 2 or not all(_PART_NUMBER.fullmatch(number) for number, _ in parts):
        return None
    scales = [unit_scale(unit) for _, unit in parts]
    if any(scale is None for scale in scales) or len({quantity for quantity, _ in scales}) > 1:
        return None
    values, sizes = [Fraction(number.strip()) for number, _ in parts], [size for _, size in scales]
    for k in range(1, len(parts)):
        if not (sizes[k] < sizes[k - 1] and values[k] * sizes[k] < sizes[k - 1]):
            return None
    return sum(v * size for v, size in zip(values, sizes, strict=True)), sizes
