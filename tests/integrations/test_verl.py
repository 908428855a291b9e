"""verl plug-in (rpgrl/integrations/verl.py): every registered loss mode, called the way verl calls it, against
rpgrl.rpg_loss and against verl's own PPO loss; the advantage estimator against verl's; config refusals; and the
`verl.plugins` entry-point loading in a fresh interpreter. CPU, float64 where the comparison is numeric."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("hydra")

import numpy as np  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.errors import InstantiationException  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

import rpgrl.integrations.verl as plugin  # noqa: E402
from rpgrl.objectives.reduce import AGG_MODES  # noqa: E402
from rpgrl.objectives.rpg import rpg_loss  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
VERL_CONFIG_DIR = str(Path(core_algos.__file__).resolve().parents[1] / "config")
F64 = torch.float64
RPG_TARGET = "actor_rollout_ref.actor.policy_loss._target_=rpgrl.integrations.verl.RPGPolicyLossConfig"

# The public contract: these names, exactly.
EXPECTED_MODES = [
    "rpg_fkl_differentiable",
    "rpg_fkl_reinforce",
    "rpg_rkl_differentiable",
    "rpg_rkl_reinforce",
    "rpg_ufkl_differentiable",
    "rpg_ufkl_reinforce",
    "rpg_urkl_differentiable",
    "rpg_urkl_reinforce",
]


def compose_actor(*overrides: str):
    """verl's actor config exactly as verl builds it: Hydra compose of ppo_trainer.yaml, then instantiate."""
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        cfg = compose("ppo_trainer", overrides=["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", *overrides])
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


@pytest.fixture(scope="module")
def base_actor():
    return compose_actor(
        RPG_TARGET,
        "actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_reinforce",
        "+actor_rollout_ref.actor.policy_loss.beta=0.05",
        "+actor_rollout_ref.actor.policy_loss.clip=dual",
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "actor_rollout_ref.actor.clip_ratio_c=1.5",
    )


def actor_with(base, *, batch_info=None, **loss_fields):
    """A copy of the composed actor config with other RPG options (the loss reads only these fields)."""
    policy_loss = dataclasses.replace(base.policy_loss, **loss_fields)
    return dataclasses.replace(base, policy_loss=policy_loss, global_batch_info=dict(batch_info or {}))


def random_batch(seed: int, B: int = 6, T: int = 9, scale: float = 0.6):
    """verl-shaped inputs: log-probs (B, T), bool response mask with ragged lengths >= 1, per-token advantages
    constant along each response (outcome estimators), zero on padding."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=F64) * 3 - 0.05
    logp = old + scale * torch.randn(B, T, generator=g, dtype=F64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    adv = torch.randn(B, generator=g, dtype=F64)[:, None] * mask
    return logp.requires_grad_(True), old, adv, mask


BATCH_INFOS = {
    "local": {},  # single process, no global counts: agg_loss normalises by the micro-batch
    "dp2": {"dp_size": 2, "batch_num_tokens": 61, "global_batch_size": 14, "loss_scale_factor": None},
}


def verl_loss_and_grad(mode, logp, old, adv, mask, agg, config, weights=None):
    fn = core_algos.get_policy_loss_fn(mode)
    loss, metrics = fn(
        old_log_prob=old,
        log_prob=logp,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=agg,
        config=config,
        rollout_is_weights=weights,
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, metrics


def test_registered_names_are_the_contract():
    assert list(plugin.LOSS_MODES) == EXPECTED_MODES
    for mode in EXPECTED_MODES:
        assert core_algos.POLICY_LOSS_REGISTRY[mode].__name__ == f"compute_policy_loss_{mode}"
    assert "rpg" in core_algos.ADV_ESTIMATOR_REGISTRY


@pytest.mark.parametrize("clip", [None, "dual"])
@pytest.mark.parametrize("info", list(BATCH_INFOS))
@pytest.mark.parametrize("mode", EXPECTED_MODES)
def test_every_mode_equals_rpg_loss(base_actor, mode, clip, info):
    """Value and gradient through get_policy_loss_fn equal rpg_loss with verl's clip parameters and the normaliser
    verl's agg_loss applies (global count / dp_size), in every shared aggregation mode."""
    _, divergence, style = mode.split("_")
    batch_info = BATCH_INFOS[info]
    config = actor_with(base_actor, batch_info=batch_info, clip=clip, beta=0.05)
    for k, agg in enumerate(AGG_MODES):
        logp, old, adv, mask = random_batch(seed=k)
        loss, grad, metrics = verl_loss_and_grad(mode, logp, old, adv, mask, agg, config)
        count = batch_info.get("batch_num_tokens" if agg == "token-mean" else "global_batch_size")
        ref = rpg_loss(
            logp, old, adv, mask, divergence=divergence, style=style, beta=0.05, clip=clip, eps_low=0.2,
            eps_high=0.28, c=1.5, agg=agg, normalizer=None if count is None else count / batch_info["dp_size"],
        )  # fmt: skip
        (ref_grad,) = torch.autograd.grad(ref.loss, logp)
        torch.testing.assert_close(loss, ref.loss.detach(), rtol=1e-7, atol=1e-12)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-7, atol=1e-12)
        assert grad.abs().sum() > 0
        assert set(metrics) == {f"actor/{k}" for k in ref.metrics if not k.startswith("loss/")}
        assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in metrics.values())
        if clip == "dual":
            torch.testing.assert_close(metrics["actor/clip/frac_dual"], ref.metrics["clip/frac_dual"])


@pytest.mark.parametrize("mode", EXPECTED_MODES)
def test_sequence_level(base_actor, mode):
    """level=sequence: verl's (B, T) advantages become one value per response; the differentiable style (no
    per-token form) is reduced with agg_loss's normaliser."""
    _, divergence, style = mode.split("_")
    batch_info = BATCH_INFOS["dp2"]
    config = actor_with(base_actor, batch_info=batch_info, clip="dual", beta=0.05, level="sequence")
    logp, old, adv, mask = random_batch(seed=3, scale=0.15)
    loss, grad, _ = verl_loss_and_grad(mode, logp, old, adv, mask, "token-mean", config)
    adv_seq = adv[:, 0]  # constant along each response; every response has >= 1 token
    ref = rpg_loss(
        logp, old, adv_seq, mask, divergence=divergence, style=style, beta=0.05, clip="dual", eps_low=0.2,
        eps_high=0.28, c=1.5, level="sequence", normalizer=61 / 2,
    )  # fmt: skip
    (ref_grad,) = torch.autograd.grad(ref.loss, logp)
    torch.testing.assert_close(loss, ref.loss.detach(), rtol=1e-7, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-7, atol=1e-12)


def worker_batch(logp, old, adv, mask, prompt_lens, batch_info):
    """What verl's actor worker hands `ppo_loss`: the model's log-probs unpadded (one flat row of prompt + response
    positions per sequence, each response token scored at the position before it) and a TensorDict batch."""
    from tensordict import TensorDict

    B, T = mask.shape
    P = int(prompt_lens.max())
    resp_lens = mask.sum(-1)
    attention = torch.zeros(B, P + T, dtype=torch.long)
    pieces = []
    for i in range(B):
        attention[i, P - prompt_lens[i] : P] = 1  # left-padded prompt
        attention[i, P : P + resp_lens[i]] = 1
        pad = torch.zeros(int(prompt_lens[i]) - 1, dtype=logp.dtype)
        pieces += [pad, logp[i, : resp_lens[i]], torch.zeros(1, dtype=logp.dtype)]
    data = TensorDict(
        {
            "prompts": torch.zeros(B, P, dtype=torch.long),
            "responses": torch.zeros(B, T, dtype=torch.long),
            "attention_mask": attention,
            "response_mask": mask.long(),
            "old_log_probs": old,
            "advantages": adv,
        },
        batch_size=[B],
    )
    for key in ("dp_size", "batch_num_tokens", "global_batch_size"):
        data.set_non_tensor(key, batch_info.get(key, 1 if key == "dp_size" else None))
    return {"log_probs": torch.cat(pieces)}, data


@pytest.mark.parametrize("info", list(BATCH_INFOS))
def test_through_verls_own_ppo_loss(base_actor, info):
    """The real call site: verl.workers.utils.losses.ppo_loss, which fills global_batch_info from the batch, picks
    the mode from actor.policy_loss.loss_mode and wraps the metrics in verl's Metric."""
    from verl.utils.metric import Metric
    from verl.workers.utils.losses import ppo_loss

    batch_info = BATCH_INFOS[info]
    config = actor_with(base_actor, batch_info=BATCH_INFOS["dp2"], clip="dual")  # data-parallel: global counts
    logp, old, adv, mask = random_batch(seed=11)
    model_output, data = worker_batch(logp, old, adv, mask, torch.tensor([1, 3, 2, 3, 1, 2]), batch_info)
    loss, metrics = ppo_loss(config, model_output, data)
    (grad,) = torch.autograd.grad(loss, logp)
    n = batch_info.get("batch_num_tokens")
    ref = rpg_loss(logp, old, adv, mask, divergence="urkl", style="reinforce", beta=0.05, clip="dual", eps_low=0.2,
                   eps_high=0.28, c=1.5, normalizer=None if n is None else n / batch_info["dp_size"])  # fmt: skip
    (ref_grad,) = torch.autograd.grad(ref.loss, logp)
    torch.testing.assert_close(loss, ref.loss.detach(), rtol=1e-7, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-7, atol=1e-12)
    assert isinstance(metrics["actor/kl/urkl"], Metric)
    assert math.isfinite(metrics["actor/kl/urkl"].aggregate()) and "actor/pg_loss" in metrics


def test_sequence_level_refuses_token_varying_advantages(base_actor):
    config = actor_with(base_actor, clip=None, level="sequence")
    logp, old, _, mask = random_batch(seed=4)
    adv = torch.randn(mask.shape, dtype=F64) * mask  # varies along the response (e.g. GAE)
    with pytest.raises(ValueError, match="one advantage per response"):
        verl_loss_and_grad("rpg_urkl_reinforce", logp, old, adv, mask, "token-mean", config)


@pytest.mark.parametrize("style", ["differentiable", "reinforce"])
def test_beta_zero_dual_clip_is_verls_ppo_gradient(base_actor, style):
    """Spec 4.2: with no KL, RPG-Style Clip has exactly PPO dual clip's per-sample gradient (and, differentiable,
    its value). The reference here is verl's own `vanilla` loss, an independent implementation."""
    config = actor_with(base_actor, clip="dual", beta=0.0)
    logp, old, adv, mask = random_batch(seed=5, scale=0.4)
    loss, grad, metrics = verl_loss_and_grad(f"rpg_urkl_{style}", logp, old, adv, mask, "token-mean", config)
    vanilla, vanilla_grad, vanilla_metrics = verl_loss_and_grad("vanilla", logp, old, adv, mask, "token-mean", config)
    torch.testing.assert_close(grad, vanilla_grad, rtol=1e-9, atol=1e-14)
    if style == "differentiable":
        torch.testing.assert_close(loss, vanilla, rtol=1e-9, atol=1e-14)
    # the batch really exercises every region: clipped high, clipped low and the dual cap (c = 1.5)
    assert vanilla_metrics["actor/pg_clipfrac"] > 0 and vanilla_metrics["actor/pg_clipfrac_lower"] > 0
    frac_dual = metrics["actor/clip/frac_dual"].item()
    torch.testing.assert_close(frac_dual, vanilla_metrics["actor/pg_clipfrac_lower"], rtol=1e-6, atol=0)  # verl: fp32


def test_rollout_is_weights_multiply_the_per_token_loss(base_actor):
    config = actor_with(base_actor, clip="dual")
    logp, old, adv, mask = random_batch(seed=6)
    weights = torch.rand(mask.shape, dtype=F64) + 0.5
    loss, grad, _ = verl_loss_and_grad("rpg_ufkl_reinforce", logp, old, adv, mask, "seq-mean-token-mean", config,
                                       weights)  # fmt: skip
    ref = rpg_loss(logp, old, adv, mask, divergence="ufkl", style="reinforce", beta=0.05, clip="dual", c=1.5)
    expected = core_algos.agg_loss(ref.per_token * weights, mask, "seq-mean-token-mean")
    (expected_grad,) = torch.autograd.grad(expected, logp)
    torch.testing.assert_close(loss, expected.detach())
    torch.testing.assert_close(grad, expected_grad)


def test_verl_only_agg_modes_go_through_agg_loss(base_actor):
    config = actor_with(base_actor, clip="dual")
    logp, old, adv, mask = random_batch(seed=7)
    loss, _, _ = verl_loss_and_grad("rpg_rkl_differentiable", logp, old, adv, mask, "token-sum", config)
    ref = rpg_loss(logp, old, adv, mask, divergence="rkl", style="differentiable", beta=0.05, clip="dual", c=1.5)
    torch.testing.assert_close(loss, (ref.per_token * mask).sum().detach())


@pytest.mark.parametrize("agg", AGG_MODES)
def test_fully_masked_rows_contribute_nothing(base_actor, agg):
    """A response with no valid token (verl's agg_loss excludes such rows from seq-mean counts) gets zero loss and
    zero gradient; the rest equals rpg_loss on the non-empty rows."""
    config = actor_with(base_actor, clip="dual")
    logp, old, adv, mask = random_batch(seed=10)
    mask[2] = False
    loss, grad, _ = verl_loss_and_grad("rpg_urkl_differentiable", logp, old, adv * mask, mask, agg, config)
    keep = torch.tensor([i != 2 for i in range(mask.shape[0])])
    ref = rpg_loss(logp[keep], old[keep], adv[keep], mask[keep], divergence="urkl", style="differentiable",
                   beta=0.05, clip="dual", c=1.5, agg=agg)  # fmt: skip
    (ref_grad,) = torch.autograd.grad(ref.loss, logp)
    torch.testing.assert_close(loss, ref.loss.detach(), rtol=1e-7, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-7, atol=1e-12)
    assert grad[2].abs().sum() == 0


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("empty_rows", [[2], [0, 1, 2, 3]])
def test_padding_holding_inf_or_nan_never_reaches_loss_or_gradient(base_actor, level, empty_rows):
    """Padding may hold anything (a model's log-prob of a pad token can be -inf, a masked advantage NaN): a batch
    with empty rows used to build its zeros as logp * 0 (NaN at -inf), and level=sequence averaged verl's
    advantages as adv * mask (NaN * 0). Loss and gradient equal those of the same batch with clean padding."""
    config = actor_with(base_actor, clip="dual", level=level)
    logp, old, adv, mask = random_batch(seed=12)
    mask[empty_rows] = False
    mask[1, -2:] = False  # and some padding at the end of a kept row
    clean = verl_loss_and_grad("rpg_urkl_reinforce", logp, old, adv * mask, mask, "token-mean", config)
    dirty_logp, dirty_adv = logp.detach().clone(), adv.clone()
    dirty_logp[~mask] = -math.inf
    dirty_adv[~mask] = math.nan
    dirty_logp.requires_grad_(True)
    loss, grad, metrics = verl_loss_and_grad("rpg_urkl_reinforce", dirty_logp, old, dirty_adv, mask, "token-mean",
                                             config)  # fmt: skip
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    torch.testing.assert_close(loss, clean[0], rtol=0, atol=0)
    torch.testing.assert_close(grad, clean[1], rtol=0, atol=0)
    assert sorted(metrics) == sorted(clean[2])


def test_the_shared_helper_checks_its_inputs_even_with_empty_rows():
    """With an empty row the helper indexes by row: a wrong shape or type got an IndexError or AttributeError, and a
    micro-batch with no valid token was not checked at all. Now rpg_loss's own one-line messages."""
    from rpgrl.integrations._common import rpg_loss_nonempty

    logp, old, adv, mask = random_batch(seed=13)
    for rows in ([2], slice(None)):
        m = mask.clone()
        m[rows] = False
        with pytest.raises(ValueError, match="advantages has shape"):
            rpg_loss_nonempty(logp, old, torch.zeros(mask.shape[0] + 1, dtype=logp.dtype), m)
        with pytest.raises(ValueError, match="old_logp has shape"):
            rpg_loss_nonempty(logp, old[:, :-1], adv, m)
        with pytest.raises(ValueError, match="mask must be a torch.Tensor"):
            rpg_loss_nonempty(logp, old, adv, m.tolist())


@pytest.mark.parametrize("mode", ["rpg_urkl_reinforce", "rpg_rkl_differentiable"])
def test_an_all_masked_micro_batch_reports_the_same_metrics(base_actor, mode):
    """verl gathers each micro-batch's metrics over data-parallel ranks and needs the same names everywhere
    (Metric.aggregate_dp raised on a rank whose micro-batch was all masked, e.g. by rollout-correction rejection
    sampling): the empty one reports every name, at 0 as verl's own losses do; its loss and gradient are 0."""
    from verl.utils.metric.utils import AggregationType, Metric

    config = actor_with(base_actor, batch_info=BATCH_INFOS["dp2"], clip="dual")  # data-parallel: global counts
    logp, old, adv, mask = random_batch(seed=11)
    _, _, full = verl_loss_and_grad(mode, logp, old, adv, mask, "token-mean", config)
    loss, grad, empty = verl_loss_and_grad(mode, logp, old, adv * 0, mask & False, "token-mean", config)
    assert sorted(empty) == sorted(full) and all(float(v) == 0.0 for v in empty.values())
    assert loss == 0 and grad.abs().sum() == 0
    for name in full:  # two ranks, one micro-batch each: aggregates as verl does
        ranks = [Metric.from_dict({name: m[name]}, AggregationType.MEAN)[name] for m in (full, empty)]
        assert Metric.aggregate_dp(ranks) == pytest.approx(float(full[name]) / 2)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("agg", [*AGG_MODES, "seq-mean-token-sum-norm"])
def test_an_all_masked_micro_batch_without_global_counts_is_zero(base_actor, level, agg):
    """Called without global batch info (one process, no data parallelism), verl's agg_loss normalises by the
    micro-batch's own count: 0 / 0 = NaN on a micro-batch with no valid token (its own losses do the same). The
    plug-in's loss is 0 with a zero gradient there, and a micro-batch with a valid token is unchanged."""
    config = actor_with(base_actor, batch_info=BATCH_INFOS["local"], clip="dual", level=level)
    logp, old, adv, mask = random_batch(seed=14)
    loss, grad, _ = verl_loss_and_grad("rpg_urkl_reinforce", logp, old, adv * 0, mask & False, agg, config)
    assert loss == 0 and torch.isfinite(grad).all() and grad.abs().sum() == 0
    one = mask & False
    one[1, 0] = True
    loss, grad, _ = verl_loss_and_grad("rpg_urkl_reinforce", logp, old, adv * one, one, agg, config)
    ref = core_algos.agg_loss(loss_mat=torch.ones_like(logp), loss_mask=one, loss_agg_mode=agg)
    assert torch.isfinite(loss) and grad[1, 0] != 0 and ref == 1 / (logp.shape[1] if agg.endswith("norm") else 1)


def test_verls_model_patch_runs_next_to_rpgrls_trl_extra():
    """Issue 16: verl's FSDP engine calls apply_monkey_patch on every actor it builds, and that imported trl's
    AutoModelForCausalLMWithValueHead whenever trl was installed; trl >= 1.14 has no such class. With the plug-in
    loaded the call goes through (this is the call with the engine's arguments on a CPU actor; the slow
    test_verl_cpu_actor.py builds the whole actor)."""
    from verl.models.transformers import monkey_patch

    from rpgrl.models import build_char_tokenizer, build_tiny_model

    if importlib.util.find_spec("trl") is None:
        pytest.skip("needs trl installed next to verl (rpgrl[trl,verl])")
    assert monkey_patch.is_trl_available() is plugin._trl_has_value_head()
    model = build_tiny_model(build_char_tokenizer("ab"), hidden=8, layers=1, heads=2, kv_heads=1, ffn=8)
    monkey_patch.apply_monkey_patch(model=model, use_remove_padding=False, ulysses_sp_size=1, use_fused_kernels=False)


@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_half_precision_log_probs_are_upcast_at_the_boundary(base_actor, half):
    """verl's mixed precision hands bf16 log-probs (old_log_prob and advantages stay float32): the plug-in computes
    in float32 and says so in actor/logp_upcast; the gradient reaches the half-precision log-probs; rpg_loss called
    directly still refuses them."""
    config = actor_with(base_actor, batch_info=BATCH_INFOS["dp2"], clip="dual", beta=0.05)
    logp64, old64, adv64, mask = random_batch(seed=5)
    logp_half = logp64.detach().to(half).requires_grad_(True)
    old, adv = old64.float(), adv64.float()
    loss, grad, metrics = verl_loss_and_grad("rpg_urkl_reinforce", logp_half, old, adv, mask, "token-mean", config)
    assert loss.dtype == torch.float32 and grad.dtype == half
    logp32 = logp_half.detach().float().requires_grad_(True)  # the same values, upcast by hand
    ref_loss, ref_grad, ref_metrics = verl_loss_and_grad(
        "rpg_urkl_reinforce", logp32, old, adv, mask, "token-mean", config
    )
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad.to(half))  # backward through the cast rounds to half once
    assert grad.abs().sum() > 0
    assert metrics["actor/logp_upcast"].item() == 1.0 and "actor/logp_upcast" not in ref_metrics
    assert set(metrics) - {"actor/logp_upcast"} == set(ref_metrics)
    with pytest.raises(ValueError, match=f"logp has dtype {half}"):
        rpg_loss(
            logp_half, old.to(half), adv.to(half), mask, divergence="urkl", style="reinforce", beta=0.05, clip=None
        )


def test_refuses_verl_kl_loss_on_top():
    actor = compose_actor(
        RPG_TARGET,
        "actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_reinforce",
        "+actor_rollout_ref.actor.policy_loss.beta=1e-4",
        "+actor_rollout_ref.actor.policy_loss.clip=dual",
        "actor_rollout_ref.actor.use_kl_loss=True",
    )
    logp, old, adv, mask = random_batch(seed=8)
    with pytest.raises(ValueError, match="use_kl_loss=False"):
        verl_loss_and_grad("rpg_urkl_reinforce", logp, old, adv, mask, "token-mean", actor)


def test_refuses_plain_policy_loss_config():
    actor = compose_actor("actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_reinforce")
    logp, old, adv, mask = random_batch(seed=9)
    with pytest.raises(ValueError, match="RPGPolicyLossConfig"):
        verl_loss_and_grad("rpg_urkl_reinforce", logp, old, adv, mask, "token-mean", actor)


PL = "+actor_rollout_ref.actor.policy_loss."  # adds an RPGPolicyLossConfig field


@pytest.mark.parametrize(
    "overrides, match",
    [
        ([PL + "clip=dual"], "needs beta and clip"),
        ([PL + "beta=1e-4"], "needs beta and clip"),
        ([PL + "beta=-1", PL + "clip=dual"], "beta"),
        ([PL + "beta=0.1", PL + "clip=ppo"], "clip"),
        ([PL + "beta=0.1", PL + "clip=null", PL + "level=seq"], "level"),
        ([PL + "betta=0.1"], "betta"),  # a misspelt key
        ([PL + "beta=0.1", PL + "clip=dual", PL + "kl_in_clip=off"], "kl_in_clip must be true or false"),
    ],
)
def test_bad_rpg_options_fail_when_verl_builds_the_config(overrides, match):
    with pytest.raises(InstantiationException, match=match):
        compose_actor(RPG_TARGET, "actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_reinforce", *overrides)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            [PL + "beta=-1", PL + "clip=dual"],
            "actor_rollout_ref.actor.policy_loss.beta with loss_mode rpg_urkl_reinforce: "
            "beta must be finite and >= 0, got -1",
        ),
        (
            [PL + "beta=1e-4", PL + "clip=dual", PL + "betta=1"],
            "actor_rollout_ref.actor.policy_loss.betta is not a setting of RPGPolicyLossConfig (RPG's: beta, clip, ",
        ),
        ([PL + "clip=dual"], "RPGPolicyLossConfig needs beta and clip: add +actor_rollout_ref.actor.policy_loss.beta"),
    ],
)
def test_verls_driver_check_names_a_bad_rpg_option_in_one_line(overrides, message):
    """verl's `validate_config` (its driver's check before Ray starts) printed Hydra's wrapping: "Error in call to
    target 'rpgrl.integrations.verl.RPGPolicyLossConfig':", the refusal's repr and a "full_key:" line."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils import config as verl_config

    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        cfg = compose("ppo_trainer", overrides=["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", RPG_TARGET,
                                                "actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_reinforce",
                                                *overrides])  # fmt: skip
    with pytest.raises(InstantiationException) as info:
        verl_config.validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_verls_driver_prints_a_bad_rpg_option_in_one_line():
    """`python -m verl.trainer.main_ppo ...` as a user runs it: Hydra prints the failed job's overrides, then the
    error; the error is one line (it was three). Nothing starts: the driver checks its config before Ray."""
    args = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", RPG_TARGET, PL + "beta=-1", PL + "clip=dual",
            "actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_reinforce"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}  # Hydra's default: no traceback
    done = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *args], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("Error executing job with overrides"))
    assert done.returncode == 1 and lines[start + 1 :] == [  # verl's driver exits 1 on any error
        "actor_rollout_ref.actor.policy_loss.beta with loss_mode rpg_urkl_reinforce: beta must be finite and >= 0, "
        "got -1",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    ], done.stderr[-3000:]


@pytest.mark.parametrize(
    "mode, overrides, match",
    [
        ("rpg_urkl_differentiable", [PL + "beta=1e-4", PL + "clip=truncate"], "clip='truncate'.*needs style"),
        ("rpg_urkl_reinforce", [PL + "beta=1e-4", PL + "clip=dual", PL + "kl_value_clamp=10"], "kl_value_clamp"),
        # options the mode's loss does not read (were accepted: the gradient is the default's; `rpgrl train`
        # refuses them)
        ("rpg_urkl_reinforce", [PL + "beta=1e-4", PL + "clip=dual", PL + "kl_in_clip=false"], "kl_in_clip applies"),
        ("rpg_urkl_reinforce", [PL + "beta=1e-4", PL + "clip=dual", PL + "analogue=paper"], "analogue applies"),
        ("rpg_urkl_differentiable", [PL + "beta=1e-4", PL + "clip=null", PL + "branch=raw"], "branch applies"),
        # the analogue with the KL outside the clip: the message named the mode and the clip only
        (
            "rpg_urkl_differentiable",
            [PL + "beta=1e-4", PL + "clip=dual", PL + "kl_in_clip=false", PL + "analogue=paper"],
            "analogue applies to .*kl_in_clip=True, not to .*kl_in_clip=False",
        ),
        # a non-RPG mode would run verl's own loss without beta and clip
        ("vanilla", [PL + "beta=1e-4", PL + "clip=dual"], "read by the rpg_\\* loss modes only"),
    ],
)
def test_option_combinations_fail_when_verl_builds_the_config(mode, overrides, match):
    """Rules tying two options together (the mode's style and clip or kl_value_clamp) fail in the driver, where
    verl builds the actor config, not at the first update after Ray, the model and a rollout."""
    with pytest.raises(InstantiationException, match=match):
        compose_actor(RPG_TARGET, f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}", *overrides)
    compose_actor(RPG_TARGET, "actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_reinforce", *overrides[:2])


def test_bad_clip_ratios_are_named_as_verl_names_them():
    """verl's clip settings live in the actor config: a bad one was reported under rpgrl's names (c, eps_low)."""
    logp, old, adv, mask = random_batch(seed=10)
    for override, key in (("clip_ratio_c=0.9", "clip_ratio_c"), ("clip_ratio_low=1.5", "clip_ratio_low")):
        actor = compose_actor(RPG_TARGET, "actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_reinforce",
                              PL + "beta=1e-4", PL + "clip=dual", f"actor_rollout_ref.actor.{override}")  # fmt: skip
        with pytest.raises(ValueError, match=f"actor_rollout_ref.actor.{key}"):
            verl_loss_and_grad("rpg_urkl_reinforce", logp, old, adv, mask, "token-mean", actor)


def test_clip_none_as_hydra_gives_it():
    """`+...clip=None` reaches the config as the string 'None' (only `null` is None to Hydra): it was refused."""
    for word in ("None", "null"):
        actor = compose_actor(RPG_TARGET, "actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_differentiable",
                              PL + "beta=1e-4", PL + f"clip={word}")  # fmt: skip
        assert actor.policy_loss.clip is None


@pytest.mark.parametrize("word", ["None", "null"])
def test_optional_numbers_none_as_hydra_gives_it(word):
    """`+...max_log_w=None` and `+...kl_value_clamp=None` reach the config as the string 'None', as `clip=None` does:
    they were refused ("must be a real number, got 'None'") although the options document none as off."""
    actor = compose_actor(RPG_TARGET, "actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_differentiable",
                          PL + "beta=1e-4", PL + "clip=dual", PL + "kl_in_clip=False", PL + f"kl_value_clamp={word}",
                          PL + f"max_log_w={word}")  # fmt: skip
    assert actor.policy_loss.kl_value_clamp is None and actor.policy_loss.max_log_w is None
    assert actor.policy_loss.rpg_options()["kl_value_clamp"] is None


def test_rpg_advantage_equals_verls_unscaled_grpo():
    """The `rpg` estimator is the group mean baseline: verl's grpo with norm_adv_by_std_in_grpo=False (an
    independent implementation), and a hand-worked case."""
    g = torch.Generator().manual_seed(0)
    B, T = 12, 5
    mask = (torch.arange(T)[None, :] < torch.randint(1, T + 1, (B,), generator=g)[:, None]).float()
    rewards = torch.zeros(B, T)
    rewards[torch.arange(B), mask.sum(-1).long() - 1] = torch.randn(B, generator=g)  # reward on the last token
    index = np.array([f"uid{i % 4}" for i in range(B)][:-1] + ["alone"], dtype=object)  # 3 groups of 3, 1 of 2, 1 of 1
    adv, returns = core_algos.get_adv_estimator_fn("rpg")(token_level_rewards=rewards, response_mask=mask, index=index)
    ref, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(adv, ref)
    torch.testing.assert_close(returns, adv)

    # by hand: group {1, 2, 6} -> mean 3; a group of one gets mean 0
    r = torch.tensor([[1.0], [2.0], [6.0], [5.0]])
    adv, _ = core_algos.get_adv_estimator_fn("rpg")(r, torch.ones(4, 1), np.array(["a", "a", "a", "b"], dtype=object))
    torch.testing.assert_close(adv[:, 0], torch.tensor([-2.0, -1.0, 3.0, 5.0]))


def _run(code: str, env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)


CHECK_REGISTERED = """
    import sys
    import verl  # nothing else: verl loads the plug-in itself
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY
    assert "rpgrl.integrations.verl" in sys.modules
    missing = [m for m in {modes!r} if m not in POLICY_LOSS_REGISTRY]
    assert not missing and "rpg" in ADV_ESTIMATOR_REGISTRY, missing
    print("ok")
"""


def test_import_verl_alone_loads_the_plugin_through_its_entry_point(tmp_path):
    """What a Ray worker does: a fresh interpreter that only runs `import verl`. The `verl.plugins` entry point is
    declared by a throw-away distribution on PYTHONPATH, so this checks verl's loading mechanism and that the
    plug-in imports cleanly inside `verl/__init__` (no circular import), independently of how rpgrl is installed."""
    dist = tmp_path / "rpgrl_verl_probe-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rpgrl-verl-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[verl.plugins]\nrpgrl = rpgrl.integrations.verl\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    code = CHECK_REGISTERED.format(modes=EXPECTED_MODES)
    done = _run(code, {"PYTHONPATH": path, "VERL_USE_EXTERNAL_PLUGINS": "auto", "VERL_USE_EXTERNAL_MODULES": ""})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_installed_rpgrl_declares_the_entry_point():
    """pyproject.toml declares `[project.entry-points."verl.plugins"] rpgrl = "rpgrl.integrations.verl"` and the
    installed metadata carries it (a stale editable install would not)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("entry-points", {})
    if declared.get("verl.plugins", {}).get("rpgrl") != "rpgrl.integrations.verl":
        pytest.skip('pyproject.toml does not declare [project.entry-points."verl.plugins"] rpgrl yet')
    eps = {ep.name: ep.value for ep in metadata.entry_points(group="verl.plugins")}
    assert eps.get("rpgrl") == "rpgrl.integrations.verl", "reinstall rpgrl (pip install -e .) to refresh metadata"
