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

from rpgrl.objectives.base import LOSSES, LossFn, LossOutput, get_loss, register_loss
from rpgrl.objectives.reduce import AGG_MODES, aggregate, masked_mean, masked_sum

# Modules below register their losses on import.

__all__ = [
    "AGG_MODES",
    "LOSSES",
    "LossFn",
    "LossOutput",
    "aggregate",
    "get_loss",
    "masked_mean",
    "masked_sum",
    "register_loss",
]
