"""The embedded default learns: one full default run (a few minutes on 2 CPU cores), so marked slow.

The five-seed version with wall times is `benchmarks/learn_default.py` (results in benchmarks/results/).
"""

import pytest

from rpgrl.config import Config, apply_overrides
from rpgrl.trainer.loop import train


@pytest.mark.slow
def test_default_raises_held_out_greedy_accuracy(tmp_path):
    summary = train(apply_overrides(Config(), [("train.progress", "false")]), tmp_path / "run")
    assert summary["stopped"] is None
    assert summary["gain_points"] >= 30, summary
