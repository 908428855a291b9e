"""Loss and advantage registries (shared signature, loud names) and the import isolation of the pure-math layer."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import rpgrl
from rpgrl.advantages import ADVANTAGES, get_advantage
from rpgrl.objectives import LOSSES, LossOutput, get_loss

F64 = torch.float64
BASELINE_LOSSES = ("dapo", "grpo", "ppo", "reinforce_pp")


def small_batch():
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(6, 4, generator=g, dtype=F64) * 2 - 0.1
    logp = (old + 0.3 * torch.randn(6, 4, generator=g, dtype=F64)).requires_grad_(True)
    mask = torch.ones(6, 4, dtype=F64)
    mask[1, 2:] = 0
    rewards = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, -1.0], dtype=F64)
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    return logp, old, rewards, group, mask


def test_registry_names_are_strings():
    """A non-string name broke every later lookup's error message (sorting ints with strings); an unhashable name
    was a TypeError (a probe's)."""
    with pytest.raises(ValueError, match="names are non-empty strings, got 5"):
        rpgrl.register_advantage(5)
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        get_advantage(["grpo"])
    with pytest.raises(ValueError, match="valid: drgrpo, grpo"):
        get_advantage("nope")
    assert ["grpo"] not in ADVANTAGES


def test_baseline_families_are_registered():
    assert set(BASELINE_LOSSES) <= set(LOSSES.names())


@pytest.mark.parametrize("name", BASELINE_LOSSES)
def test_every_baseline_loss_has_the_shared_signature_and_metric_contract(name):
    logp, old, rewards, group, mask = small_batch()
    adv = get_advantage("grpo")(rewards, group, mask)
    opts = {"ref_logp": old - 0.1} if name == "grpo" else {}
    out = get_loss(name)(logp, old, adv, mask, **opts)
    assert isinstance(out, LossOutput)
    assert out.loss.dim() == 0 and out.loss.requires_grad
    assert out.per_token.shape == logp.shape
    expected = {"loss/policy", "loss/kl", "kl/ppo_kl", "clip/frac_low", "clip/frac_high", "clip/frac_dual"}
    assert expected | {"log_w/max", "log_w/min", "log_w/abs_mean"} <= set(out.metrics)
    for key, value in out.metrics.items():
        assert isinstance(value, torch.Tensor) and value.dim() == 0 and not value.requires_grad, key
        assert key.split("/")[0] in {"loss", "kl", "clip", "log_w"}, key
    (g,) = torch.autograd.grad(out.loss, logp)
    assert torch.isfinite(g).all() and g[1, 2:].eq(0).all()


@pytest.mark.parametrize("name", ["rpg", "drgrpo", "grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"])
def test_every_advantage_estimator_has_the_shared_signature(name):
    _, _, rewards, group, mask = small_batch()
    adv = ADVANTAGES.get(name)(rewards, group, mask)
    assert adv.shape in (rewards.shape, mask.shape) and adv.dtype == F64


def test_unknown_and_duplicate_names_are_loud():
    with pytest.raises(ValueError, match="unknown loss 'dapoo'; valid: .*dapo, grpo, ppo, reinforce_pp"):
        get_loss("dapoo")
    with pytest.raises(ValueError, match="unknown advantage estimator 'GRPO'"):
        get_advantage("GRPO")
    before = LOSSES.get("dapo")
    with pytest.raises(ValueError, match="loss 'dapo' is already registered"):
        LOSSES.register("dapo")(lambda *a, **k: None)
    assert LOSSES.get("dapo") is before
    with pytest.raises(ValueError, match="advantage estimator 'grpo' is already registered"):
        ADVANTAGES.register("grpo")(lambda *a, **k: None)


def test_lazy_top_level_exports():
    assert rpgrl.ADVANTAGES is ADVANTAGES and rpgrl.get_advantage is get_advantage
    assert rpgrl.LOSSES is LOSSES and rpgrl.get_loss is get_loss


ISOLATION = textwrap.dedent(
    """
    import sys

    BLOCKED = {"transformers", "verl", "trl"}

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Blocker())
    import rpgrl
    import rpgrl.advantages
    import rpgrl.objectives
    import rpgrl.shaping

    rpgrl.objectives.get_loss("grpo")
    rpgrl.get_advantage("grpo")
    heavy = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
    allowed = ("rpgrl.objectives", "rpgrl.registry", "rpgrl.advantages", "rpgrl.shaping", "rpgrl.errors",
               "rpgrl.options", "rpgrl.fields", "rpgrl.metrics")  # the last three: standard library only
    ours = sorted(m for m in sys.modules if m.startswith("rpgrl.") and not m.startswith(allowed))
    print("heavy:", heavy)
    print("other rpgrl modules:", ours)
    sys.exit(1 if heavy or ours else 0)
    """
)


def test_pure_math_layer_imports_without_transformers_verl_trl():
    """objectives / advantages / shaping import torch and nothing else of rpgrl but the standard-library-only option
    declarations (style.md, "Dependencies")."""
    proc = subprocess.run([sys.executable, "-c", ISOLATION], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
