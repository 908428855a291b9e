"""verl's own actor worker with RPG loss modes, on CPU (issues 14 and 16): `ActorRolloutRefWorker(role="actor")`
with the FSDP2 engine over gloo, driven by `RayPPOTrainer._compute_old_log_prob` -> `compute_advantage` ("rpg") ->
`_update_actor`, in one fresh process (tests/integrations/verl_cpu_cases.py, about a minute for all cases).

Each update has two mini-batches of 4 responses (the second is off-policy: the first step moved the weights) and
SGD without clipping or weight decay, so the weights after an optimizer step are w - lr * g. The test recomputes g
in float64 with `rpgrl.rpg_loss` over the whole mini-batch (the global normaliser) on a Hugging Face copy of the
model holding the weights that step started from, and compares. Micro-batching (1, 2, 4 per micro-batch) and
dynamic batch size must not change it. See docs/verl-cpu.md for what runs where."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("hydra")

from rpgrl.objectives.rpg import rpg_loss  # noqa: E402

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
A = "actor_rollout_ref.actor."
RPG = [f"+{A}policy_loss.beta=0.05", f"+{A}policy_loss.clip=dual", f"{A}clip_ratio_low=0.2", f"{A}clip_ratio_high=0.28"]
SGD = [f"{A}optim.optimizer=SGD", f"{A}optim.lr=0.05", f"{A}optim.weight_decay=0", f"{A}optim.clip_grad=1e6"]
BATCHING = [f"{A}ppo_mini_batch_size=4", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"]
DYNAMIC = [  # token budget 20 per micro-batch: sequences here have 3..11 tokens
    f"{A}use_dynamic_bsz=True",
    f"{A}ppo_max_token_len_per_gpu=20",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=20",
]


def case(mode: str, *extra: str, micro: int = 2) -> list[str]:
    return [
        f"{A}policy_loss.loss_mode={mode}",
        *RPG,
        *SGD,
        *BATCHING,
        f"{A}ppo_micro_batch_size_per_gpu={micro}",
        *extra,
    ]


CASES = {
    "urkl_reinforce_micro1": case("rpg_urkl_reinforce", micro=1),
    "urkl_reinforce_micro2": case("rpg_urkl_reinforce", micro=2),
    "urkl_reinforce_micro4": case("rpg_urkl_reinforce", micro=4),
    "urkl_reinforce_dynamic": case("rpg_urkl_reinforce", *DYNAMIC),
    "fkl_differentiable_seqmean": case("rpg_fkl_differentiable", f"{A}loss_agg_mode=seq-mean-token-mean"),
    "ufkl_reinforce_bf16": case(
        "rpg_ufkl_reinforce", f"{A}fsdp_config.mixed_precision={{param_dtype:bf16,reduce_dtype:fp32,buffer_dtype:fp32}}"
    ),
    "use_kl_loss": case("rpg_urkl_reinforce", f"{A}use_kl_loss=True"),
}
COMPARED = [name for name in CASES if name not in ("ufkl_reinforce_bf16", "use_kl_loss")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verl_cpu")
    (tmp / "cases.json").write_text(json.dumps(CASES))
    src = str(HERE.parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    cmd = [
        sys.executable,
        str(HERE / "verl_cpu_cases.py"),
        str(tmp / "model"),
        str(tmp / "out.pt"),
        str(tmp / "cases.json"),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return tmp / "model", torch.load(tmp / "out.pt", weights_only=False)


def reference_gradient(model_dir: Path, params: dict, batch: dict, rows: slice, settings: dict) -> dict:
    """d rpg_loss / d params in float64 on one mini-batch, with rpg_loss's default normaliser over these rows (the
    mini-batch's global token or sequence count), on a Hugging Face copy of the model holding `params`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager")
    missing, unexpected = model.load_state_dict({k: v.double() for k, v in params.items()}, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embedding
    ids, attention = batch["input_ids"][rows], batch["attention_mask"][rows].bool()
    responses, mask = batch["responses"][rows], batch["response_mask"][rows].bool()
    T = responses.shape[1]
    rows_logp = []
    for i in range(len(ids)):  # one unpadded sequence at a time (HF eager attention turns left padding into NaN)
        seq = ids[i][attention[i]]  # prompt tokens, then the response's valid tokens
        n = int(mask[i].sum())
        logits = model(input_ids=seq[None]).logits[0, -n - 1 : -1]  # (n, V): the position before each token
        row = torch.log_softmax(logits, -1).gather(-1, seq[-n:, None])[:, 0]  # (n,)
        rows_logp.append(torch.cat([row, row.new_zeros(T - n)]))
    logp = torch.stack(rows_logp)  # (B, T), zero on padding
    _, divergence, style = settings["loss_mode"].split("_")
    out = rpg_loss(
        logp, batch["old_log_probs"][rows].double(), batch["advantages"][rows].double(), mask,
        divergence=divergence, style=style, beta=settings["beta"], clip=settings["clip"],
        eps_low=settings["eps_low"], eps_high=settings["eps_high"], c=settings["c"], agg=settings["loss_agg_mode"],
    )  # fmt: skip
    names = list(params)
    grads = torch.autograd.grad(out.loss, [dict(model.named_parameters())[n] for n in names])
    return dict(zip(names, grads, strict=True))


@pytest.mark.parametrize("name", COMPARED)
def test_each_optimizer_step_equals_rpg_loss_with_the_global_normaliser(runs, name):
    model_dir, results = runs
    r = results[name]
    assert "error" not in r, r.get("traceback")
    settings, params = r["settings"], r["record"]["params"]
    n, mb = r["batch"]["responses"].shape[0], settings["mini_batch"]
    assert len(params) == n // mb == 2  # two optimizer steps: the second mini-batch is off-policy
    after = [*params[1:], r["final"]]
    for k in range(n // mb):
        g_ref = reference_gradient(model_dir, params[k], r["batch"], slice(k * mb, (k + 1) * mb), settings)
        scale = max(g.abs().max() for g in g_ref.values())
        assert scale > 1e-3
        for p in g_ref:
            implied = (params[k][p].double() - after[k][p].double()) / settings["lr"]  # SGD: w' = w - lr g
            torch.testing.assert_close(implied, g_ref[p], rtol=2e-3, atol=2e-4 * scale, msg=f"step {k}, {p}")


def test_micro_batching_really_happened(runs):
    """Forward passes per optimizer step: mini-batch 4 in micro-batches of 1, 2, 4, and by a 20-token budget."""
    _, results = runs
    forwards = {name: results[name]["record"]["forwards"] for name in COMPARED}
    assert forwards["urkl_reinforce_micro1"] == [4, 4]
    assert forwards["urkl_reinforce_micro2"] == [2, 2]
    assert forwards["urkl_reinforce_micro4"] == [1, 1]
    assert all(f >= 2 for f in forwards["urkl_reinforce_dynamic"])


def test_rpg_metrics_arrive_in_verls_metric_dict(runs):
    _, results = runs
    metrics = results["urkl_reinforce_micro2"]["metrics"]
    for key in ("actor/kl/urkl", "actor/kl/k1_old", "actor/log_w/max", "actor/clip/frac_dual", "actor/pg_loss"):
        assert len(metrics[key]) == 2, key  # one value per mini-batch (verl averages over micro-batches)
    assert metrics["actor/kl/urkl"][0] == pytest.approx(0, abs=1e-6)  # on-policy: pi = pi_old
    assert metrics["actor/kl/urkl"][1] > 1e-5  # off-policy second mini-batch
    assert "actor/logp_upcast" not in metrics  # float32 parameters


def test_bf16_parameters_run_and_report_the_upcast(runs):
    """verl's mixed precision with bf16 parameters hands bf16 log-probs: the step runs, says so, moves the weights."""
    _, results = runs
    r = results["ufkl_reinforce_bf16"]
    assert "error" not in r, r.get("traceback")
    assert r["metrics"]["actor/logp_upcast"] == [1.0, 1.0]
    assert all(torch.isfinite(torch.tensor(v)).all() for v in r["metrics"].values())
    assert any(not torch.equal(r["initial"][p], r["final"][p]) for p in r["initial"])


def test_use_kl_loss_is_refused_before_any_update(runs):
    _, results = runs
    r = results["use_kl_loss"]
    assert "use_kl_loss=False" in r.get("error", ""), r.get("error")
    assert r["record"]["params"] == []  # no optimizer step ran
    assert all(torch.equal(r["initial"][p], r["final"][p]) for p in r["initial"])
