#!/usr/bin/env bash
# Paper Tables 3/5/6, row RPG-UFKL: differentiable surrogate with the KL inside RPG-Style Clip (Alg. 1).
# Usage: CTX=2k|4k|8k DATA_DIR=... bash qwen3-4b/run_rpg-ufkl.sh [extra Hydra overrides]
set -euo pipefail
: "${MODEL_PATH:=Qwen/Qwen3-4B}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
launch rpg-ufkl "${RPG_LOSS[@]}" \
    actor_rollout_ref.actor.policy_loss.loss_mode=rpg_ufkl_differentiable \
    +actor_rollout_ref.actor.policy_loss.analogue=paper \
    "$@"
