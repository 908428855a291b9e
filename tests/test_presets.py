"""Presets: the default runs as is; paper presets carry the paper's hyperparameters and need a model and data."""

import dataclasses
import math

import pytest
import torch

from rpgrl.config import apply_overrides, check
from rpgrl.errors import UsageError
from rpgrl.presets import DIVERGENCES, PRESETS, get_preset, preset_table

PAPER = [name for name in PRESETS if not name.startswith("default")]


def test_every_paper_table_row_has_a_preset():
    rows = ["grpo", "dapo", "reinforce_pp", "reinforce_pp_baseline"]
    rows += [f"rpg-{d}" for d in DIVERGENCES] + [f"rpg-reinforce-{d}" for d in DIVERGENCES]
    assert set(rows) <= set(PRESETS)
    assert {"grpo-released", "rpg-reinforce-released"} | {f"rpg-{d}-released" for d in DIVERGENCES} <= set(PRESETS)


def test_default_is_valid_and_the_cpu_demo():
    cfg = check(get_preset("default"))
    assert cfg.model.path == "tiny" and cfg.data.train == "synthetic"
    assert (cfg.loss.name, cfg.loss.divergence, cfg.loss.style, cfg.loss.clip) == ("rpg", "urkl", "reinforce", "dual")
    assert cfg.ref.mode == "behaviour"
    assert cfg.mini_batches_per_epoch > 1  # off-policy: w moves away from 1 within each rollout batch
    on = check(get_preset("default-on-policy"))
    assert on.mini_batches_per_epoch == 1 and on.train.epochs == 1
    assert dataclasses.replace(on, train=cfg.train, optim=cfg.optim) == cfg  # differs in the update schedule only


@pytest.mark.parametrize("name", PAPER)
def test_paper_presets_need_model_and_data(name):
    cfg = get_preset(name)
    with pytest.raises(UsageError, match="model.path is not set") as e:
        check(cfg)
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="data.train is not set"):
        check(apply_overrides(cfg, [("model.path", "/m")]))
    check(apply_overrides(cfg, [("model.path", "/m"), ("data.train", "/d.parquet")]))


@pytest.mark.parametrize("name", PAPER)
def test_paper_hyperparameters(name):
    # spec 7.1-7.3: shared settings
    cfg = get_preset(name)
    assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size) == (512, 16)
    assert (cfg.rollout.max_new_tokens, cfg.data.max_prompt_length, cfg.data.truncation) == (2048, 2048, "left")
    assert (cfg.rollout.temperature, cfg.rollout.top_p) == (1.0, 1.0)
    assert (cfg.optim.weight_decay, cfg.optim.warmup_steps, cfg.optim.grad_clip) == (0.1, 10, 1.0)
    assert cfg.optim.lr == (5e-7 if name == "rpg-reinforce-released" else 1e-6)
    assert (cfg.train.max_steps, cfg.train.mini_batch_prompts, cfg.train.epochs) == (400, 32, 1)
    assert cfg.loss.agg == "token-mean" and cfg.loss.c == 10.0
    assert cfg.data.reward == "math_strict" and cfg.sft.max_steps == 0
    grpo = name.startswith("grpo")
    assert (cfg.loss.eps_low, cfg.loss.eps_high) == ((0.2, 0.2) if grpo else (0.2, 0.28))
    assert cfg.rollout.group_filter == ("off" if grpo else "fill")
    assert cfg.rollout.overlong_buffer == (0 if grpo else 512)
    assert cfg.rollout.prompts_per_gen_batch == (512 if grpo else 1536)
    assert cfg.ref.mode == ("fixed" if grpo else "behaviour")


def test_family_specifics():
    assert get_preset("grpo").loss.beta == 1e-4 and get_preset("grpo-released").loss.beta == 1e-3  # spec 11.7
    assert get_preset("grpo").loss.kl == "k3" and get_preset("grpo").loss.advantage == "grpo"
    assert get_preset("grpo").loss.kl_clamp is None and get_preset("grpo-released").loss.kl_clamp == 10.0  # verl
    assert get_preset("dapo").loss.kl is None and get_preset("dapo").loss.advantage == "grpo"
    assert get_preset("reinforce_pp").loss.kl == "k1" and get_preset("reinforce_pp").loss.advantage == "reinforce_pp"
    assert get_preset("reinforce_pp_baseline").loss.advantage == "reinforce_pp_baseline"
    for d in DIVERGENCES:
        paper, released = get_preset(f"rpg-{d}").loss, get_preset(f"rpg-{d}-released").loss
        assert (paper.divergence, paper.style, paper.kl_in_clip, paper.beta) == (d, "differentiable", True, 1e-4)
        assert (released.kl_in_clip, released.clip_branch) == (False, "raw")
        assert released.kl_clamp == (None if d == "fkl" else 10.0)  # spec 2.2: the code never clamps fkl
        rf = get_preset(f"rpg-reinforce-{d}").loss
        assert (rf.divergence, rf.style, rf.clip, rf.clip_branch) == (d, "reinforce", "dual", "effective")
    rel = get_preset("rpg-reinforce-released")  # spec 4.3 iii: PPO dual clip on R - mean, no KL
    assert (rel.loss.name, rel.loss.advantage, rel.loss.kl, rel.loss.beta) == ("ppo", "rpg", None, 0.0)


def test_presets_differ_only_where_documented():
    # the four rpg-reinforce presets differ only in the divergence
    base = dataclasses.replace(get_preset("rpg-reinforce-fkl").loss, divergence="urkl")
    assert base == get_preset("rpg-reinforce-urkl").loss


def test_unknown_preset_lists_names():
    with pytest.raises(UsageError, match="unknown preset 'grpo2'; valid: default, default-on-policy, grpo"):
        get_preset("grpo2")
    assert "rpg-reinforce-urkl" in preset_table()


def test_grpo_released_clamps_k3_at_ten():
    """spec 5.2: verl's low_var_kl clamps k3(pi_ref/pi_theta) to [-10, 10]; the preset's options reach the loss."""
    from rpgrl.objectives import get_loss
    from rpgrl.trainer.loop import loss_options

    lc = get_preset("grpo-released").loss
    opts = loss_options(lc)
    assert (opts["kl"], opts["kl_clamp"], opts["beta"]) == ("k3", 10.0, 1e-3)
    logp = torch.tensor([[-14.0, -0.5]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-0.1, -0.6]], dtype=torch.float64)  # token 0: k3 = e^13.9 - 13.9 - 1 >> 10
    mask, adv = torch.ones(1, 2), torch.zeros(1, dtype=torch.float64)
    out = get_loss(lc.name)(logp, logp.detach(), adv, mask, ref_logp=ref, **opts)
    k3 = math.exp(-0.1) - (-0.1) - 1  # k3(y) = y - 1 - log y, log y = ref - logp = -0.1
    assert math.isclose(out.loss.item(), 1e-3 * (10.0 + k3) / 2, rel_tol=1e-12)
    (g,) = torch.autograd.grad(out.loss, logp)
    assert g[0, 0] == 0 and g[0, 1] != 0


def test_grpo_aggregation_token_mean_or_the_papers_per_response_mean():
    """spec 11 item 14: the preset reduces by token-mean (as the authors' run); --loss.agg seq-mean-token-mean gives
    the paper's formula (1/G) sum_i (1/|o_i|) sum_t l_it."""
    from rpgrl.objectives import get_loss
    from rpgrl.trainer.loop import loss_options

    paper = apply_overrides(get_preset("grpo"), [("loss.agg", "seq-mean-token-mean")])
    check(apply_overrides(paper, [("model.path", "/m"), ("data.train", "/d.parquet")]))
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=g, dtype=torch.float64)
    old = logp + 0.3 * torch.randn(3, 5, generator=g, dtype=torch.float64)
    ref = logp + 0.3 * torch.randn(3, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    losses = {}
    for name, cfg in (("token", get_preset("grpo")), ("paper", paper)):
        out = get_loss(cfg.loss.name)(logp, old, adv, mask, ref_logp=ref, **loss_options(cfg.loss))
        losses[name] = out.loss.item()
        per_token = out.per_token
    assert get_preset("grpo").loss.agg == "token-mean"
    assert math.isclose(losses["token"], (per_token * mask).sum().item() / 8, rel_tol=1e-12)
    per_response = (per_token * mask).sum(-1) / mask.sum(-1)
    assert math.isclose(losses["paper"], per_response.mean().item(), rel_tol=1e-12)
