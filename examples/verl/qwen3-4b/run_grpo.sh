#!/usr/bin/env bash
# Paper Tables 3/5/6, row GRPO: verl's PPO loss with clip 0.2/0.2, mean/std advantage, k3 KL loss (verl
# low_var_kl: uncorrected, clamped to +-10) with beta 1e-4 to the frozen initial model (spec 5.2; the released
# 7B script uses 1e-3), no dynamic sampling, no overlong penalty. Loads a reference worker.
# Usage: CTX=2k|4k|8k DATA_DIR=... bash qwen3-4b/run_grpo.sh [extra Hydra overrides]
set -euo pipefail
: "${MODEL_PATH:=Qwen/Qwen3-4B}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
launch grpo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.actor.clip_ratio_high=0.2 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.kl_loss_coef=1e-4 \
    algorithm.filter_groups.enable=False \
    data.gen_batch_size=512 \
    reward.reward_kwargs.overlong_buffer_cfg.enable=False \
    "$@"
