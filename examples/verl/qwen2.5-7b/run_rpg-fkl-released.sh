#!/usr/bin/env bash
# Equivalent of the authors' recipe/rpg/7b/run_rpg_7b_fkl1e-4.sh (spec 4.3 iv): PPO dual clip on the advantage
# (branch on sign(A)) plus a separate, unclipped per-token FKL loss with beta 1e-4
# (the authors never clamp the fkl term), anchor pi_old.
# Schedule-free variants (*_schedulefree.sh) have no verl equivalent: verl 0.9.1 never toggles the optimizer's
# train/eval modes the way the authors' fork does (spec 7.4).
# Usage: DATA_DIR=... bash qwen2.5-7b/run_rpg-fkl-released.sh [extra Hydra overrides]
#        (MODEL_PATH=Qwen/Qwen2.5-7B-Instruct for the authors' *_7binstruct scripts)
set -euo pipefail
: "${MODEL_PATH:=Qwen/Qwen2.5-Math-7B}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
launch rpg-fkl-released "${RPG_LOSS[@]}" \
    actor_rollout_ref.actor.policy_loss.loss_mode=rpg_fkl_differentiable \
    +actor_rollout_ref.actor.policy_loss.kl_in_clip=False \
    +actor_rollout_ref.actor.policy_loss.branch=raw \
    "$@"
