"""verl's own actor worker on one CPU process, driven the way verl's trainer drives it, with an RPG loss mode.

What runs is verl 0.9.1 code: `ActorRolloutRefWorker(role="actor").init_model()` (the FSDP2 engine over gloo), then
per step the trainer's own `RayPPOTrainer._compute_old_log_prob` -> `compute_advantage` -> `_update_actor`, which
reach the plug-in through `ppo_loss` -> `get_policy_loss_fn("rpg_*")` -> `agg_loss` with verl's `global_batch_info`.
What stands in for verl: the batch (prompts, responses, rewards) comes from the caller, because verl's rollout needs
vLLM/SGLang/TensorRT-LLM (docs/verl-cpu.md), and the worker is called in-process instead of through a Ray worker
group (Ray counts GPUs only).

CPU set-up (each item is a workaround for one line of verl, see docs/verl-cpu.md):
  - `VERL_PLATFORM=cpu` + `VERL_USE_EXTERNAL_MODULES=verl_cpu_platform`: the platform module in this folder;
  - `VERL_ENGINE_DEVICE=cuda`: the FSDP engine is registered for cuda/npu only;
  - a gloo process group created before verl's (verl would ask for the backend "cpu:gloo,cpu:gloo");
  - use_remove_padding=False, eager attention (no flash-attn), no torch.compile, float32 params (mixed_precision).
Everything here is process-global (platform, process group), so run it in a fresh process: `prepare_process()`
must come before anything imports verl.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
A = "actor_rollout_ref."


def prepare_process(port: int | None = None) -> None:
    """Environment and gloo process group for a one-process verl actor; call before the first `import verl`.
    `port`: the process group's; None picks a free one (two runs on one machine never collide)."""
    if "verl" in sys.modules:
        raise RuntimeError("prepare_process() must run before verl is imported (verl picks its platform on import)")
    sys.path.insert(0, str(HERE))
    os.environ.update(
        VERL_PLATFORM="cpu",
        VERL_USE_EXTERNAL_MODULES="verl_cpu_platform",
        VERL_ENGINE_DEVICE="cuda",
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port if port is not None else _free_port()),
        TOKENIZERS_PARALLELISM="false",
    )
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1)
    import verl  # noqa: F401  (imports verl_cpu_platform, then the rpgrl plug-in through its entry point)


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(model_dir: str | Path, seed: int = 0) -> int:
    """A tiny Qwen2 with the synthetic task's character tokenizer, saved as a Hugging Face folder. Returns the
    vocabulary size."""
    from rpgrl.models import build_char_tokenizer, build_tiny_model
    from rpgrl.rewards.synthetic import CHARS

    tokenizer = build_char_tokenizer(CHARS)
    model = build_tiny_model(tokenizer, hidden=32, layers=2, heads=2, kv_heads=1, ffn=64, seed=seed)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return len(tokenizer)


def compose_config(model_dir: str | Path, *overrides: str):
    """verl's ppo_trainer config (Hydra compose, as `main_ppo` builds it) for the CPU actor, then `overrides`."""
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo import core_algos

    config_dir = str(Path(core_algos.__file__).resolve().parents[1] / "config")
    cpu = [
        f"{A}model.path={model_dir}",
        f"{A}model.use_remove_padding=False",
        f"+{A}model.override_config.attn_implementation=eager",
        f"{A}actor.strategy=fsdp2",
        f"{A}actor.use_torch_compile=False",
        f"{A}actor.fsdp_config.use_torch_compile=False",
        f"+{A}actor.fsdp_config.mixed_precision={{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}}",
        f"{A}rollout.n=1",
        f"{A}rollout.temperature=1.0",
        f"{A}actor.use_kl_loss=False",
        f"{A}actor.policy_loss._target_=rpgrl.integrations.verl.RPGPolicyLossConfig",
        "algorithm.adv_estimator=rpg",
        "algorithm.use_kl_in_reward=False",
    ]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=[*cpu, *overrides])


def make_batch(
    vocab: int, *, batch: int = 8, prompt_len: int = 5, response_len: int = 6, group: int = 4, seed: int = 0
):
    """A verl rollout batch (`DataProto`) as the rollout and reward manager leave it: left-padded prompts,
    right-padded responses of ragged lengths >= 1, an outcome reward on each response's last token, prompt uids
    in groups of `group`. Token ids avoid the 3 special tokens."""
    import numpy as np
    import torch
    from verl import DataProto

    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab, (batch, prompt_len), generator=g)
    responses = torch.randint(3, vocab, (batch, response_len), generator=g)
    prompt_lens = torch.randint(2, prompt_len + 1, (batch,), generator=g)
    response_lens = torch.randint(1, response_len + 1, (batch,), generator=g)
    response_lens[0] = response_len  # at least one full-length response
    prompt_mask = (torch.arange(prompt_len)[None] >= prompt_len - prompt_lens[:, None]).long()  # left padding
    response_mask = (torch.arange(response_len)[None] < response_lens[:, None]).long()  # right padding
    prompts = prompts * prompt_mask  # pad id 0
    responses = responses * response_mask
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    rewards = torch.zeros(batch, response_len)
    rewards[torch.arange(batch), response_lens - 1] = torch.rand(batch, generator=g)
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "response_mask": response_mask,
            "token_level_rewards": rewards,
        },
        non_tensors={"uid": np.array([f"prompt{i // group}" for i in range(batch)], dtype=object)},
    )
    return data


class _Trainer:
    """The two attributes of `RayPPOTrainer` that its `_compute_old_log_prob` and `_update_actor` read; the worker
    stands in for the Ray worker group (same method names, called in-process)."""

    def __init__(self, config, worker):
        self.config = config
        self.actor_rollout_wg = worker


def build_actor(config):
    """verl's `ActorRolloutRefWorker(role="actor")` with its model, optimizer and loss built (`init_model`)."""
    from verl.workers.engine_workers import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="actor")
    worker.init_model()
    return worker


def named_params(module) -> dict[str, Any]:
    """Full (unsharded) copies of the FSDP2 module's parameters, by the Hugging Face names."""
    out = {}
    for name, p in module.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name] = full.detach().clone()
    return out


def ppo_step(config, worker, data, record: dict[str, list] | None = None):
    """One step of verl's trainer after the rollout: old log-probs from the actor, the advantage estimator, the
    actor update (mini-batches of `ppo_mini_batch_size`, each an optimizer step). Returns (batch with
    old_log_probs and advantages, verl's metric dict). With `record`, each optimizer step appends the parameters
    it starts from to record["params"] and the number of micro-batch forwards since the previous step to
    record["forwards"]."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage

    trainer = _Trainer(config, worker)
    data.meta_info["temperature"] = config.actor_rollout_ref.rollout.temperature  # as the rollout leaves it
    data.meta_info["global_token_num"] = data.batch["attention_mask"].sum(-1).tolist()  # as fit() sets it
    old_log_prob, _ = RayPPOTrainer._compute_old_log_prob(trainer, data)
    data = data.union(old_log_prob)
    algo = config.algorithm
    data = compute_advantage(
        data,
        adv_estimator=algo.adv_estimator,
        gamma=algo.gamma,
        lam=algo.lam,
        norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
        config=algo,
    )
    handles = []
    if record is not None:
        engine = worker.actor.engine
        forwards = [0]

        def count(module, args):
            forwards[0] += 1

        def before_step(optimizer, args, kwargs):
            record["params"].append(named_params(engine.module))
            record["forwards"].append(forwards[0])
            forwards[0] = 0

        handles = [
            engine.module.register_forward_pre_hook(count),
            engine.optimizer.register_step_pre_hook(before_step),
        ]
    try:
        output = RayPPOTrainer._update_actor(trainer, data)
    finally:
        for h in handles:
            h.remove()
    return data, output.meta_info["metrics"]


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", default="rpg_urkl_reinforce", help="verl loss mode rpg_<divergence>_<style>")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (win over the defaults)")
    args = parser.parse_args(argv)

    prepare_process()
    with tempfile.TemporaryDirectory() as model_dir:
        vocab = build_model(model_dir)
        config = compose_config(
            model_dir,
            f"{A}actor.policy_loss.loss_mode={args.mode}",
            f"+{A}actor.policy_loss.beta=0.05",
            f"+{A}actor.policy_loss.clip=dual",
            f"{A}actor.ppo_mini_batch_size=4",  # 2 mini-batches of the 8 responses: the second is off-policy
            f"{A}actor.ppo_micro_batch_size_per_gpu=2",
            f"{A}rollout.log_prob_micro_batch_size_per_gpu=4",
            f"{A}actor.optim.lr=0.01",
            *args.overrides,
        )
        worker = build_actor(config)
        for step in range(args.steps):
            _, metrics = ppo_step(config, worker, make_batch(vocab, seed=step))
            print(f"step {step + 1}:")
            for key in sorted(metrics):
                print(f"  {key} = {', '.join(f'{float(v):.4g}' for v in metrics[key])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
