# Shared settings of the rpgrl verl launch scripts; sourced by every run_*.sh, which then calls
#   launch <row name> <row overrides...> "$@"     (experiment name: <model>-<row>-ctx<CTX>)
# Overrides are passed in order: these shared ones, the row's, then the command line's (so the last wins).
#
# Environment (all optional):
#   CTX           2k | 4k | 8k   prompt + response budget: 2k = 2048 + 2048 tokens (the released scripts'
#                                "CTX2K"), 4k = 4096 + 4096, 8k = 8192 + 8192 (the paper leaves 8K unspecified)
#   MODEL_PATH    Hugging Face id or local folder (default: set by the row script)
#   DATA_DIR      folder with dapo-math-17k-eng.parquet, aime-2024.parquet, aime25.parquet, amc-23.parquet
#   TRAIN_FILE    training parquet (default $DATA_DIR/dapo-math-17k-eng.parquet)
#   NNODES, N_GPUS_PER_NODE (1, 8), CKPTS_DIR, LOGGER ("[console,wandb]")
#   RPGRL_PRINT_OVERRIDES=1     print the Hydra overrides, one per line, instead of launching (the CPU test
#                               composes exactly these)
#
# Settings follow docs/rpg-spec.md 7.1-7.3: 512 prompts x 16 responses per step, mini-batch 32 prompts, 1 epoch,
# AdamW lr 1e-6 (row scripts may change it), 10 warm-up steps, weight decay 0.1, grad clip 1.0, temperature 1.0,
# token-mean, dual-clip c = 10 with eps 0.2/0.28, DAPO group filter on `acc` (generation batches of 3 x 512
# prompts, at most 20), overlong penalty over the last quarter of the response budget (512 of 2048 as released;
# scaled with CTX, our choice), 400 training steps, evaluation on AMC23/AIME24/AIME25 every 10 steps.

RPGRL_VERL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

launch() {
    local exp_name=$1
    shift
    local ctx=${CTX:-2k}
    local prompt_len response_len
    case "$ctx" in
        2k) prompt_len=2048; response_len=2048 ;;
        4k) prompt_len=4096; response_len=4096 ;;
        8k) prompt_len=8192; response_len=8192 ;;
        *) echo "CTX must be 2k, 4k or 8k, got '$ctx'" >&2; return 2 ;;
    esac
    local seq_len=$((prompt_len + response_len))
    local token_budget=$((seq_len > 16384 ? seq_len : 16384))  # tokens per GPU per micro-batch (memory knob)
    local data_dir=${DATA_DIR:-$HOME/data/rpg}
    local train_file=${TRAIN_FILE:-$data_dir/dapo-math-17k-eng.parquet}
    local val_files="[$data_dir/amc-23.parquet,$data_dir/aime-2024.parquet,$data_dir/aime25.parquet]"
    local name="$(basename "$MODEL_PATH")-${exp_name}-ctx${ctx}"

    local args=(
        # data (spec 7.2, 7.5: prompts are stored as chat messages and rendered with the model's template)
        data.train_files="$train_file"
        data.val_files="$val_files"
        data.prompt_key=prompt
        data.truncation=left
        data.max_prompt_length=$prompt_len
        data.max_response_length=$response_len
        data.train_batch_size=512
        data.gen_batch_size=$((3 * 512))
        # model and optimizer (spec 7.1, 7.4)
        actor_rollout_ref.model.path="$MODEL_PATH"
        actor_rollout_ref.model.use_remove_padding=True
        actor_rollout_ref.model.enable_gradient_checkpointing=True
        +actor_rollout_ref.model.override_config.attention_dropout=0.0
        actor_rollout_ref.actor.optim.lr=1e-6
        actor_rollout_ref.actor.optim.lr_warmup_steps=10
        actor_rollout_ref.actor.optim.weight_decay=0.1
        actor_rollout_ref.actor.optim.clip_grad=1.0
        # policy update: clip parameters are verl's own; RPG rows add their loss mode on top
        actor_rollout_ref.actor.ppo_mini_batch_size=32
        actor_rollout_ref.actor.ppo_epochs=1
        actor_rollout_ref.actor.use_dynamic_bsz=True
        actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$token_budget
        actor_rollout_ref.actor.clip_ratio_low=0.2
        actor_rollout_ref.actor.clip_ratio_high=0.28
        actor_rollout_ref.actor.clip_ratio_c=10.0
        actor_rollout_ref.actor.loss_agg_mode=token-mean
        actor_rollout_ref.actor.entropy_coeff=0
        actor_rollout_ref.actor.use_kl_loss=False
        # rollout (vLLM, spec 7.2)
        actor_rollout_ref.rollout.name=vllm
        actor_rollout_ref.rollout.n=16
        actor_rollout_ref.rollout.temperature=1.0
        actor_rollout_ref.rollout.top_p=1.0
        actor_rollout_ref.rollout.top_k=-1
        actor_rollout_ref.rollout.tensor_model_parallel_size=1
        actor_rollout_ref.rollout.gpu_memory_utilization=0.85
        actor_rollout_ref.rollout.max_num_batched_tokens=$token_budget
        actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True
        actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$token_budget
        actor_rollout_ref.rollout.val_kwargs.temperature=1.0
        actor_rollout_ref.rollout.val_kwargs.top_p=1.0
        actor_rollout_ref.rollout.val_kwargs.do_sample=True
        actor_rollout_ref.rollout.val_kwargs.n=1
        # reward: rpgrl's math verifier (spec 7.6), DAPO overlong penalty (spec 5.3)
        reward.reward_manager.name=dapo
        reward.custom_reward_function.path="$RPGRL_VERL_DIR/reward.py"
        reward.custom_reward_function.name=compute_score
        +reward.reward_kwargs.max_resp_len=$response_len
        +reward.reward_kwargs.overlong_buffer_cfg.enable=True
        +reward.reward_kwargs.overlong_buffer_cfg.len=$((response_len / 4))
        +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0
        +reward.reward_kwargs.overlong_buffer_cfg.log=False
        # advantages and DAPO dynamic sampling (spec 5.1, 5.3); RPG rows use the rpg estimator
        algorithm.adv_estimator=rpg
        algorithm.use_kl_in_reward=False
        algorithm.filter_groups.enable=True
        algorithm.filter_groups.metric=acc
        algorithm.filter_groups.max_num_gen_batches=20
        # trainer
        trainer.project_name=rpgrl
        trainer.experiment_name="$name"
        trainer.logger="${LOGGER:-[console,wandb]}"
        trainer.nnodes="${NNODES:-1}"
        trainer.n_gpus_per_node="${N_GPUS_PER_NODE:-8}"
        trainer.total_training_steps=400
        trainer.val_before_train=True
        trainer.test_freq=10
        trainer.save_freq=20
        trainer.resume_mode=auto
        trainer.max_actor_ckpt_to_keep=1
        trainer.default_local_dir="${CKPTS_DIR:-$PWD/ckpts/rpgrl/$name}"
        "$@"
    )
    if [[ -n "${RPGRL_PRINT_OVERRIDES:-}" ]]; then
        printf '%s\n' "${args[@]}"
    else
        python3 -m verl.trainer.main_ppo "${args[@]}"
    fi
}

# The RPG loss settings every RPG row shares: rpgrl's policy_loss sub-config (rpgrl/integrations/verl.py).
RPG_LOSS=(
    actor_rollout_ref.actor.policy_loss._target_=rpgrl.integrations.verl.RPGPolicyLossConfig
    +actor_rollout_ref.actor.policy_loss.beta=1e-4
    +actor_rollout_ref.actor.policy_loss.clip=dual
)
