#!/usr/bin/env bash
# Paper Table 5 (4K), row REINFORCE++: batch-whitened returns, k1 KL loss with beta 1e-4 (spec 5.4).
# Difference: verl's KL anchor is the frozen initial model (a reference worker); the authors' fork anchored it to
# pi_old (iterative reference), which verl 0.9.1 does not offer.
# Usage: CTX=2k|4k|8k DATA_DIR=... bash qwen3-4b/run_reinforce_pp.sh [extra Hydra overrides]
set -euo pipefail
: "${MODEL_PATH:=Qwen/Qwen3-4B}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
launch reinforce-pp \
    algorithm.adv_estimator=reinforce_plus_plus \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_type=kl \
    actor_rollout_ref.actor.kl_loss_coef=1e-4 \
    "$@"
