#!/usr/bin/env bash
# Paper Tables 3/5/6, row DAPO: verl's own PPO loss (clip-higher 0.2/0.28, c = 10), mean/std advantage, no KL,
# dynamic sampling and overlong penalty (spec 5.3). Runs on plain verl; rpgrl only supplies the reward function.
# Usage: CTX=2k|4k|8k DATA_DIR=... bash qwen3-4b/run_dapo.sh [extra Hydra overrides]
set -euo pipefail
: "${MODEL_PATH:=Qwen/Qwen3-4B}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
launch dapo \
    algorithm.adv_estimator=grpo \
    "$@"
