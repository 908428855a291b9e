#!/usr/bin/env bash
# Equivalent of the authors' recipe/rpg/7b/run_rfpp_7b_1e-4.sh:
# the same row as qwen3-4b/run_reinforce_pp.sh on the 7B model.
# Usage: DATA_DIR=... bash qwen2.5-7b/run_reinforce_pp.sh [extra Hydra overrides]
#        (MODEL_PATH=Qwen/Qwen2.5-7B-Instruct for the authors' *_7binstruct scripts)
set -euo pipefail
: "${MODEL_PATH:=Qwen/Qwen2.5-Math-7B}"
export MODEL_PATH
exec bash "$(dirname "${BASH_SOURCE[0]}")/../qwen3-4b/run_reinforce_pp.sh" "$@"
