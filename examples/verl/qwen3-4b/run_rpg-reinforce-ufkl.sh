#!/usr/bin/env bash
# Paper Tables 3/5/6, row RPG-REINFORCE-UFKL: REINFORCE-style surrogate with RPG-Style Clip
# (Alg. 2, branch on sign(A')).
# Usage: CTX=2k|4k|8k DATA_DIR=... bash qwen3-4b/run_rpg-reinforce-ufkl.sh [extra Hydra overrides]
set -euo pipefail
: "${MODEL_PATH:=Qwen/Qwen3-4B}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
launch rpg-reinforce-ufkl "${RPG_LOSS[@]}" \
    actor_rollout_ref.actor.policy_loss.loss_mode=rpg_ufkl_reinforce \
    "$@"
