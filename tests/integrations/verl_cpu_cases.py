"""Test support for test_verl_cpu_actor.py (run as a script in a fresh process): verl's actor worker on CPU
(examples/verl/cpu-smoke/cpu_actor.py) runs one PPO step per case and the outcome is saved for the test to check.

    python verl_cpu_cases.py MODEL_DIR OUT.pt CASES.json

CASES.json maps a case name to a list of Hydra overrides. Saved per case: the batch after old log-probs and
advantages, the parameters each optimizer step started from and the micro-batch forwards before it, the final
parameters, verl's metric dict, the actor settings the reference needs, or the error if the step raised.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "verl" / "cpu-smoke"))

import cpu_actor  # noqa: E402


def run_case(model_dir: str, vocab: int, overrides: list[str]) -> dict:
    config = cpu_actor.compose_config(model_dir, *overrides)
    worker = cpu_actor.build_actor(config)
    actor = config.actor_rollout_ref.actor
    out = {
        "settings": {
            "loss_mode": actor.policy_loss.loss_mode,
            "beta": float(actor.policy_loss.beta),
            "clip": actor.policy_loss.clip,
            "loss_agg_mode": actor.loss_agg_mode,
            "eps_low": float(actor.clip_ratio_low),
            "eps_high": float(actor.clip_ratio_high),
            "c": float(actor.clip_ratio_c),
            "lr": float(actor.optim.lr),
            "mini_batch": int(actor.ppo_mini_batch_size) * int(config.actor_rollout_ref.rollout.n),
        },
        "record": {"params": [], "forwards": []},
    }
    module = worker.actor.engine.module
    out["initial"] = cpu_actor.named_params(module)
    data = cpu_actor.make_batch(vocab)
    try:
        data, metrics = cpu_actor.ppo_step(config, worker, data, record=out["record"])
    except Exception as e:  # the refusal cases: keep the message and check the weights did not move
        out["error"] = f"{type(e).__name__}: {e}"
        out["traceback"] = traceback.format_exc()
    else:
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask", "old_log_probs"]
        out["batch"] = {k: data.batch[k].clone() for k in [*keys, "advantages"]}
        out["metrics"] = {k: [float(x) for x in v] for k, v in metrics.items()}
    out["final"] = cpu_actor.named_params(module)
    return out


def main(model_dir: str, out_path: str, cases_path: str) -> None:
    import torch

    cpu_actor.prepare_process()
    vocab = cpu_actor.build_model(model_dir)
    cases = json.loads(Path(cases_path).read_text())
    torch.save({name: run_case(model_dir, vocab, overrides) for name, overrides in cases.items()}, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
