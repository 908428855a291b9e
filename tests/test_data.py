"""Data loaders: the shared eval files (spec 10, section-9 item 26), training layouts, and one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402
from shared_data import DATA, EVAL_FILES, needs_data  # noqa: E402

from rpgrl.data import (  # noqa: E402
    DAPO_TEMPLATE,
    dapo_prompt,
    load_benchmark,
    load_examples,
    load_prompts,
)
from rpgrl.errors import UsageError  # noqa: E402

# ---------- the shared evaluation files ----------


@needs_data
@pytest.mark.parametrize("name,n_problems", EVAL_FILES.items())
def test_eval_files_group_into_problems_of_32(name, n_problems):
    path = DATA / f"{name}.parquet"
    bench = load_benchmark(path)
    assert bench.name == name
    assert len(bench.problems) == n_problems
    assert all(p.copies == 32 for p in bench.problems)
    # independent check straight from pyarrow: distinct (data_source, content) pairs and one answer per pair
    rows = pq.read_table(path).to_pylist()
    pairs = {(r["data_source"], r["prompt"][0]["content"]): r["reward_model"]["ground_truth"] for r in rows}
    assert len(pairs) == n_problems
    assert {(p.data_source, p.text): p.answer for p in bench.problems} == pairs
    # spec 7.5: every stored prompt is the template around the raw problem
    assert all(r["prompt"][0]["content"] == dapo_prompt(r["extra_info"]["raw_problem"]) for r in rows)
    assert all(p.prompt[0]["role"] == "user" and len(p.prompt) == 1 for p in bench.problems)


@needs_data
def test_eval_file_details_of_spec_10():
    aime24 = load_benchmark(DATA / "aime-2024.parquet")
    assert {p.data_source for p in aime24.problems} == {"math_dapo"}
    assert sorted(p.answer for p in aime24.problems).count("104") == 2  # two problems share an answer
    aime25 = load_benchmark(DATA / "aime25.parquet")
    assert "336^\\circ" in {p.answer for p in aime25.problems}
    amc = load_benchmark(DATA / "amc-23.parquet")
    assert len({p.answer for p in amc.problems}) == 25 and "-1" in {p.answer for p in amc.problems}


@needs_data
def test_training_loader_dedupes_the_eval_layout():
    path = DATA / "amc-23.parquet"
    assert len(load_examples(path)) == 40  # 32 copies of each problem collapse to one
    assert len(load_examples(path, dedupe=False)) == 1280
    prompts, answers = load_prompts(path)  # default answer key falls back to reward_model.ground_truth
    assert len(prompts) == len(answers) == 40 and isinstance(prompts[0], list) and prompts[0][0]["role"] == "user"


# ---------- training layouts ----------


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def dapo_rows(n: int) -> list[dict]:
    return [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": dapo_prompt(f"What is {i}+1?")}],
            "ability": "MATH",
            "reward_model": {"ground_truth": str(i + 1), "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": i},
        }
        for i in range(n)
    ]


def test_dapo_parquet_layout(tmp_path):
    rows = dapo_rows(5) + dapo_rows(5)  # every problem twice, as DAPO-Math-17k repeats problems
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    ex = load_examples(tmp_path / "train.parquet")
    assert [e.answer for e in ex] == ["1", "2", "3", "4", "5"]
    assert [e.row for e in ex] == [0, 1, 2, 3, 4]  # the first copy is kept
    assert ex[2].prompt == rows[2]["prompt"] and ex[2].data_source == "math_dapo"
    ex = load_examples(tmp_path / "train.parquet", answer_key="reward_model.ground_truth", dedupe=False)
    assert len(ex) == 10


def test_jsonl_layout(tmp_path):
    path = write_jsonl(
        tmp_path / "train.jsonl",
        [
            {"prompt": "What is 2+2?", "answer": "4"},
            "",  # blank lines are skipped
            {"prompt": [{"role": "user", "content": "Half of 1?"}], "answer": 0.5, "data_source": "toy"},
            {"prompt": "What is 2+2?", "answer": 4},  # duplicate of line 1 (a number answer becomes "4")
        ],
    )
    ex = load_examples(path)
    assert [(e.prompt, e.answer, e.data_source, e.row) for e in ex] == [
        ("What is 2+2?", "4", "train", 1),
        ([{"role": "user", "content": "Half of 1?"}], "0.5", "toy", 3),
    ]
    wrapped = load_examples(path, question_template=DAPO_TEMPLATE)
    assert wrapped[0].prompt == dapo_prompt("What is 2+2?")
    assert wrapped[1].prompt == ex[1].prompt  # chat messages are used as stored


# ---------- errors: one line, naming the problem and the row ----------


def one_line_error(fn, *args, match: str, **kwargs) -> str:
    with pytest.raises(UsageError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_missing_and_unsupported_files(tmp_path):
    one_line_error(load_examples, tmp_path / "nope.jsonl", match="data file not found: .*nope.jsonl")
    (tmp_path / "x.csv").write_text("prompt,answer\n")
    one_line_error(load_examples, tmp_path / "x.csv", match="unsupported data file type '.csv'")
    (tmp_path / "bad.parquet").write_text("not parquet")
    one_line_error(load_benchmark, tmp_path / "bad.parquet", match="not a readable parquet file")
    one_line_error(load_benchmark, tmp_path, match="is not a file")


def test_empty_files(tmp_path):
    one_line_error(load_examples, write_jsonl(tmp_path / "e.jsonl", []), match="e.jsonl: no rows")
    table = pa.Table.from_pylist(dapo_rows(1)).slice(0, 0)
    pq.write_table(table, tmp_path / "e.parquet")
    one_line_error(load_benchmark, tmp_path / "e.parquet", match="e.parquet: no rows")


def test_missing_columns(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "reward_model"} for r in dapo_rows(2)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    msg = one_line_error(load_examples, tmp_path / "t.parquet", match="missing column 'answer'")
    assert "'reward_model.ground_truth'" in msg  # names both places an answer can live
    assert "data_source" in msg  # lists the columns it has
    one_line_error(
        load_examples, tmp_path / "t.parquet", answer_key="reward_model.ground_truth", match="column 'reward_model'"
    )
    path = write_jsonl(tmp_path / "q.jsonl", [{"question": "2+2", "answer": "4"}])
    one_line_error(load_examples, path, match="missing column 'prompt'")


def test_malformed_rows_name_the_row(tmp_path):
    cases = [
        ([{"prompt": "ok", "answer": "1"}, "{not json"], "line 2: invalid JSON"),
        ([{"prompt": "ok", "answer": "1"}, "[1, 2]"], "line 2: expected a JSON object, got list"),
        ([{"prompt": "ok", "answer": "1"}, {"prompt": "", "answer": "1"}], "line 2: 'prompt' is an empty string"),
        ([{"prompt": "ok", "answer": "1"}, {"prompt": "ok2"}], "line 2: missing 'answer'"),
        ([{"prompt": "ok", "answer": "1"}, {"prompt": "ok2", "answer": None}], "line 2: missing 'answer'"),
        ([{"prompt": "ok", "answer": True}], "line 1: 'answer' must be a string or a number, got bool"),
        ([{"prompt": "ok", "answer": " "}], "line 1: 'answer' is empty"),
        (['{"prompt": "ok", "answer": NaN}'], "line 1: 'answer' is nan, not an answer"),
        (['{"prompt": "ok", "answer": 1e999}'], "line 1: 'answer' is inf, not an answer"),
        ([{"prompt": [{"role": "user"}], "answer": "1"}], "line 1: 'prompt' must be a string or a list of"),
        ([{"prompt": 7, "answer": "1"}], "line 1: 'prompt' must be a non-empty string or a non-empty list"),
        ([{"prompt": [{"role": "user", "content": " "}], "answer": "1"}], "line 1: 'prompt' has only empty messages"),
        ([{"prompt": [{"role": "", "content": "2+2"}], "answer": "4"}], "line 1: 'prompt' has a message with an empty"),
        ([{"prompt": "p", "answer": "1"}, {"prompt": "p", "answer": "2"}], "rows 1 and 2 have the same prompt"),
        # json.loads raises ValueError / RecursionError, not JSONDecodeError, for these
        (['{"prompt": "ok", "answer": ' + "9" * 5000 + "}"], "line 1: JSON this reader cannot take .*4300 digits"),
        (["[" * 100_000 + "]" * 100_000], "line 1: JSON this reader cannot take .nested too deeply"),
    ]
    for i, (rows, match) in enumerate(cases):
        one_line_error(load_examples, write_jsonl(tmp_path / f"m{i}.jsonl", rows), match=match)
    rows = dapo_rows(3)
    rows[2]["prompt"] = []
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "m.parquet")
    one_line_error(load_examples, tmp_path / "m.parquet", match=r"m.parquet: row 2: 'prompt' must be")


def test_benchmark_copies_must_agree(tmp_path):
    rows = dapo_rows(2) + dapo_rows(2)
    rows[3]["reward_model"] = {"ground_truth": "999", "style": "x"}
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "b.parquet")
    one_line_error(load_benchmark, tmp_path / "b.parquet", match=r"rows 1, 3\.\.\. are one problem with different")


def test_non_utf8_and_unreadable_files(tmp_path, monkeypatch):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"prompt": "ok", "answer": "1"}\n{"prompt": "caf\xe9", "answer": "2"}\n')
    one_line_error(load_examples, path, match=r"latin1.jsonl: line 2: not UTF-8 text \(byte 0xe9\)")
    one_line_error(load_benchmark, path, match="line 2: not UTF-8")
    good = write_jsonl(tmp_path / "good.jsonl", [{"prompt": "ok", "answer": "1"}])

    def denied(self):  # chmod 000 does not stop root, so refuse the read the way the OS would
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    one_line_error(load_examples, good, match="cannot read data file .*good.jsonl: Permission denied")


def test_a_parquet_file_whose_name_is_not_utf8_loads(tmp_path):
    """pyarrow takes only paths it can encode as UTF-8: a parquet file named in another encoding (Latin-1 `é`,
    which Python holds as a surrogate escape) was "not a readable parquet file" (a review's probe); a JSONL file of
    that name loaded. It loads as its bytes say, and an unreadable one is still one line."""
    name = os.fsdecode(b"caf\xe9.parquet")  # 'caf\udce9.parquet': not encodable as UTF-8
    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(dapo_rows(3) + dapo_rows(3)), tmp_path / "plain.parquet")
    os.rename(tmp_path / "plain.parquet", path)
    bench = load_benchmark(path)
    assert [(p.answer, p.copies) for p in bench.problems] == [("1", 2), ("2", 2), ("3", 2)]
    assert bench.name == os.fsdecode(b"caf\xe9")
    assert [e.answer for e in load_examples(path)] == ["1", "2", "3"]

    def denied(*args, **kwargs):  # chmod 000 does not stop root, so refuse the open the way the OS would
        raise PermissionError(13, "Permission denied", str(path))

    with pytest.MonkeyPatch.context() as m:
        m.setattr("rpgrl.data.open", denied, raising=False)  # the module's `open`, shadowing the builtin
        one_line_error(load_examples, path, match="cannot read data file .*: Permission denied")


def test_float32_and_float16_answers_are_the_numbers_they_hold(tmp_path):
    """pyarrow widens a float32 0.1 to 0.10000000149011612, which `Answer: 0.1` did not match in strict mode: each
    float32 / float16 value is read as the shortest decimal that is the same number in its width, in a column, a
    struct (the evaluation files' reward_model.ground_truth) or a list."""
    from rpgrl.rewards.math import math_score

    prompts = pa.array(["q0", "q1", "q2"])
    f32 = pa.array([0.1, 2.7, 1e-7], type=pa.float32())
    pq.write_table(pa.table({"prompt": prompts, "answer": f32}), tmp_path / "f32.parquet")
    got = [e.answer for e in load_examples(tmp_path / "f32.parquet")]
    assert got == ["0.1", "2.7", "0.0000001"]
    assert math_score("Answer: 0.1", got[0], "strict") and math_score("Answer: 2.7", got[1], "strict")
    f16 = pa.array([0.1, 2.7, 1000.0], type=pa.float16())
    pq.write_table(pa.table({"prompt": prompts, "answer": f16}), tmp_path / "f16.parquet")
    assert [e.answer for e in load_examples(tmp_path / "f16.parquet")] == ["0.1", "2.7", "1000"]
    nested = pa.array([{"ground_truth": v, "more": [v]} for v in (0.3, 1.1, 5.0)],
                      type=pa.struct([("ground_truth", pa.float32()), ("more", pa.list_(pa.float32()))]))  # fmt: skip
    table = pa.table({"prompt": prompts, "reward_model": nested, "wide": pa.array([0.1, 0.2, 0.3])})
    pq.write_table(table, tmp_path / "nested.parquet")
    assert [e.answer for e in load_examples(tmp_path / "nested.parquet")] == ["0.3", "1.1", "5"]


def test_float_answers_are_written_as_the_number(tmp_path):
    """A float answer (JSON 540.0, or a parquet integer column with a null, read as floats) is the number as a
    ground truth writes it: no ".0", no exponent; so `Answer: 540` is correct in both modes."""
    from rpgrl.data import load_examples
    from rpgrl.rewards.math import math_score

    rows = [540.0, 1e16, 1e-05, 0.5, -3.0, 2.25]
    path = tmp_path / "f.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": a}) + "\n" for i, a in enumerate(rows)))
    got = [e.answer for e in load_examples(path)]
    assert got == ["540", "10000000000000000", "0.00001", "0.5", "-3", "2.25"]
    assert math_score("Answer: 540", got[0], "strict") and math_score("Answer: 10000000000000000", got[1], "strict")


def test_files_as_users_write_them(tmp_path):
    """A review's: a pretty-printed JSON array was 'line 1: invalid JSON'; a UTF-8 byte-order mark was refused with
    Python's advice; a parquet decimal answer was 'must be a string or a number'; a key missing on the first line
    only was a missing column, with no line; a relative path not found did not say where it was looked for."""
    rows = [{"prompt": "What is 1+1?", "answer": 2}, {"prompt": "What is 2+3?", "answer": "5"}]
    (tmp_path / "a.json").write_text(json.dumps(rows, indent=2))
    assert load_prompts(tmp_path / "a.json") == (["What is 1+1?", "What is 2+3?"], ["2", "5"])
    (tmp_path / "b.json").write_text(json.dumps([rows[0], "x"], indent=2))
    one_line_error(load_examples, tmp_path / "b.json", match=r"b.json: row 1: expected a JSON object, got str")
    (tmp_path / "c.json").write_text('[{"prompt": "a",\n "answer": }]')
    one_line_error(load_examples, tmp_path / "c.json", match=r"c.json: invalid JSON at line 2 \(Expecting value\)")
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    assert load_prompts(tmp_path / "bom.jsonl") == (["What is 1+1?", "What is 2+3?"], ["2", "5"])
    from decimal import Decimal

    answers = pa.array([Decimal("42.50"), Decimal("7.00"), Decimal("-0.125")], pa.decimal128(6, 3))
    table = pa.table({"prompt": ["a", "b", "c"], "answer": answers})
    pq.write_table(table, tmp_path / "d.parquet")
    assert load_prompts(tmp_path / "d.parquet")[1] == ["42.5", "7", "-0.125"]
    path = write_jsonl(tmp_path / "m.jsonl", [{"question": "2+2", "answer": "4"}, {"prompt": "3+3", "answer": "6"}])
    one_line_error(load_examples, path, match="m.jsonl: line 1: missing 'prompt'")
    one_line_error(load_examples, tmp_path / "a.jsonl,b.jsonl", match="one file per option: join several into one")
    one_line_error(load_examples, "no/such.jsonl", match=r"data file not found: no/such.jsonl \(a relative path, "
                                                         f"looked for in {Path.cwd()}\\)")  # fmt: skip


def test_the_trainer_says_how_many_duplicate_rows_it_drops(tmp_path, capsys):
    """Duplicates were dropped with a log record nothing showed (a review's): the trainer prints the count."""
    from rpgrl.config import Config, apply_overrides
    from rpgrl.models import build_byte_tokenizer
    from rpgrl.trainer.setup import load_task

    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(6)]
    path = write_jsonl(tmp_path / "dup.jsonl", rows + rows[:4])
    cfg = apply_overrides(Config(), [("data.train", str(path)), ("data.reward", "math01")])
    task = load_task(cfg, build_byte_tokenizer())
    assert task.train_answers == [str(2 * i) for i in range(6)]
    assert f"data: {path}: 4 of 10 rows repeat an earlier row's prompt and answer and are dropped (6 problems)" in \
        capsys.readouterr().out  # fmt: skip


@needs_data
def test_a_process_that_read_a_parquet_file_exits_with_its_own_code(tmp_path):
    """pyarrow 26 reading through a Python file object left threads that aborted the process at exit ("terminate
    called without an active exception", exit 134) in 2 to 3 runs of 4 of `rpgrl eval` on a file it refuses, after
    its one-line error (a probe's reproducer: an evaluation file without its ground truth). Read from bytes through
    `pq.read_table`, it still aborted in 3 runs of 40 (`pq.read_table` alone, with use_threads=False too, 1-4 of 40):
    now one `ParquetFile.read` without threads (0 of 60), and twelve runs here."""
    import subprocess
    import sys

    table = pq.read_table(DATA / "amc-23.parquet")
    pq.write_table(table.drop_columns(["reward_model"]), tmp_path / "bad.parquet")
    cmd = [sys.executable, "-m", "rpgrl", "eval", "--model", "x", "--data", str(tmp_path / "bad.parquet")]
    runs = [subprocess.run(cmd + ["--mode", "strict"], capture_output=True, text=True) for _ in range(12)]
    assert [r.returncode for r in runs] == [2] * 12, [r.stderr[-200:] for r in runs]
    assert all(r.stderr.strip().endswith("columns: data_source, prompt, ability, extra_info)") for r in runs)
