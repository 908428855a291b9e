"""Pure tensor math: RPG surrogates, KL estimators, baseline policy losses, aggregation.

Imports torch and nothing else from rpgrl except the name registry.

Glossary (one vocabulary everywhere):
    B           sequences in the batch (= prompts x G)
    T           response tokens (padded)
    G           samples per prompt (group size)
    logp        (B, T) log pi_theta(y_t | h_t) of each sampled token under the current policy (differentiable)
    old_logp    (B, T) the same under pi_old, the sampler; in RPG also the KL anchor (constant)
    ref_logp    (B, T) a separate reference (e.g. GRPO's frozen initial model), only where one exists
    mask        (B, T) 1.0 for response tokens that count (up to and including EOS), 0.0 for padding
    log_w       logp - old_logp (per token), or its masked sum over t (sequence level)
    advantages  (B,) per-sequence, or (B, T) per-token
"""

# Importing a loss module registers its losses in LOSSES (the first import line).
from rpgrl.objectives import baselines, kl  # noqa: F401
from rpgrl.objectives.base import LOSSES, LossFn, LossOutput, get_loss, register_loss
from rpgrl.objectives.baselines import dapo_loss, grpo_loss, ppo_loss, reinforce_pp_loss
from rpgrl.objectives.checks import LossOverflow
from rpgrl.objectives.kl import anchored_kl_term, grpo_kl_term, k1, k2, k3, kl_penalty
from rpgrl.objectives.reduce import AGG_MODES, aggregate, masked_mean, masked_sum
from rpgrl.objectives.rpg import rpg_loss

__all__ = [
    "AGG_MODES",
    "LOSSES",
    "LossFn",
    "LossOverflow",
    "LossOutput",
    "aggregate",
    "anchored_kl_term",
    "dapo_loss",
    "get_loss",
    "grpo_kl_term",
    "grpo_loss",
    "k1",
    "k2",
    "k3",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "ppo_loss",
    "register_loss",
    "reinforce_pp_loss",
    "rpg_loss",
]
