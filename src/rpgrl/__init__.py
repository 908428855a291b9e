"""rpgrl: Regularized Policy Gradient (RPG) for LLM reasoning.

`import rpgrl` needs only torch; names that need an extra (transformers, math-verify) load on first use.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it (imported lazily)
_EXPORTS = {
    "rpg_loss": "rpgrl.objectives.rpg",
    "LossOutput": "rpgrl.objectives",
    "LOSSES": "rpgrl.objectives",
    "get_loss": "rpgrl.objectives",
    "aggregate": "rpgrl.objectives",
    "ppo_loss": "rpgrl.objectives",
    "grpo_loss": "rpgrl.objectives",
    "dapo_loss": "rpgrl.objectives",
    "reinforce_pp_loss": "rpgrl.objectives",
    "grpo_kl_term": "rpgrl.objectives",
    "anchored_kl_term": "rpgrl.objectives",
    "kl_penalty": "rpgrl.objectives",
    "k1": "rpgrl.objectives",
    "k2": "rpgrl.objectives",
    "k3": "rpgrl.objectives",
    "Rollout": "rpgrl.rollout",
    "sample": "rpgrl.rollout",
    "token_logprobs": "rpgrl.rollout",
    "build_tiny_model": "rpgrl.models",
    "build_char_tokenizer": "rpgrl.models",
    "build_byte_tokenizer": "rpgrl.models",
    "load_model": "rpgrl.models",
    "train": "rpgrl.trainer.loop",
    "Config": "rpgrl.config",
    "PRESETS": "rpgrl.presets",
    "get_preset": "rpgrl.presets",
    "ADVANTAGES": "rpgrl.advantages",
    "get_advantage": "rpgrl.advantages",
    "register_advantage": "rpgrl.advantages",
    "whiten": "rpgrl.advantages",
    "overlong_penalty": "rpgrl.shaping",
    "group_filter_keep": "rpgrl.shaping",
    "math_score": "rpgrl.rewards.math",
    "MathReward": "rpgrl.rewards.math",
    "evaluate": "rpgrl.evaluation",
    "EvalTracker": "rpgrl.evaluation",
    "pass_at_k": "rpgrl.evaluation",
    "load_benchmark": "rpgrl.data",
    "load_examples": "rpgrl.data",
    "load_prompts": "rpgrl.data",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rpgrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))


__all__ = list(_EXPORTS)
