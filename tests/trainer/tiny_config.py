"""Shared settings for the trainer tests: a tiny model and task that run a training step in about a second."""

from rpgrl.config import Config, apply_overrides
from rpgrl.rewards import REWARDS, Reward, register_reward

# A reward with mixed outcomes even for an untrained model, so every step has a real update: correct iff the
# response has an even number of characters; value 1/0 plus a small length part.
if "test_parity" not in REWARDS:

    @register_reward("test_parity")
    def _parity(completion: str, answer: str) -> Reward:
        ok = len(completion) % 2 == 0
        return Reward(value=float(ok) + 0.01 * len(completion), correct=ok, parts={"correct": float(ok)})


TINY = [
    ("model.hidden_size", "32"),
    ("model.num_layers", "1"),
    ("model.num_heads", "2"),
    ("model.num_kv_heads", "1"),
    ("model.intermediate_size", "64"),
    ("data.num_train", "40"),
    ("data.num_val", "8"),
    ("data.reward", "test_parity"),
    ("rollout.prompts_per_step", "4"),
    ("rollout.group_size", "4"),
    ("rollout.max_new_tokens", "10"),
    ("rollout.group_filter", "off"),
    ("optim.lr", "1e-2"),
    ("optim.warmup_steps", "1"),
    ("sft.max_steps", "0"),
    ("train.max_steps", "3"),
    ("train.micro_batch_size", "6"),
    ("train.mini_batch_prompts", "2"),
    ("train.progress", "false"),
    ("train.collapse_patience", "0"),
]


def tiny(*overrides) -> Config:
    """The default config shrunk to test size, plus `overrides` as (key, value) strings. With a file dataset
    (`data.train` overridden) the synthetic task's sizes are left out (the run would refuse them as unused)."""
    file_data = any(k == "data.train" for k, _ in overrides)
    base = [(k, v) for k, v in TINY if not (file_data and k in ("data.num_train", "data.num_val"))]
    return apply_overrides(Config(), base + list(overrides))


if "test_parity01" not in REWARDS:

    @register_reward("test_parity01")
    def _parity01(completion: str, answer: str) -> Reward:
        """Like test_parity without the length part: a group with equal correctness has equal rewards."""
        ok = len(completion) % 2 == 0
        return Reward(value=float(ok), correct=ok)
