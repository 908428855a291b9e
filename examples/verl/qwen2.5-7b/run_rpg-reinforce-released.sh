#!/usr/bin/env bash
# Equivalent of the authors' recipe/rpg/7b/run_rpg_7b_{fkl,rkl,ufkl,urkl}1e-4_rf_clip_ppo_0.2_0.28.sh: what those
# scripts execute is verl's PPO dual clip on A_i = R_i - group mean, with no KL at all (kl_coef 0, and the in-reward
# KL is evaluated at w = 1), lr 5e-7 (spec 4.3 iii). The four divergences are the same algorithm, hence one script.
# For the 0.1/0.1 scripts add: actor_rollout_ref.actor.clip_ratio_low=0.1 actor_rollout_ref.actor.clip_ratio_high=0.1
# The paper's RPG-REINFORCE (Algorithm 2, with the KL) is qwen3-4b/run_rpg-reinforce-*.sh with MODEL_PATH set.
# Usage: DATA_DIR=... bash qwen2.5-7b/run_rpg-reinforce-released.sh [extra Hydra overrides]
#        (MODEL_PATH=Qwen/Qwen2.5-7B-Instruct for the authors' *_7binstruct scripts)
set -euo pipefail
: "${MODEL_PATH:=Qwen/Qwen2.5-Math-7B}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
launch rpg-reinforce-released \
    actor_rollout_ref.actor.policy_loss.loss_mode=vanilla \
    algorithm.adv_estimator=rpg \
    actor_rollout_ref.actor.optim.lr=5e-7 \
    "$@"
