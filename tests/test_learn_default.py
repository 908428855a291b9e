"""learn_default's demo target (`benchmarks/learn_default.py`): the measured ratio and the bound it writes next to
it, checked against the formula computed by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import learn_default  # noqa: E402


def _row(warm, update, generation, rest):
    return {"current": {"phase_seconds": {"warm_start": warm, "update": update, "generation": generation,
                                          "rest": rest}}}  # fmt: skip


def _roofline(tmp_path, shares):
    products = {ph: {"products": {"share": s, "share_fastest_kernels": f}} for ph, (s, f) in shares.items()}
    path = tmp_path / "roofline.json"
    path.write_text(json.dumps({"commit": "abc1234", "sizes": {"default": products}}))
    return path


def test_demo_target_bound_is_the_products_share_of_the_trained_phases(tmp_path):
    rows = [_row(40, 60, 30, 10), _row(30, 50, 50, 6)]  # means: warm 35, update 55, generation 40, rest 8 = 138 s
    path = _roofline(tmp_path, {"update": (0.5, 0.4), "generation": (0.25, 0.2)})
    t = learn_default.demo_target(rows, 200.0, path)
    assert t["measured"] == pytest.approx(138 / 200) and t["met"] is False
    assert t["bound_if_only_gemms"]["seconds"] == pytest.approx(0.5 * 90 + 0.25 * 40 + 8)  # 63 s
    assert t["bound_fastest_kernels"]["ratio"] == pytest.approx((0.4 * 90 + 0.2 * 40 + 8) / 200)
    assert t["ruled_out"] is False and t["roofline_commit"] == "abc1234"
    slow = learn_default.demo_target(rows, 80.0, path)  # a bound above 0.6x of the baseline rules the target out
    assert slow["bound_fastest_kernels"]["ratio"] == pytest.approx(52 / 80) and slow["ruled_out"] is True
    assert learn_default.demo_target(rows, 250.0, path)["met"] is True  # 138 / 250 = 0.55


def test_demo_target_without_a_roofline_reports_the_ratio_only(tmp_path):
    t = learn_default.demo_target([_row(1, 2, 3, 4)], 20.0, tmp_path / "missing.json")
    assert t["measured"] == pytest.approx(0.5) and "bound_if_only_gemms" not in t


def test_curve_reads_eval_rows_and_the_table_counts_seeds_passing_at_each_step(tmp_path):
    """The curve is eval.jsonl's (step, accuracy) rows; the table's counts and mean gains, computed by hand."""
    runs = []
    for seed, accs in enumerate([(0.2, 0.4, 0.6), (0.3, 0.5, 0.55), (0.1, 0.45, 0.3)]):
        out = tmp_path / str(seed)
        out.mkdir()
        rows = [{"step": s, "eval/accuracy": a, "perf/eval_s": 0.1} for s, a in zip((0, 10, 20), accs, strict=True)]
        rows.append({"step": 20, "benchmark/x": 1.0})  # a row without the held-out accuracy is skipped
        (out / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append({"curve": learn_default._curve(out)})
    assert runs[0]["curve"] == [[0, 0.2], [10, 0.4], [20, 0.6]]
    lines = learn_default._curve_lines({"runs": runs})
    assert lines[3] == "| N | 10 | 20 |"
    # gains at 10: +20, +20, +35 -> one seed >= 30; at 20: +40, +25, +20 -> one
    assert lines[5] == "| seeds passing | 1 | 1 |"
    assert lines[6] == f"| mean gain | {(20 + 20 + 35) / 3:+.1f} | {(40 + 25 + 20) / 3:+.1f} |"
    assert learn_default._curve_lines({"runs": [{"curve": [[0, 0.1], [120, 0.5]]}]}) == []  # start and end only


def test_same_sitting_writes_its_results_into_a_new_folder(tmp_path, monkeypatch):
    """`--same-sitting` under a `--results` in a folder that does not exist yet: the file was written without making
    the folder (FileNotFoundError after every run had finished). Training and git are replaced here: `_train` writes
    what a run leaves (metrics.jsonl) and returns its summary and wall time."""

    def train(seed, out, extra, src=None):
        out.mkdir(parents=True)
        (out / "metrics.jsonl").write_text(json.dumps({"perf/update_s": 2.0, "perf/generation_s": 3.0}) + "\n")
        wall = 20.0 if "baseline" in out.parts else 10.0
        return {"gain_points": 31.0, "sft": {"seconds": 4.0}}, wall

    def git(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 0, stdout="f" * 40 + "\n", stderr="")

    monkeypatch.setattr(learn_default, "_train", train)
    monkeypatch.setattr(learn_default, "_versions", lambda: {"commit": "abc"})
    monkeypatch.setattr(learn_default, "subprocess", SimpleNamespace(run=git))
    path = tmp_path / "new" / "folder" / learn_default.AB_FILE
    result = learn_default.same_sitting("HEAD~1", [0, 1], [], path)
    assert json.loads(path.read_text()) == result
    assert result["ratio"] == pytest.approx(0.5) and [r["seed"] for r in result["runs"]] == [0, 1]
    assert result["runs"][0]["current"]["phase_seconds"] == {"warm_start": 4.0, "update": 2.0, "generation": 3.0,
                                                             "rest": 1.0}  # fmt: skip
