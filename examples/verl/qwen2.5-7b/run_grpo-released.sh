#!/usr/bin/env bash
# Equivalent of the authors' recipe/rpg/7b/run_grpo_7b.sh (spec 5.2): qwen3-4b/run_grpo.sh with beta 1e-3.
# Usage: DATA_DIR=... bash qwen2.5-7b/run_grpo-released.sh [extra Hydra overrides]
#        (MODEL_PATH=Qwen/Qwen2.5-7B-Instruct for the authors' *_7binstruct scripts)
set -euo pipefail
: "${MODEL_PATH:=Qwen/Qwen2.5-Math-7B}"
export MODEL_PATH
exec bash "$(dirname "${BASH_SOURCE[0]}")/../qwen3-4b/run_grpo.sh" actor_rollout_ref.actor.kl_loss_coef=1e-3 "$@"
