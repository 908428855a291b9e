"""Verifiable rewards: strings in, a score and its parts out. No torch, no tokenizer.

A reward function takes the decoded completion and the sample's ground-truth answer:

    fn(completion: str, answer: str) -> Reward

and is registered by name in `REWARDS` (`synthetic` for the embedded task, `math` / `math01` for math answers).
Training and evaluation call the same verifier, so the training signal and the eval metric cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rpgrl.registry import Registry


@dataclass(frozen=True)
class Reward:
    """`value`: the scalar training reward. `correct`: exact correctness (the `acc` used for accuracy, pass@k and
    DAPO's group filter). `parts`: named components logged as `reward/<name>` (e.g. `correct`, `format`)."""

    value: float
    correct: bool
    parts: dict[str, float] = field(default_factory=dict)


RewardFn = Callable[[str, str], Reward]
REWARDS: Registry[RewardFn] = Registry("reward function")
register_reward = REWARDS.register


def get_reward(name: str) -> RewardFn:
    """Look up a reward function by name, importing the built-in modules that register them."""
    _load_builtin()
    return REWARDS.get(name)


def _load_builtin() -> None:
    import importlib

    for mod in ("rpgrl.rewards.synthetic", "rpgrl.rewards.math"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:  # an optional extra (e.g. math-verify) is missing
            if e.name is not None and e.name.startswith("rpgrl"):
                raise
