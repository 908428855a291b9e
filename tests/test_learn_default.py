"""learn_default's demo target (`benchmarks/learn_default.py`): the measured ratio and the bound it writes next to
it, checked against the formula computed by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
