"""Names of the metrics that something reads back: the progress bar, `curves.png`, the trainer's own decisions,
`rpgrl reproduce` and the README. Producers and readers both use these constants; a test
(`tests/trainer/test_loop.py::test_off_policy_update_shows_the_regime`) runs short RL runs and checks that every
name read here, and every metric the README mentions, is emitted.

Metrics nobody reads back (most `perf/*`, ...) are written as literals where they are made.
Standard library only.
"""

from __future__ import annotations

# rollouts (trainer/loop.py)
REWARD_MEAN = "reward/mean"
REWARD_CORRECT = "reward/correct"  # fraction of correct responses; 0 for `collapse_patience` steps = collapsed
LENGTH_MEAN = "response/length_mean"
ENTROPY = "entropy/mean"  # of pi_old on the sampled tokens
OPTIM_STEPS = "optim/steps"
TOKENS_PER_S = "perf/tokens_per_s"
KL_ANCHOR = "kl/anchor"  # KL(pi_theta || anchor) estimate the adaptive reference refresh reads

# held-out evaluation (trainer/loop.py)
EVAL_ACCURACY = "eval/accuracy"  # greedy
EVAL_SAMPLED = "eval/sampled_accuracy"  # mean@k at the rollout temperature (eval.val_samples)

# losses (objectives/rpg.py, objectives/baselines.py)
LOSS_KL = "loss/kl"
LOG_W_MAX, LOG_W_MIN, LOG_W_ABS_MEAN = "log_w/max", "log_w/min", "log_w/abs_mean"
CLIP_LOW, CLIP_HIGH, CLIP_DUAL = "clip/frac_low", "clip/frac_high", "clip/frac_dual"  # disjoint clipped rows
KL_K3_ANCHOR = "kl/k3_anchor"  # rpg_loss: KL(pi_theta || pi_anchor), k3
KL_PPO = "kl/ppo_kl"  # ppo_loss: KL(pi_old || pi_theta), k1
KL_GRAD_SHARE = "kl/grad_share"  # rpg_loss: the KL part's share of the gradient weight
KL_PENALTY = "kl/penalty"  # ppo_loss: the aggregated KL term, loss/kl / beta

# metrics taken with the loss's normaliser (the mini-batch's count, given to every micro-batch): they add up across
# micro-batches (trainer/log.py's reduce_micro), where the others are local means
SUMMED = ("loss/", KL_PENALTY)

CLIP_KEYS = (CLIP_LOW, CLIP_HIGH, CLIP_DUAL)
LOG_W_KEYS = (LOG_W_MAX, LOG_W_MIN, LOG_W_ABS_MEAN)


def per_sequence(loss: str, divergence: str, level: str) -> frozenset[str]:
    """The metrics of loss `loss` that are means over sequences rather than tokens (micro-batches combine them
    weighted by sequence count): rpg_loss's KL estimate `kl/<divergence>` (per-sequence sums averaged over rows) and,
    at level sequence, its clip fractions and log_w/abs_mean (its units are sequences). kl/grad_share, a ratio of
    sums, is approximated either way. The PPO family's are all token means."""
    if loss != "rpg":
        return frozenset()
    keys = {kl_divergence(divergence)}
    if level == "sequence":
        keys |= {*CLIP_KEYS, LOG_W_ABS_MEAN, KL_GRAD_SHARE, "clip/frac_max_log_w", "clip/frac_kl_clamp"}
    return frozenset(keys)


def kl_divergence(divergence: str) -> str:
    """rpg_loss's estimate of its own regulariser, e.g. `kl/urkl`."""
    return f"kl/{divergence}"
