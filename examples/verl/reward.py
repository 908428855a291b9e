"""verl custom reward function: rpgrl's math verifier (spec 7.6), the one `rpgrl train` and `rpgrl eval` use.

verl loads it from `reward.custom_reward_function.path` / `.name=compute_score` and calls it once per response
through its `dapo` reward manager, which adds the overlong penalty. `acc` is the exact correctness that DAPO's group
filter (`algorithm.filter_groups.metric=acc`) and the validation accuracy read.

The default `mode="strict"` is the authors' rule (reproduces the paper: last `Answer:` line, string match after
their normalisation); `+reward.custom_reward_function.reward_kwargs.mode=equiv` judges mathematical equivalence.
"""

from __future__ import annotations

from typing import Any

from rpgrl.rewards.math import math_score


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    mode: str = "strict",
    **kwargs: Any,
) -> dict[str, Any]:
    """+1 / -1 for a correct / wrong answer, with `acc` the boolean."""
    correct = math_score(solution_str, str(ground_truth), mode)
    return {"score": 1.0 if correct else -1.0, "acc": correct}
