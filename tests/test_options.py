"""RPGOptions: the one declaration of RPG's loss options, shared by rpg_loss, the trainer config and the adapters."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from rpgrl.config import LOSS_KEYS, Config, LossConfig, apply_overrides, check
from rpgrl.errors import UsageError
from rpgrl.fields import field_docs
from rpgrl.objectives.rpg import rpg_loss
from rpgrl.options import OptionError, RPGOptions
from rpgrl.trainer.setup import loss_options

FIELDS = [f.name for f in dataclasses.fields(RPGOptions)]


def test_the_options_are_rpg_loss_keywords():
    params = inspect.signature(rpg_loss).parameters
    assert set(FIELDS) <= set(params)
    tensors = {"logp", "old_logp", "advantages", "mask", "anchor_logp", "normalizer"}
    assert set(params) - set(FIELDS) == tensors  # no option is declared in rpg_loss alone
    docs = field_docs(RPGOptions)
    assert set(docs) == set(FIELDS) and all(docs.values())


def test_default_loss_config_is_the_default_options():
    assert LossConfig().rpg_options() == RPGOptions()
    assert loss_options(LossConfig()) == RPGOptions().kwargs()


def test_renamed_config_keys_reach_the_loss():
    lc = LossConfig(style="differentiable", clip=None, clip_branch="raw", kl_clamp=3.0)
    o = lc.rpg_options()
    assert (o.branch, o.kl_value_clamp) == ("raw", 3.0)
    assert set(LOSS_KEYS.values()) <= {f.name for f in dataclasses.fields(LossConfig)}


def test_config_fields_take_default_and_doc_from_the_options():
    docs, option_docs = field_docs(LossConfig), field_docs(RPGOptions)
    for name in ("divergence", "style", "level", "agg", "kl_in_clip", "analogue", "max_log_w"):
        assert getattr(LossConfig(), name) == getattr(RPGOptions(), name)
        assert docs[name] == option_docs[name]
    assert docs["clip_branch"] == option_docs["branch"]


BAD = [
    (dict(divergence="kl"), "divergence", "unknown divergence 'kl'"),
    (dict(beta=-1.0), "beta", "beta must be finite and >= 0"),
    (dict(beta=True), "beta", "beta must be a real number"),
    (dict(eps_low=1.5), "eps_low", r"eps_low must be in \[0, 1\]"),
    (dict(eps_high=-0.1), "eps_high", "eps_high must be >= 0"),
    (dict(c=1.0), "c", "c must be > 1"),
    (dict(kl_value_clamp=0.0), "kl_value_clamp", "kl_value_clamp must be none or > 0"),
    (dict(max_log_w=float("inf")), "max_log_w", "max_log_w must be none or finite"),
    (dict(clip="truncate", style="differentiable"), "clip", "needs style='reinforce'"),
    (dict(kl_value_clamp=10.0), "kl_value_clamp", "clamps a separate KL term"),  # reinforce has no separate KL
]
# values only the Python API can give (a probe's): "false" acted as True (the KL inside the clip); ints past int64
# failed inside torch
BAD_API = [
    (dict(kl_in_clip="false"), "kl_in_clip", "kl_in_clip must be true or false"),
    (dict(beta=10**19), "beta", "beta must be a float or an int below 2\\*\\*63"),
    (dict(c=10**400), "c", "c must be a float or an int below 2\\*\\*63, got an int of 401 digits"),
    (dict(max_log_w="5"), "max_log_w", "max_log_w must be a real number"),
]


@pytest.mark.parametrize("changes, option, match", BAD + BAD_API)
def test_check_names_the_option(changes, option, match):
    with pytest.raises(OptionError, match=match) as info:
        RPGOptions(**changes).check()
    assert info.value.option == option and "\n" not in str(info.value)


@pytest.mark.parametrize("changes, option, match", BAD[:8] + BAD_API)
def test_check_values_alone_refuses_each_bad_value(changes, option, match):
    with pytest.raises(OptionError, match=match):
        RPGOptions(**changes).check_values()


def test_none_word_is_none():
    from rpgrl.options import none_word

    assert [none_word(v) for v in ("None", "none", " null ", "dual", None, 0)] == [None, None, None, "dual", None, 0]


def test_cross_option_rules_are_not_value_rules():
    RPGOptions(clip="truncate", style="differentiable").check_values()
    RPGOptions(kl_value_clamp=10.0).check_values()


@pytest.mark.parametrize("changes, option, match", BAD[3:])
def test_rpg_loss_and_train_config_refuse_the_same(changes, option, match):
    x = torch.zeros(2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=match):
        rpg_loss(x, x, torch.zeros(2, dtype=torch.float64), torch.ones(2, 3), **RPGOptions(**changes).kwargs())
    key = LOSS_KEYS.get(option, option)
    overrides = [(f"loss.{LOSS_KEYS.get(k, k)}", str(v)) for k, v in changes.items()]
    with pytest.raises(UsageError, match=f"loss.{key}"):
        check(apply_overrides(Config(), overrides))


def test_numpy_and_fraction_numbers_are_accepted_as_their_float():
    """A probe's: numpy float64 options passed and numpy float32 ones were refused as not real numbers. Any real
    number is taken, as the Python float of its value: the loss and its gradient equal those of the floats."""
    import fractions

    import numpy as np

    numbers = dict(beta=np.float32(0.25), eps_low=fractions.Fraction(1, 5), eps_high=np.float64(0.28), c=np.int64(3),
                   max_log_w=np.float16(4.0))  # fmt: skip
    checked = RPGOptions(**numbers).check()
    assert all(type(getattr(checked, k)) is (int if k == "c" else float) for k in numbers)
    assert checked.beta == float(np.float32(0.25)) and checked.eps_low == 0.2 and checked.c == 3
    g = torch.Generator().manual_seed(0)
    old = torch.randn(3, 4, generator=g, dtype=torch.float64)
    adv, mask = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64), torch.ones(3, 4)
    grads = []
    for opts in (numbers, {k: float(v) for k, v in numbers.items()}):
        logp = old + 0.3 * torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        logp.requires_grad_(True)
        out = rpg_loss(logp, old, adv, mask, divergence="fkl", style="differentiable", clip="dual", **opts)
        out.loss.backward()
        grads.append((out.loss.detach(), logp.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    with pytest.raises(OptionError, match="beta must be a real number"):
        RPGOptions(beta=np.bool_(True)).check()


def test_one_value_of_numpy_or_torch_is_taken_as_python_s():
    """A probe's: a numpy bool for `kl_in_clip`, and a 0-dim tensor or array for a number (a beta computed as a
    tensor, a clamp read from an array), were refused as not a bool / not a real number. Each is taken as its
    `.item()` (exact: the loss and gradient equal the Python value's); a tensor that requires grad or is on the meta
    device is refused in one line: options are constants."""
    import numpy as np

    given = dict(divergence="fkl", style="differentiable", clip="dual", beta=torch.tensor(0.25, dtype=torch.float32),
                 eps_low=np.array(0.2, dtype=np.float32),
                 eps_high=torch.tensor(0.28, dtype=torch.float64), c=torch.tensor(3), kl_in_clip=np.bool_(False),
                 kl_value_clamp=np.float32(7.5))  # fmt: skip
    checked = RPGOptions(**given).check()
    assert checked.kl_in_clip is False and type(checked.c) is int
    assert checked.beta == 0.25 and checked.eps_low == float(np.float32(0.2)) and checked.eps_high == 0.28
    assert RPGOptions(kl_in_clip=torch.tensor(True)).check().kl_in_clip is True
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], dtype=torch.float64, requires_grad=True)
    old, adv, mask = logp.detach() - 0.3, torch.tensor([1.0, -1.0], dtype=torch.float64), torch.ones(2, 2)
    out = [rpg_loss(logp, old, adv, mask, **opts).loss for opts in (given, checked.kwargs())]
    assert torch.equal(out[0], out[1])
    assert torch.equal(*(torch.autograd.grad(x, logp)[0] for x in out))
    for bad, match in ((torch.tensor(0.1, requires_grad=True), "requires grad"), (torch.zeros((), device="meta"),
                       "meta device"), (torch.tensor([0.1]), "a real number")):  # fmt: skip
        with pytest.raises(OptionError, match=f"beta must be .*{match}") as info:
            rpg_loss(logp, old, adv, mask, **{**given, "beta": bad})
        assert "\n" not in str(info.value)
    with pytest.raises(OptionError, match="kl_in_clip must be true or false"):
        RPGOptions(kl_in_clip=np.int64(1)).check()


def test_unused_lists_exactly_the_options_rpg_loss_ignores_and_used_resets_them():
    """`unused` names an option only where the loss is the same whatever its value (checked here by computing it), and
    the KL clamp only without a separate KL term; `used` sets those to their defaults and leaves the rest."""
    logp = torch.tensor([[-1.0, -2.5, -0.2], [-0.7, -0.1, -3.0]], dtype=torch.float64)
    old = logp - torch.tensor([[0.4, -0.6, 0.1], [-0.3, 0.9, 0.2]], dtype=torch.float64)
    adv, mask = torch.tensor([0.8, -1.1], dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)

    def loss(o: RPGOptions) -> float:
        return float(rpg_loss(logp, old, adv, mask, **dataclasses.replace(o, beta=0.3).kwargs()).loss)

    for style, clip in (("reinforce", "dual"), ("reinforce", None), ("differentiable", None)):
        o = RPGOptions(style=style, clip=clip, branch="raw", kl_in_clip=False, analogue="paper")
        assert set(o.unused()) >= {"kl_in_clip", "analogue"} and (clip is None) == ("branch" in o.unused())
        flipped = dataclasses.replace(o, branch="effective", kl_in_clip=True, analogue="exact")
        assert loss(o) == loss(flipped)
        assert o.used() == dataclasses.replace(o, **{k: getattr(RPGOptions, k) for k in o.unused()})
    clamp = RPGOptions(style="differentiable", clip="dual", kl_value_clamp=10.0)  # KL inside the clip
    assert clamp.unused() == ["kl_value_clamp"] and clamp.used().kl_value_clamp is None
    with pytest.raises(OptionError, match="kl_value_clamp"):
        clamp.check()
    clamp.used().check()
    for separate in (dataclasses.replace(clamp, kl_in_clip=False), dataclasses.replace(clamp, clip=None)):
        assert "kl_value_clamp" not in separate.unused() and separate.used() == separate.check()


def test_the_clip_range_and_cap_are_unused_exactly_where_the_clip_does_not_read_them():
    """No clip reads neither the clip range nor c, 'truncate' reads the range but not c: `unused` names them there
    (set away from their defaults) and the loss and its gradient are the same whatever they are; where they are read,
    changing one changes the loss here (every unit's ratio is outside [0.8, 1.28] and one is above c = 2)."""
    logp = torch.tensor([[-1.0, -2.5, -0.2], [-0.7, -0.1, -3.0]], dtype=torch.float64)
    old = logp - torch.tensor([[0.4, -0.6, 0.3], [-0.3, 0.9, 0.5]], dtype=torch.float64)
    adv, mask = torch.tensor([0.8, -1.1], dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)

    def loss_and_grad(o: RPGOptions) -> tuple:
        x = logp.clone().requires_grad_(True)
        out = rpg_loss(x, old, adv, mask, **o.kwargs()).loss
        out.backward()
        return float(out.detach()), x.grad

    moved = {"eps_low": 0.1, "eps_high": 0.5, "c": 2.0}
    for style, clip, idle in (("reinforce", None, {"eps_low", "eps_high", "c"}), ("differentiable", None,
                              {"eps_low", "eps_high", "c"}), ("reinforce", "truncate", {"c"}),
                              ("reinforce", "dual", set()), ("differentiable", "dual", set())):  # fmt: skip
        base = RPGOptions(style=style, clip=clip, beta=0.3)
        assert not set(base.unused()) & set(moved)  # at their defaults: never named
        value, grad = loss_and_grad(base)
        for key, v in moved.items():
            o = dataclasses.replace(base, **{key: v})
            assert (key in o.unused()) == (key in idle), (style, clip, key)
            v2, g2 = loss_and_grad(o)
            same = v2 == value and torch.equal(g2, grad)
            assert same == (key in idle), (style, clip, key)
            if key in idle:
                assert o.used() == base and f"{key} applies to clip=" in o.applies(key)


def test_analogue_is_unused_with_the_kl_outside_the_clip():
    """kl_in_clip false puts the KL in a separate term: the analogue changes nothing (bit-identical loss and
    gradient, checked here), so a user who sets it is told (a review's)."""
    lp = torch.tensor([[-1.0, -2.5, -0.2]], dtype=torch.float64, requires_grad=True)
    old = lp.detach() - torch.tensor([[0.4, -0.6, 0.1]], dtype=torch.float64)
    adv, mask = torch.tensor([-0.7], dtype=torch.float64), torch.ones(1, 3, dtype=torch.float64)
    outs = []
    for analogue in ("exact", "paper"):
        o = RPGOptions(divergence="rkl", style="differentiable", kl_in_clip=False, analogue=analogue, beta=0.3)
        assert ("analogue" in o.unused()) == (analogue == "paper")
        loss = rpg_loss(lp, old, adv, mask, **o.kwargs()).loss
        outs.append((float(loss.detach()), torch.autograd.grad(loss, lp)[0]))
    assert outs[0][0] == outs[1][0] and torch.equal(outs[0][1], outs[1][1])
    assert "analogue" not in RPGOptions(style="differentiable", analogue="paper").unused()  # inside the clip: read
    with pytest.raises(UsageError, match=r"loss.analogue applies to .*loss.kl_in_clip true .*loss.kl_in_clip false"):
        check(apply_overrides(Config(), [("loss.style", "differentiable"), ("loss.kl_in_clip", "false"),
                                         ("loss.analogue", "paper")]))  # fmt: skip
