"""Math prompts and answers from files: training sets (parquet / JSONL) and the AIME/AMC evaluation files.

Layouts read:

* verl / DAPO parquet (DAPO-Math-17k, and the eval files of spec 10): `prompt` = chat messages
  `[{"role": "user", "content": ...}]`, ground truth under `reward_model.ground_truth`, optional `data_source`.
* JSONL, one object per line: `{"prompt": <question string or chat messages>, "answer": <string or number>}`,
  optional `data_source`.

Keys are dotted paths into a row (`reward_model.ground_truth`). The default answer key `answer` falls back to
`reward_model.ground_truth` when a file has no `answer` field, so both layouts load with the defaults.

Duplicates (`load_examples(dedupe=True)`, the default): a row whose (prompt text, answer) equals an earlier row's is
dropped (DAPO-Math-17k's original release repeats every problem about 100 times); the same prompt text with two
different answers is an error. The eval files keep their 32 copies: `load_benchmark` groups them into problems.

Every problem with a file is a `UsageError` naming the file and the row (0-based for parquet, 1-based line numbers for
JSONL): a missing file or column, an empty file, a malformed row. Needs pyarrow (the `math` / `train` extras).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from rpgrl.errors import UsageError, first_line

Messages = list[dict[str, str]]

# spec 7.5: the user message of the paper's prompt (a question is embedded between PRE and POST)
DAPO_PRE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_POST = '\n\nRemember to put your answer on its own line after "Answer:".'


DAPO_TEMPLATE = DAPO_PRE + "{question}" + DAPO_POST


def dapo_prompt(question: str) -> str:
    """The paper's user message for `question` (spec 7.5), exactly as stored in the eval files."""
    return DAPO_TEMPLATE.format(question=question)


@dataclass(frozen=True)
class Example:
    """One training row. `prompt`: a string (used as the user message) or chat messages; `row`: where it came from."""

    prompt: str | Messages
    answer: str
    data_source: str
    row: int

    @property
    def text(self) -> str:
        """The prompt's text (messages' contents joined by blank lines): the identity used to group and dedupe."""
        return prompt_text(self.prompt)


@dataclass(frozen=True)
class Problem:
    """One evaluation problem: its messages, ground truth, and how many copies of it the file holds."""

    data_source: str
    prompt: Messages
    answer: str
    copies: int

    @property
    def text(self) -> str:
        return prompt_text(self.prompt)


@dataclass(frozen=True)
class Benchmark:
    """The problems of one evaluation file, in order of first appearance. `name` is the file's stem."""

    name: str
    path: str
    problems: tuple[Problem, ...]


def prompt_text(prompt: str | Messages) -> str:
    return prompt if isinstance(prompt, str) else "\n\n".join(m["content"] for m in prompt)


# ---------------------------------------------------------------------------------------------------------------
# reading rows
# ---------------------------------------------------------------------------------------------------------------

_JOIN = "; one file per option: join several into one"  # a training file; a benchmark is one file each


def _read_rows(path: str | Path, several: str = _JOIN) -> tuple[list[dict[str, Any]], str]:
    """Rows of a parquet or JSONL file as plain dicts, and the word used to locate a row in errors. `several`: the
    advice for a path that is several joined by commas."""
    p = Path(path)
    if not p.exists():  # a relative path is read from where rpgrl runs (a resume elsewhere does not find it)
        here = "" if p.is_absolute() else f" (a relative path, looked for in {Path.cwd()})"
        several = several if "," in str(p) else ""  # in the last component or not: a/x.jsonl,/b/y.jsonl
        raise UsageError(f"data file not found: {p}{here}{several}")
    if not p.is_file():
        raise UsageError(f"{p} is not a file (pass one .parquet or .jsonl file per argument)")
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ModuleNotFoundError:
            raise UsageError("reading parquet needs pyarrow: pip install 'rpgrl[math]'") from None
        import pyarrow as pa

        try:  # read here: pyarrow takes only paths it can encode as UTF-8 (not a file name in another encoding), and
            with open(p, "rb") as f:  # pyarrow 26 reading a Python file object left threads that aborted the
                data = f.read()  # process at exit (134): it reads the bytes
        except OSError as e:  # e.g. no read permission
            raise UsageError(f"cannot read data file {p}: {e.strerror}") from None
        try:
            # one thread: pq.read_table's thread pools still aborted the process at exit in 1 run of 15 or so
            table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
            rows = table.to_pylist()
        except Exception as e:  # pyarrow raises several types for a corrupt / non-parquet file
            raise UsageError(f"{p}: not a readable parquet file ({first_line(e)})") from None
        narrow = {f.name: f.type for f in table.schema if _has_narrow_floats(f.type)}
        if narrow:
            rows = [{k: _narrow_floats(v, narrow[k]) if k in narrow else v for k, v in r.items()} for r in rows]
        return rows, "row"
    if suffix in (".jsonl", ".json", ".ndjson"):
        try:
            data = p.read_bytes().removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark (Windows editors)
        except OSError as e:  # e.g. no read permission
            raise UsageError(f"cannot read data file {p}: {e.strerror}") from None
        if suffix == ".json" and data.lstrip().startswith(b"["):  # one JSON array of row objects
            return _json_array_rows(p, data), "row"
        rows = []
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UsageError(f"{p}: line {lineno}: not UTF-8 text (byte {raw[e.start]:#04x})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError(f"{p}: line {lineno}: invalid JSON ({e.msg})") from None
            except (ValueError, RecursionError) as e:  # an integer over 4300 digits, nesting deeper than Python's stack
                why = "nested too deeply" if isinstance(e, RecursionError) else first_line(e)
                raise UsageError(f"{p}: line {lineno}: JSON this reader cannot take ({why})") from None
            if not isinstance(row, dict):
                raise UsageError(f"{p}: line {lineno}: expected a JSON object, got {type(row).__name__}")
            rows.append({**row, "__line__": lineno})
        return rows, "line"
    raise UsageError(f"{p}: unsupported data file type {suffix!r} (use .parquet or .jsonl)")


def _json_array_rows(p: Path, data: bytes) -> list[dict[str, Any]]:
    """The rows of a .json file holding one array of objects (a pretty-printed export), 0-based in errors."""
    try:
        rows = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{p}: not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{p}: invalid JSON at line {e.lineno} ({e.msg})") from None
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{p}: JSON this reader cannot take ({first_line(e)})") from None
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UsageError(f"{p}: row {i}: expected a JSON object, got {type(row).__name__}")
    return rows


_MISSING = object()


def _get(row: dict[str, Any], key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _resolve_answer_key(rows: list[dict[str, Any]], answer_key: str) -> str:
    if answer_key == "answer" and _get(rows[0], "answer") is _MISSING:
        if _get(rows[0], "reward_model.ground_truth") is not _MISSING:
            return "reward_model.ground_truth"  # the verl / DAPO parquet layout
    return answer_key


def _check_columns(path, rows: list[dict[str, Any]], keys: Sequence[str]) -> None:
    """A key no row has is a missing column; one some rows lack is named at the first such row (`_parse_rows`)."""
    for key in keys:
        top = key.split(".")[0]
        if not any(top in row for row in rows):
            have = ", ".join(dict.fromkeys(k for row in rows[:100] for k in row if k != "__line__"))
            need = "'answer' or 'reward_model.ground_truth'" if key == "answer" else repr(key)
            raise UsageError(f"{path}: missing column {top!r} (needed for {need}; columns: {have})")


def _where(path, rows_word: str, i: int, row: dict[str, Any]) -> str:
    return f"{path}: line {row['__line__']}" if rows_word == "line" else f"{path}: row {i}"


def _parse_prompt(value: Any, where: str, key: str) -> str | Messages:
    if isinstance(value, str):
        if not value.strip():
            raise UsageError(f"{where}: {key!r} is an empty string")
        return value
    if isinstance(value, (list, tuple)) and value:
        messages = []
        for m in value:
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise UsageError(f"{where}: {key!r} must be a string or a list of {{role, content}} string messages")
            if not m["role"].strip():
                raise UsageError(f"{where}: {key!r} has a message with an empty role")
            messages.append({"role": m["role"], "content": m["content"]})
        if not any(m["content"].strip() for m in messages):
            raise UsageError(f"{where}: {key!r} has only empty messages")
        return messages
    raise UsageError(f"{where}: {key!r} must be a non-empty string or a non-empty list of chat messages")


_NARROW = {"float": "f", "halffloat": "e"}  # arrow float32 / float16 -> struct's format for that width


def _has_narrow_floats(typ) -> bool:
    """Whether an arrow type holds float32 / float16 values anywhere (in lists and structs too)."""
    if str(typ) in _NARROW:
        return True
    fields = [typ.field(i).type for i in range(typ.num_fields)] if typ.num_fields else []
    return any(_has_narrow_floats(t) for t in fields)


def _narrow_floats(value: Any, typ) -> Any:
    """`value` as pyarrow gives it, with each float32 / float16 number replaced by the shortest decimal that is the
    same number in its own width: pyarrow widens 0.1f to 0.10000000149011612, which no answer "0.1" matches."""
    if value is None:
        return None
    if str(typ) in _NARROW:
        fmt = _NARROW[str(typ)]
        bits = struct.pack(fmt, value)
        for digits in range(1, 18):
            short = float(f"{value:.{digits}g}")
            if struct.pack(fmt, short) == bits:
                return short
        return value
    if isinstance(value, dict):
        types = {typ.field(i).name: typ.field(i).type for i in range(typ.num_fields)}
        return {k: _narrow_floats(v, types[k]) if k in types else v for k, v in value.items()}
    if isinstance(value, list) and typ.num_fields == 1:  # list types: one child field
        return [_narrow_floats(v, typ.field(0).type) for v in value]
    return value


def _number_text(value: float) -> str:
    """A float answer as a ground truth is written: a whole number without its ".0" (a parquet integer column with a
    null in it is read as floats) and no exponent (1e16 -> 10000000000000000, 1e-05 -> 0.00001)."""
    if value.is_integer():
        return str(int(value))
    return format(Decimal(repr(value)), "f")


def _parse_answer(value: Any, where: str, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise UsageError(f"{where}: {key!r} must be a string or a number, got {type(value).__name__}")
    if isinstance(value, (float, Decimal)) and not math.isfinite(value):  # JSON NaN / 1e999, a parquet null as NaN
        raise UsageError(f"{where}: {key!r} is {value}, not an answer")
    if isinstance(value, Decimal):  # a parquet decimal column: 42.50 is the answer 42.5, 7.00 is 7
        text = str(int(value)) if value == value.to_integral_value() else format(value.normalize(), "f")
    else:
        text = _number_text(value) if isinstance(value, float) else str(value)
    if not text.strip():
        raise UsageError(f"{where}: {key!r} is empty")
    return text


def _parse_rows(path, prompt_key: str, answer_key: str, data_source: str | None, several: str = _JOIN) -> list[Example]:
    rows, word = _read_rows(path, several)
    if not rows:
        raise UsageError(f"{path}: no rows")
    answer_key = _resolve_answer_key(rows, answer_key)
    _check_columns(path, rows, [prompt_key, answer_key])
    out = []
    for i, row in enumerate(rows):
        where = _where(path, word, i, row)
        prompt, answer = _get(row, prompt_key), _get(row, answer_key)
        if prompt is _MISSING or prompt is None:
            raise UsageError(f"{where}: missing {prompt_key!r}")
        if answer is _MISSING or answer is None:
            raise UsageError(f"{where}: missing {answer_key!r}")
        source = _get(row, "data_source")
        source = source if isinstance(source, str) and source else (data_source or Path(path).stem)
        out.append(
            Example(
                prompt=_parse_prompt(prompt, where, prompt_key),
                answer=_parse_answer(answer, where, answer_key),
                data_source=source,
                row=row["__line__"] if word == "line" else i,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------------------------
# public loaders
# ---------------------------------------------------------------------------------------------------------------


def load_examples(
    path: str | Path,
    *,
    prompt_key: str = "prompt",
    answer_key: str = "answer",
    dedupe: bool = True,
    question_template: str | None = None,
) -> list[Example]:
    """Training examples from a parquet or JSONL file (layouts and duplicate rule in the module docstring).

    question_template: a format string with `{question}` applied to string prompts, e.g. `DAPO_TEMPLATE` for
    bare questions in a JSONL file; chat-message prompts are used as stored.
    """
    examples = _parse_rows(path, prompt_key, answer_key, None)
    if question_template is not None:
        examples = [
            Example(question_template.format(question=e.prompt), e.answer, e.data_source, e.row)
            if isinstance(e.prompt, str)
            else e
            for e in examples
        ]
    return dedupe_examples(examples, path) if dedupe else examples


def dedupe_examples(examples: list[Example], path: str | Path) -> list[Example]:
    """`examples` without the rows whose (prompt text, answer) equals an earlier row's; the same prompt with two
    answers is a UsageError naming both rows."""
    first: dict[str, Example] = {}
    kept = []
    for e in examples:
        seen = first.get(e.text)
        if seen is None:
            first[e.text] = e
            kept.append(e)
        elif seen.answer != e.answer:
            raise UsageError(
                f"{path}: rows {seen.row} and {e.row} have the same prompt but different answers "
                f"({seen.answer!r} vs {e.answer!r})"
            )
    return kept


def load_prompts(
    path: str | Path, *, prompt_key: str = "prompt", answer_key: str = "answer", dedupe: bool = True
) -> tuple[list[str | Messages], list[str]]:
    """(prompts, answers) of a training file: `load_examples` as two parallel lists (what the trainer encodes)."""
    examples = load_examples(path, prompt_key=prompt_key, answer_key=answer_key, dedupe=dedupe)
    return [e.prompt for e in examples], [e.answer for e in examples]


def load_benchmark(path: str | Path) -> Benchmark:
    """An evaluation file (spec 10) grouped into problems by (data_source, prompt text), as the authors group them.

    A problem's copies must agree on the ground truth. Chat messages are kept (a string prompt becomes one user
    message).
    """
    examples = _parse_rows(path, "prompt", "answer", None, "; one benchmark per file: pass each file separately")
    groups: dict[tuple[str, str], list[Example]] = {}
    for e in examples:
        groups.setdefault((e.data_source, e.text), []).append(e)
    problems = []
    for (source, _), copies in groups.items():
        answers = {c.answer for c in copies}
        if len(answers) > 1:
            rows = ", ".join(str(c.row) for c in copies[:4])
            raise UsageError(f"{path}: rows {rows}... are one problem with different answers {sorted(answers)}")
        head = copies[0]
        messages = [{"role": "user", "content": head.prompt}] if isinstance(head.prompt, str) else head.prompt
        problems.append(Problem(source, messages, head.answer, len(copies)))
    return Benchmark(name=Path(path).stem, path=str(path), problems=tuple(problems))
