"""No finite loss with an inf or NaN gradient, at the edges of the float range, and the helpers' input checks.

Each guard is tested on the case that broke it (checked independently here: the loss's value fits the dtype, its
gradient does not) and on sweeps across the overflow boundary, where every call must either raise `LossOverflow`
or give a finite gradient."""

from __future__ import annotations

import math

import pytest
import torch

from rpgrl.advantages import ADVANTAGES, whiten
from rpgrl.objectives import LossOverflow, aggregate, anchored_kl_term, grpo_kl_term, kl_penalty, ppo_loss, rpg_loss

F32_MAX = torch.finfo(torch.float32).max


def _one(x: float, dtype=torch.float32, grad: bool = False) -> torch.Tensor:
    return torch.tensor([[x]], dtype=dtype, requires_grad=grad)


def _finite_or_overflow(call) -> torch.Tensor | None:
    """The gradient of `call(logp)`'s loss w.r.t. logp, or None if it raised LossOverflow."""
    lp = _one(-1.0, grad=True)
    try:
        call(lp).loss.backward()
    except LossOverflow:
        return None
    return lp.grad


def test_rkl_gradient_weight_that_overflows_under_a_finite_loss_raises():
    """rkl, differentiable, unclipped: the unit loss u log u fits float32 at log u = 84.277, its gradient weight
    u (log u + 1) does not (float64 reference), so autograd's gradient was +inf under a finite loss."""
    log_u = 84.277
    assert math.exp(log_u) * log_u < F32_MAX < math.exp(log_u) * (log_u + 1)
    lp = _one(-1.0, grad=True)
    with pytest.raises(LossOverflow, match="rpg_loss overflowed.*its gradient"):
        rpg_loss(lp, _one(-1.0 - log_u), torch.tensor([0.0]), torch.ones(1, 1), divergence="rkl",
                 style="differentiable", beta=1.0)  # fmt: skip


def _grid(lo: float, hi: float, step: float, fine: float, edges: tuple[float, ...], width: float) -> list[float]:
    """Points from `lo` to `hi` every `step`, and every `fine` within `width` of each of the overflow `edges` (where
    a guard decides); the slow suite sweeps the whole range at the fine step."""
    coarse = torch.arange(lo, hi + step / 2, step, dtype=torch.float64).tolist()
    near = [e + k * fine for e in edges for k in range(-round(width / fine), round(width / fine) + 1)]
    return sorted({round(v, 9) for v in coarse + near if lo <= v <= hi})


RPG_EDGES = (-89.0, -84.0, 84.0, 89.0)  # float32's exp overflows at 88.72; u log u and its gradient weight near 84-89
RPG_SWEEP = _grid(-120.0, 120.0, 1.0, 0.25, RPG_EDGES, 3.0)
RPG_SWEEP_FULL = torch.linspace(-120.0, 120.0, 961).tolist()  # every 0.25


@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
@pytest.mark.parametrize("clip", [None, "dual"])
@pytest.mark.parametrize(
    "sweep", [RPG_SWEEP, pytest.param(RPG_SWEEP_FULL, marks=pytest.mark.slow)], ids=["edges", "full"]
)
def test_rpg_differentiable_never_gives_a_finite_loss_with_a_non_finite_gradient(divergence, clip, sweep):
    kw = dict(divergence=divergence, style="differentiable", beta=1.0, clip=clip, kl_in_clip=False)
    raised = 0
    for log_w in sweep:
        g = _finite_or_overflow(
            lambda lp, log_w=log_w: rpg_loss(lp, _one(-1.0 - log_w), torch.tensor([1.0]), torch.ones(1, 1), **kw)
        )
        raised += g is None
        assert g is None or bool(torch.isfinite(g).all()), (log_w, g)
    assert raised > 0 or (clip, divergence) == ("dual", "fkl")  # the sweep reaches the overflow (fkl's -log u: none)


def test_corrected_k3_whose_autograd_backward_overflowed_gets_its_exact_gradient():
    """w k3(pi_ref/pi_theta) at log w = 88.5, log(pi_ref/pi_theta) = 0.5: the value 4.05e37 and the gradient
    -w (log r) = -1.4e38 fit float32, but autograd reached them through w pi_ref/pi_theta = e^89 (inf), so the loss
    was refused. The gradient is now formed as -w x: the closed form, in float64, to float32's precision."""
    assert math.exp(88.5) * (math.exp(0.5) - 1.5) < F32_MAX and math.exp(88.5) * 0.5 < F32_MAX < math.exp(89.0)
    lp = _one(-1.0, grad=True)
    out = ppo_loss(lp, _one(-89.5), torch.tensor([0.0]), torch.ones(1, 1), kl="k3_corrected", beta=1.0,
                   ref_logp=_one(-0.5))  # fmt: skip
    out.loss.backward()
    assert math.isclose(out.loss.item(), math.exp(88.5) * (math.exp(0.5) - 1.5), rel_tol=1e-5)
    assert math.isclose(lp.grad.item(), -0.5 * math.exp(88.5), rel_tol=1e-5)


PPO_EDGES = (-710.0, -90.0, 0.0, 90.0, 710.0)  # exp overflows past 88.72 in float32 and 709.78 in float64 (the
# reference's x of 80-709.5 added to a small log w included)
PPO_SWEEP = _grid(-800.0, 800.0, 50.0, 10.0, PPO_EDGES, 30.0)
PPO_SWEEP_FULL = torch.linspace(-800.0, 800.0, 161, dtype=torch.float64).tolist()  # every 10


@pytest.mark.parametrize("kl", ["k1", "k3", "k3_corrected"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("beta, normalizer", [(1.0, None), (1.5, None), (1e-3, 2.0**-20), (4.0, 0.5)])
@pytest.mark.parametrize(
    "sweep", [PPO_SWEEP, pytest.param(PPO_SWEEP_FULL, marks=pytest.mark.slow)], ids=["edges", "full"]
)
def test_ppo_kl_terms_never_give_a_finite_loss_with_a_non_finite_gradient(kl, dtype, beta, normalizer, sweep):
    """beta 1.5: backward multiplies beta into k3(x) first, which overflowed at x = 88.5 in float32 although the loss
    and the gradient fit (the guard took beta as 1). Where the loss fits and its gradient does not (w = e^90, x =
    0.5 in float32: a term of 1.8e38, a gradient of 6.1e38), backward raises `LossOverflow`."""
    for log_w in sweep:
        for x in (-100.0, -0.5, 0.0, 0.5, 80.0, 88.5, 100.0, 700.0, 709.5):
            lp = _one(-1.0, dtype, grad=True)
            try:
                out = ppo_loss(lp, _one(-1.0 - log_w, dtype), torch.tensor([0.0], dtype=dtype), torch.ones(1, 1),
                               kl=kl, beta=beta, ref_logp=_one(-1.0 + x, dtype), normalizer=normalizer)  # fmt: skip
            except ValueError:
                continue
            try:
                out.loss.backward()
            except LossOverflow:
                continue
            assert bool(torch.isfinite(lp.grad).all()), (log_w, x, out.loss.item(), lp.grad)


def test_a_vanishing_normalizer_is_refused_and_a_count_per_process_is_not():
    """At 1e-39 a loss of 0 came with gradients of +-inf (1 / 1e-39 overflows float32). A count divided among
    processes (verl's and TRL's count / dp_size, below 1 for a batch with fewer tokens than processes) is valid."""
    lp = torch.zeros(1, 2, requires_grad=True)
    for fn in (ppo_loss, lambda *a, **k: rpg_loss(*a, divergence="rkl", style="reinforce", beta=0.0, **k)):
        with pytest.raises(ValueError, match="normalizer must be a finite count >= 2\\*\\*-20"):
            fn(lp, torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), normalizer=1e-39)
        out = fn(lp, torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), normalizer=torch.tensor(1.0) / 4)
        out.loss.backward()
        assert torch.equal(lp.grad, torch.tensor([[-4.0, 4.0]]))  # d/dlogp of -A w / (1/4) at w = 1
        lp.grad = None
    assert aggregate(torch.ones(2, 3), torch.ones(2, 3), normalizer=0.5) == 12.0


@pytest.mark.parametrize("bad", [{"eps_high": "a"}, {"eps_low": None}, {"beta": "x"}, {"eps_low": True}])
def test_ppo_option_types_are_named(bad):
    with pytest.raises(ValueError, match=f"{next(iter(bad))} must be a number"):
        ppo_loss(_one(-1.0), _one(-1.0), torch.tensor([0.0]), torch.ones(1, 1), **bad)


def test_ppo_takes_numpy_numbers_as_rpg_loss_does_and_a_bool_normalizer_is_refused():
    """numpy's scalars were refused by ppo_loss ("must be a number") and taken by rpg_loss; `normalizer=True` was
    taken as 1 where a bool tensor was refused (a review's)."""
    np = pytest.importorskip("numpy")
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -1.0]])
    plain = ppo_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), eps_low=0.2, eps_high=0.3, clip_c=3.0).loss
    as_np = ppo_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), eps_low=np.float32(0.2),
                     eps_high=np.float64(0.3), clip_c=np.int64(3)).loss  # fmt: skip
    assert float(plain.detach()) == float(as_np.detach())
    for fn in (lambda n: aggregate(torch.ones(1, 2), torch.ones(1, 2), normalizer=n),
               lambda n: rpg_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), divergence="urkl", style="reinforce",
                                  beta=0.0, normalizer=n)):  # fmt: skip
        with pytest.raises(ValueError, match="normalizer must be a real count, got True"):
            fn(True)


def test_every_numeric_option_takes_numpy_scalars_of_any_width_and_0_dim_tensors():
    """A probe's: numpy float32 clamps were refused by `kl_penalty` (float64 ones passed, a float subclass), as was
    an eps of the advantages or a numpy int length of the overlong penalty; 0-dim tensors were refused by every loss.
    Each is now taken as its Python value, so the result equals the float's."""
    np = pytest.importorskip("numpy")
    from rpgrl.advantages import get_advantage
    from rpgrl.objectives.kl import kl_penalty
    from rpgrl.shaping import overlong_penalty

    lp, ref = torch.tensor([[-1.0, -30.0]]), torch.tensor([[-1.5, -1.0]])
    for clamp in (np.float32(10.0), np.float16(10.0), np.array(10.0), torch.tensor(10.0)):
        assert torch.equal(kl_penalty(lp, ref, "k3", value_clamp=clamp, log_ratio_clamp=clamp),
                           kl_penalty(lp, ref, "k3", value_clamp=10.0, log_ratio_clamp=10.0))  # fmt: skip
    r, g, m = torch.tensor([0.0, 1.0, 1.0]), torch.tensor([0, 0, 0]), torch.ones(3, 2)
    for name in ("grpo", "reinforce_pp"):
        assert torch.equal(get_advantage(name)(r, g, m, eps=np.float32(1e-6)),
                           get_advantage(name)(r, g, m, eps=float(np.float32(1e-6))))  # fmt: skip
    n = torch.tensor([1, 9, 10])
    assert torch.equal(overlong_penalty(n, np.int64(10), np.int32(4), np.float32(0.5)), overlong_penalty(n, 10, 4, 0.5))
    old = torch.tensor([[-1.5, -1.0]])
    kw = dict(kl="k3", ref_logp=old, beta=torch.tensor(0.1), kl_clamp=np.float32(5.0), eps_low=np.array(0.2))
    out = ppo_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), **kw, normalizer=np.array(2.0))
    ref_out = ppo_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), kl="k3", ref_logp=old, beta=float(
        torch.tensor(0.1)), kl_clamp=5.0, eps_low=0.2, normalizer=2.0)  # fmt: skip
    assert torch.equal(out.loss, ref_out.loss)
    with pytest.raises(ValueError, match="value_clamp must be a constant number, got a tensor that requires grad"):
        kl_penalty(lp, ref, "k3", value_clamp=torch.tensor(1.0, requires_grad=True))


def test_numpy_dates_and_durations_are_no_numbers_and_a_fraction_normalizer_is_its_float():
    """`options.scalar` took any 0-dim numpy value's `.item()`: a datetime64 or timedelta64 in ns is a Python int
    there (NaT is None), so `normalizer=np.datetime64(4, "ns")` (refused before) counted 4 tokens, `beta` and the
    clamps took 4 and NaT turned a clamp off (a timedelta64 normalizer failed in numpy). Only numbers (bool, int,
    float, complex) and tensors are taken; a date or a duration is refused in one line, an object array named. A
    Fraction normalizer passed the check and then failed in torch (`Tensor / Fraction`): it is taken as its float."""
    import fractions

    np = pytest.importorskip("numpy")
    from rpgrl.options import OptionError, RPGOptions, scalar

    lp, ref, mask = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]]), torch.ones(1, 2)
    for t in (np.datetime64(4, "ns"), np.timedelta64(4, "ns"), np.datetime64("NaT"), np.array(4, dtype="m8[ns]")):
        with pytest.raises(OptionError, match="must be a real number, got a numpy (datetime|timedelta)64"):
            scalar(t)
        with pytest.raises(ValueError, match="normalizer must be a real number"):
            aggregate(torch.ones(1, 2), mask, normalizer=t)
        with pytest.raises(ValueError, match="value_clamp must be a real number"):
            kl_penalty(lp, ref, "k3", value_clamp=t)
        with pytest.raises(OptionError, match="beta must be a real number"):
            RPGOptions(beta=t).check()
    held = np.array(0.5, dtype=object)  # an object array stays itself, named as before
    assert scalar(held) is held
    with pytest.raises(ValueError, match="normalizer must be a number or a 0-dim tensor, got ndarray"):
        aggregate(torch.ones(1, 2), mask, normalizer=held)
    half = fractions.Fraction(1, 2)
    assert torch.equal(
        aggregate(torch.ones(1, 2), mask, normalizer=half), aggregate(torch.ones(1, 2), mask, normalizer=0.5)
    )
    lp.requires_grad_(True)
    out = [rpg_loss(lp, ref, torch.tensor([1.0]), mask, divergence="rkl", style="differentiable", beta=0.1,
                    normalizer=n).loss for n in (half, 0.5)]  # fmt: skip
    assert torch.equal(out[0], out[1])


def _option_calls() -> dict[str, object]:
    """(loss or helper, option) -> a call with that option set to its argument: every numeric option of every loss,
    of the KL penalty, the advantages and the normalizer."""
    from rpgrl.advantages import get_advantage
    from rpgrl.objectives import dapo_loss, grpo_loss, reinforce_pp_loss

    lp, old, adv, mask = torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.ones(2, 3)
    rpg = dict(divergence="urkl", style="differentiable", beta=0.1, clip=None)
    calls = {("rpg", k): (lambda v, k=k: rpg_loss(lp, old, adv, mask, **(rpg | {k: v})))
             for k in ("beta", "kl_value_clamp", "max_log_w", "normalizer")}  # fmt: skip
    calls |= {("rpg_dual", k): (lambda v, k=k: rpg_loss(lp, old, adv, mask, **(rpg | {"clip": "dual", k: v})))
              for k in ("eps_low", "eps_high", "c")}  # fmt: skip
    calls |= {("ppo", k): (lambda v, k=k: ppo_loss(lp, old, adv, mask, **({"kl": "k3", "beta": 0.1} | {k: v})))
              for k in ("eps_low", "eps_high", "clip_c", "beta", "kl_clamp", "normalizer")}  # fmt: skip
    calls[("grpo", "beta")] = lambda v: grpo_loss(lp, old, adv, mask, ref_logp=old, beta=v)
    calls[("dapo", "eps_high")] = lambda v: dapo_loss(lp, old, adv, mask, eps_high=v)
    calls[("reinforce_pp", "clip_c")] = lambda v: reinforce_pp_loss(lp, old, adv, mask, clip_c=v)
    calls |= {("kl_penalty", k): (lambda v, k=k: kl_penalty(lp, old, "k3", **{k: v}))
              for k in ("value_clamp", "log_ratio_clamp")}  # fmt: skip
    calls[("aggregate", "normalizer")] = lambda v: aggregate(lp, mask, normalizer=v)
    calls |= {(name, "eps"): (lambda v, name=name: get_advantage(name)(adv, torch.tensor([0, 0]), mask, eps=v))
              for name in ("grpo", "reinforce_pp", "reinforce_pp_baseline")}  # fmt: skip
    calls[("whiten", "eps")] = lambda v: whiten(lp, mask, eps=v)
    return calls


@pytest.mark.parametrize("key", list(_option_calls()), ids="-".join)
def test_a_number_past_float_s_range_is_a_one_line_error_naming_the_option(key):
    """A Python int past float's range (10**400, or 2**63 where torch takes ints as int64) or a Fraction past it
    (10**400 / 3) raised OverflowError ("int too large to convert to float", "integer division result too large for
    a float") from every ppo-family option, the KL penalty's clamps, the advantages' eps and whiten's, and rpg_loss's
    options and normalizer for a Fraction (its ints were refused in one line): each is a ValueError naming the
    option now, as RPGOptions words an int past 2**63."""
    import fractions

    call = _option_calls()[key]
    option = key[1]
    for value in (10**400, -(10**400), 2**63, fractions.Fraction(10**400, 3), fractions.Fraction(-(10**400), 3)):
        with pytest.raises(ValueError, match=f"^{option} must be ") as info:
            call(value)
        assert "\n" not in str(info.value)
        shown = "an int of" if isinstance(value, int) else "a Fraction past float's range"
        assert shown in str(info.value), str(info.value)


# --------------------------------------------------------------------------------------------- KL helper functions


@pytest.mark.parametrize("pad", [-math.inf, -1e4])
@pytest.mark.parametrize(
    "term",
    [
        lambda lp, ref, m: kl_penalty(lp, ref, "low_var_kl", value_clamp=10.0, mask=m),
        lambda lp, ref, m: kl_penalty(lp, ref, "k3", mask=m),
        lambda lp, ref, m: kl_penalty(lp, ref, "k2", mask=m),
        lambda lp, ref, m: grpo_kl_term(lp, ref, ref, corrected=True, mask=m),
        lambda lp, ref, m: anchored_kl_term(lp, ref, ref, direction="reverse", mask=m),
        lambda lp, ref, m: anchored_kl_term(lp, ref, ref, direction="forward", mask=m),
    ],
)
def test_kl_helpers_with_a_mask_keep_padding_out_of_value_and_gradient(term, pad):
    lp = torch.tensor([[-1.0, pad]], requires_grad=True)
    ref = torch.tensor([[-1.2, -1.0]])
    mask = torch.tensor([[1.0, 0.0]])
    out = term(lp, ref, mask)
    assert out[0, 1] == 0
    out.sum().backward()
    assert bool(torch.isfinite(lp.grad).all()) and lp.grad[0, 1] == 0
    # the valid position: the same value and gradient as without padding
    lp1 = torch.tensor([[-1.0]], requires_grad=True)
    one = term(lp1, ref[:, :1], None)
    one.sum().backward()
    assert torch.equal(out[:, :1].detach(), one.detach()) and torch.equal(lp.grad[:, :1], lp1.grad)


@pytest.mark.parametrize("bad", [math.nan, 0.5, 2.0])
def test_kl_helpers_refuse_a_mask_holding_other_values_than_0_and_1(bad):
    """A NaN or 0.5 in the mask counted as "keep", so padding (here NaN) leaked into the term; as in the losses and
    `aggregate`, a mask holds bool or 0/1 values."""
    lp, ref = torch.tensor([[-1.0, math.nan]]), torch.tensor([[-1.5, -1.0]])
    mask = torch.tensor([[1.0, bad]])
    for call in (
        lambda: kl_penalty(lp, ref, "k3", mask=mask),
        lambda: grpo_kl_term(lp, ref, corrected=False, mask=mask),
        lambda: anchored_kl_term(lp, ref, ref, direction="reverse", mask=mask),
    ):
        with pytest.raises(ValueError, match="mask must be bool or contain only 0 and 1"):
            call()


def test_corrected_kl_is_zero_where_k3_is_zero_even_if_w_overflows():
    """w = e^89 is inf in float32, k3(1) = 0: the term is 0 with gradient w (logp - ref) = 0 (was NaN)."""
    lp = torch.tensor([[-1.0]], requires_grad=True)
    out = grpo_kl_term(lp, lp.detach(), lp.detach() - 89.0, corrected=True)
    out.sum().backward()
    assert out.item() == 0 and lp.grad.item() == 0
    nonzero = grpo_kl_term(lp.detach(), lp.detach() - 0.5, lp.detach() - 1.0, corrected=True)
    assert nonzero.item() == pytest.approx(math.e * (math.exp(-0.5) - 0.5), rel=1e-6)  # w = e, k3 at log r = -0.5


@pytest.mark.parametrize("clamp", [-1.0, 0.0, math.nan, math.inf, "10", True])
@pytest.mark.parametrize("key", ["value_clamp", "log_ratio_clamp"])
def test_kl_penalty_refuses_clamps_that_are_not_positive_numbers(key, clamp):
    with pytest.raises(ValueError, match=f"{key} must be a finite number > 0"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2), "k3", **{key: clamp})


@pytest.mark.parametrize(
    "mask,agg,match",
    [
        (torch.ones(3), "token-mean", "mask of its shape"),
        (torch.ones(2, 4), "token-mean", "mask of its shape"),
        (torch.full((2, 3), 0.5), "token-mean", "only 0 and 1"),
        (torch.zeros(2, 3), "token-mean", "selects no token"),
    ],
)
def test_aggregate_checks_its_mask(mask, agg, match):
    with pytest.raises(ValueError, match=match):
        aggregate(torch.ones(2, 3), mask, agg)


def test_aggregate_of_an_empty_mask_is_zero_where_something_else_divides():
    assert aggregate(torch.ones(2, 3), torch.zeros(2, 3), "seq-mean-token-sum") == 0
    assert aggregate(torch.ones(2, 3), torch.zeros(2, 3), "token-mean", normalizer=4) == 0


# ------------------------------------------------------------------------------------------------------ advantages


def test_group_statistics_of_large_float32_rewards_are_taken_in_float64():
    """Rewards +-1e20: their variance 2e40 overflows float32 (std inf: every GRPO advantage was 0)."""
    rewards = torch.tensor([1e20, -1e20, 1.0, 0.0])
    group = torch.tensor([0, 0, 1, 1])
    r64 = rewards.double()
    mean = torch.tensor([0.0, 0.0, 0.5, 0.5], dtype=torch.float64)
    std = torch.stack([r64[:2].std(), r64[:2].std(), r64[2:].std(), r64[2:].std()])
    want = ((r64 - mean) / (std + 1e-6)).float()
    got = ADVANTAGES.get("grpo")(rewards, group, torch.ones(4, 3))
    assert got.dtype == torch.float32 and torch.equal(got, want)
    for name in ADVANTAGES.names():
        adv = ADVANTAGES.get(name)(torch.tensor([3e38, 3e38, 1.0, 0.0]), group, torch.ones(4, 3))
        assert bool(torch.isfinite(adv).all()), name


def test_advantages_beyond_the_dtype_raise():
    with pytest.raises(ValueError, match="beyond torch.float32's range"):
        ADVANTAGES.get("rloo")(torch.tensor([3.4e38, -3.4e38]), torch.tensor([0, 0]), torch.ones(2, 1))


@pytest.mark.parametrize(
    "values,mask,match",
    [
        (torch.tensor([[math.nan, 1.0]]), torch.ones(1, 2), "not finite at \\(0, 0\\)"),
        (torch.ones(2, 3), torch.ones(3), "mask of its shape"),
        (torch.ones(2, 3), torch.full((2, 3), 0.5), "only 0 and 1"),
    ],
)
def test_whiten_checks_its_inputs(values, mask, match):
    with pytest.raises(ValueError, match=match):
        whiten(values, mask)


@pytest.mark.parametrize("shift", [-0.3, 0.3, -2.0])  # log rho per token; x 400 tokens: about -120, +120, -800
@pytest.mark.parametrize("clip", ["dual", None])
@pytest.mark.parametrize("style", ["reinforce", "differentiable"])
@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
def test_sequence_level_anchor_far_from_the_sampler_in_float32(divergence, style, clip, shift):
    """Sequence level, a separate anchor: log rho sums over ~400 tokens to about +-120 (float32's exp over- or
    underflows) or -800 (float64's too), while w stays near 1. Where rho underflowed as u overflowed, rho * u
    phi'(u) and rho phi(u) were 0 * inf = NaN and a loss that fits float32 was refused. Reference: the same call in
    float64 (where exp(+-120) is representable; at -800 the float64 call takes the same rewritten forms). Either
    float32 agrees with it (loss and gradient), or the float64 loss itself lies beyond float32's range and float32
    raises LossOverflow."""
    gen = torch.Generator().manual_seed(7)
    B, T = 3, 400
    old = -2 * torch.rand(B, T, generator=gen, dtype=torch.float64)
    logp = old + 1e-3 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    anchor = old + shift + 1e-2 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    mask = torch.ones(B, T)
    mask[1, 300:] = 0
    adv = torch.randn(B, generator=gen, dtype=torch.float64)
    kw = dict(divergence=divergence, style=style, beta=1e-3, level="sequence", clip=clip)

    def run(dtype):
        lp = logp.to(dtype).clone().requires_grad_()
        out = rpg_loss(lp, old.to(dtype), adv.to(dtype), mask, anchor_logp=anchor.to(dtype), **kw)
        out.loss.backward()
        assert all(torch.isfinite(v).all() for v in out.metrics.values()), out.metrics
        return out.loss.item(), lp.grad.double()

    ref_loss, ref_grad = run(torch.float64)
    if abs(ref_loss) > 1e30:
        with pytest.raises(LossOverflow, match="log rho"):
            run(torch.float32)
        return
    loss, grad = run(torch.float32)
    assert loss == pytest.approx(ref_loss, rel=1e-4, abs=1e-9)
    assert torch.allclose(grad, ref_grad, rtol=1e-4, atol=1e-4 * ref_grad.abs().max().item())


@pytest.mark.parametrize("x", [89.0, 100.0, 150.0])
@pytest.mark.parametrize("which", ["grpo_corrected", "reverse", "forward"])
def test_a_weight_that_underflows_under_a_k3_that_overflows(which, x):
    """float32: the weight e^{log w} underflows to 0 while k3 = e^x - 1 - x overflows to inf, and their product
    (about e^{log w + x}, here near 1) came out 0 * inf = NaN. Reference: float64, where both factors fit."""
    lw = 1.0 - x  # the product is about e^1

    def run(dtype):
        t = lambda v: torch.tensor([v], dtype=dtype)  # noqa: E731
        lp = t(-1.0).requires_grad_()
        if which == "grpo_corrected":  # w = pi/pi_old, r = pi_ref/pi
            out = grpo_kl_term(lp, t(-1.0 + x), t(-1.0 - lw), corrected=True)
        elif which == "reverse":
            out = anchored_kl_term(lp, t(-1.0 + x), t(-1.0 - lw), direction="reverse")
        else:  # weight rho = pi_a/pi_s, r = pi/pi_a
            out = anchored_kl_term(lp, t(-1.0 - x), t(-1.0 - x - lw), direction="forward")
        out.sum().backward()
        return out.item(), lp.grad.item()

    (v32, g32), (v64, g64) = run(torch.float32), run(torch.float64)
    assert math.isfinite(v32) and math.isfinite(g32)
    assert v32 == pytest.approx(v64, rel=1e-5)
    assert g32 == pytest.approx(g64, rel=1e-4, abs=1e-6 * abs(v64))


@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
@pytest.mark.parametrize("log_u, log_rho", [(-50.0, 100.0), (50.0, -100.0), (120.0, -125.0), (-120.0, 118.0)])
def test_reported_kl_term_where_rho_and_u_leave_float32_in_opposite_directions(divergence, log_u, log_rho):
    """rho * phi(u) as reported (`divergences.regularizer`) in float32, where rho or u over- or underflows but the
    term itself fits: it was NaN (0 * inf) or +-inf (inf * a tiny phi). Reference: float64, where all fit."""
    from rpgrl.objectives import divergences as dv

    def reg(dtype):
        return dv.regularizer(divergence, torch.tensor([log_u], dtype=dtype), torch.tensor([log_rho], dtype=dtype))

    ref = reg(torch.float64).item()
    got = reg(torch.float32).item()
    assert not math.isnan(got)
    if abs(ref) < 1e38:
        assert got == pytest.approx(ref, rel=1e-5, abs=1e-30)
    else:
        assert got == math.copysign(math.inf, ref)


def test_reported_kl_rows_of_opposite_infinite_sign_are_not_nan():
    """rkl's term w log u is -inf on one row and +inf on the other (w = e^1000, log u = -0.7 and +0.3): their mean
    was NaN under a loss of 0 (beta 0, A = 0). Each row is saturated at +-METRIC_LIMIT first."""
    f64 = torch.float64
    old = torch.tensor([[-1001.0], [-1001.0]], dtype=f64)
    logp = old + 1000.0
    anchor = old + torch.tensor([[1000.7], [999.7]], dtype=f64)
    out = rpg_loss(logp, old, torch.zeros(2, dtype=f64), torch.ones(2, 1), divergence="rkl", style="reinforce",
                   beta=0.0, clip="dual", anchor_logp=anchor)  # fmt: skip
    assert out.loss.item() == 0
    assert all(bool(torch.isfinite(v)) for v in out.metrics.values()), out.metrics


@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
def test_a_term_at_u_equal_one_is_zero_whatever_rho(divergence):
    """phi(1) = 0 for all four, so rho phi(1) = 0 also where rho = e^100 overflows float32 (fkl's -rho log u was
    inf * 0 = NaN in the w-and-rho form), as right after an anchor reset at sequence level; so are ufkl's and urkl's
    gradient rho u phi'(1). fkl's and rkl's are -+rho: -+inf at e^100 (the losses' backward guard refuses it), the
    denormal -+e^-100 at e^-100 (both were 0, a silently dropped gradient where rho is normal, log rho = 87.5),
    never NaN."""
    from rpgrl.objectives import divergences as dv

    lu = torch.zeros(3, requires_grad=True)
    lr = torch.tensor([100.0, -100.0, 87.5])
    assert dv.regularizer(divergence, lu.detach(), lr).tolist() == [0.0, 0.0, 0.0]
    term = dv.rho_phi(divergence, lu, lr)
    assert term.tolist() == [0.0, 0.0, 0.0]
    term.sum().backward()
    sign = {"fkl": -1.0, "rkl": 1.0, "ufkl": 0.0, "urkl": 0.0}[divergence]
    assert lu.grad[0].item() == sign * math.inf if sign else lu.grad[0].item() == 0.0
    assert lu.grad[1].item() == pytest.approx(sign * math.exp(-100.0), abs=3e-45)
    assert lu.grad[2].item() == pytest.approx(sign * math.exp(87.5), rel=1e-5)
    assert lu.grad.tolist() == dv.rho_u_dphi(divergence, lu.detach(), lr).tolist()


def _reinforce_normalizer(lp: torch.Tensor) -> object:
    """REINFORCE: the weight w A = 1e38 fits float32; divided by the normalizer 2^-10 it does not, while the loss,
    that quotient times logp = -1e-6, is about 1e35."""
    adv = torch.tensor([1e38], dtype=lp.dtype)
    return rpg_loss(lp, lp.detach(), adv, torch.ones(1, 2, dtype=torch.bool), divergence="ufkl", style="reinforce",
                    beta=0.0, normalizer=2.0**-10)  # fmt: skip


def _cancelling(loss):
    """Two tokens of opposite advantages +-3e38 at w = 1: their loss terms cancel, each token's gradient weight
    3e38 / 0.125 does not fit float32."""

    def call(lp: torch.Tensor) -> object:
        adv = torch.tensor([[3e38, -3e38]], dtype=lp.dtype)
        mask = torch.ones(1, 2, dtype=torch.bool)
        if loss is ppo_loss:
            return ppo_loss(lp, lp.detach(), adv, mask, normalizer=0.125)
        return rpg_loss(lp, lp.detach(), adv, mask, divergence="rkl", style="differentiable", beta=0.0, clip="dual",
                        normalizer=0.125)  # fmt: skip

    return call


@pytest.mark.parametrize(
    "call",
    [_reinforce_normalizer, _cancelling(rpg_loss), _cancelling(ppo_loss)],
    ids=["rpg-reinforce-normalizer", "rpg-dual-clip-cancelling", "ppo-cancelling"],
)
def test_a_finite_loss_whose_gradient_overflows_raises_in_backward(call):
    """The forward's refusals see the loss and each term's weight, not that weight times the aggregation's
    1 / normalizer, and opposite terms cancel in the loss: these losses fit float32 while their gradient, in a
    float64 reference, does not (autograd gave inf). Backward now raises LossOverflow, in one line."""
    ref = torch.full((1, 2), -1e-6, dtype=torch.float64, requires_grad=True)
    call(ref).loss.backward()
    assert ref.grad.abs().max() > F32_MAX
    lp = torch.full((1, 2), -1e-6, requires_grad=True)
    out = call(lp)
    assert torch.isfinite(out.loss), out.loss
    with pytest.raises(LossOverflow, match=r"gradient overflows torch.float32 under a finite loss") as info:
        out.loss.backward()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("form", ["grpo corrected", "reverse", "forward"])
def test_weighted_k3_gradients_match_the_closed_form_where_autograd_cancelled(form, dtype):
    """d/dlogp of the weighted k3 terms against the closed forms in float64 (s, a: the sampler's and the anchor's
    log-probs): reverse (and GRPO's corrected term) -(a - logp) e^(logp - s), forward e^(a - s) expm1(logp - a).
    Autograd's chain rule for the reverse form, w k3(x) - w expm1(x) with x = a - logp, cancelled: 0 from x = 25 in
    float32 and x = 60 in float64, where the KL term's gradient matters most (the policy far below the reference)."""
    big = 88.0 if dtype == torch.float32 else 700.0
    for s in (-40.0, -5.0, 0.0):
        for x in (-big, -60.0, -17.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 17.0, 25.0, 40.0, 60.0, big):
            lp = torch.tensor([-3.0], dtype=dtype, requires_grad=True)
            a, sv = torch.tensor([-3.0 + x], dtype=dtype), torch.tensor([s], dtype=dtype)
            if form == "grpo corrected":
                term = grpo_kl_term(lp, a, sv, corrected=True)
            else:
                term = anchored_kl_term(lp, a, sv, direction=form)
            lp64, a64 = -3.0, float(a)  # the dtype's own inputs, in float64
            if form == "forward":
                exact = math.exp(a64 - s) * math.expm1(lp64 - a64) if a64 - s < 709 else math.inf
            else:
                exact = -(a64 - lp64) * math.exp(lp64 - s)
            if not abs(exact) < torch.finfo(dtype).max:  # past the dtype: one line, not an infinite gradient
                if torch.isfinite(term).all():
                    with pytest.raises(LossOverflow):
                        torch.autograd.grad(term.sum(), lp)
                continue
            (g,) = torch.autograd.grad(term.sum(), lp)
            assert math.isclose(g.item(), exact, rel_tol=1e-5 if dtype == torch.float32 else 1e-12, abs_tol=1e-300), (
                form, s, x, g.item(), exact)  # fmt: skip


@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
@pytest.mark.parametrize("style", ["differentiable", "reinforce"])
@pytest.mark.parametrize("clip", [None, "dual"])
@pytest.mark.parametrize("log_rho_total", [-85.0, 85.0])
def test_an_anchor_85_nats_from_the_sampler_gives_the_float64_loss(divergence, style, clip, log_rho_total):
    """Sequence level, w = 1, a separate anchor with log rho = -+85 over the response (8.5 per token x 10 tokens):
    rho and u are normal float32 numbers, but u log u (e^85 x 85) is not, while rho u log u = +-85 is; rpg_loss
    refused it as an overflow (at -85, in rkl and urkl). At +85 fkl's and ufkl's term before beta, rho (-log u) ~
    e^85 x 85, passes float32's largest; it was refused until beta was multiplied in first. Reference: float64."""

    def run(dtype):
        old = torch.full((2, 10), -1.0, dtype=dtype)
        lp = old.clone().requires_grad_()
        out = rpg_loss(lp, old, torch.tensor([1.0, -1.0], dtype=dtype), torch.ones(2, 10), anchor_logp=old +
                       log_rho_total / 10, level="sequence", divergence=divergence, style=style, beta=1e-4,
                       clip=clip)  # fmt: skip
        (g,) = torch.autograd.grad(out.loss, lp)
        return out.loss.item(), g.double()

    v64, g64 = run(torch.float64)
    v32, g32 = run(torch.float32)
    assert v32 == pytest.approx(v64, rel=1e-5, abs=1e-6)
    assert torch.allclose(g32, g64, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
def test_rho_phi_backward_where_rho_times_log_u_passes_float32(divergence):
    """rho phi(u) at log u = -87, log rho = 87 (both normal float32 numbers): backward multiplied rho = e^87 into
    phi's factor log u first (e^87 x 87 = inf) though the gradient, rho u phi'(u) (rkl: w (log u + 1) = -86), fits.
    Reference: float64."""
    from rpgrl.objectives import divergences as dv

    def grad(dtype):
        lu = torch.tensor([-87.0], dtype=dtype, requires_grad=True)
        (g,) = torch.autograd.grad(dv.rho_phi(divergence, lu, torch.tensor([87.0], dtype=dtype)).sum(), lu)
        return g.item()

    ref = grad(torch.float64)
    assert abs(ref) < F32_MAX
    assert grad(torch.float32) == pytest.approx(ref, rel=1e-5)


def _exact_terms(divergence: str, log_u: float, log_rho: float) -> tuple[float, float]:
    """(rho phi(u), rho u phi'(u)) in float64 from the closed forms (rho = e^95 and e^-100 are float64 numbers)."""
    rho, u = math.exp(log_rho), math.exp(log_u)
    if divergence == "fkl":
        return -rho * log_u, -rho
    if divergence == "rkl":
        return rho * u * log_u, rho * u * (log_u + 1)
    if divergence == "ufkl":
        return rho * (math.expm1(log_u) - log_u), rho * math.expm1(log_u)
    return rho * (u * log_u - math.expm1(log_u)), rho * u * log_u


@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
@pytest.mark.parametrize("log_u", [-5.0, -1.0, -0.3, -1e-3, 1e-3, 0.5, 3.0])
@pytest.mark.parametrize("log_rho", [88.73, 95.0, -100.0, -88.0])
def test_terms_where_rho_leaves_float32(divergence, log_u, log_rho):
    """rho phi(u) and rho u phi'(u) (value, and gradient in log u) where rho = pi_a / pi_s is not a float32 number,
    or w = rho u is not, but the term is. Before: ufkl's written as w - rho (1 + log u) was -inf or NaN (inf - inf)
    under rho = inf; fkl's -rho log u and rkl's w log u were +-inf, urkl's w (log u - 1) + rho NaN (at log rho = 95,
    log u = -1e-3, a term of 9e34). Reference: the closed forms in float64; a term beyond float32 is skipped, and the
    exponent of the log forms costs ~95 eps of relative precision."""
    from rpgrl.objectives import divergences as dv

    lu = torch.tensor([log_u], requires_grad=True)
    lr = torch.tensor([log_rho])
    value = dv.rho_phi(divergence, lu, lr)
    (grad,) = torch.autograd.grad(value.sum(), lu)
    term, derivative = _exact_terms(divergence, float(lu.item()), log_rho)  # log u as float32 holds it
    exact = {"rho_phi": term, "regularizer": term, "rho_u_dphi": derivative, "gradient": derivative}
    got = {
        "rho_phi": value.item(),
        "regularizer": dv.regularizer(divergence, lu.detach(), lr).item(),
        "rho_u_dphi": dv.rho_u_dphi(divergence, lu.detach(), lr).item(),
        "gradient": grad.item(),
    }
    tiny = torch.finfo(torch.float32).tiny
    for key, ref in exact.items():
        if abs(ref) < F32_MAX:
            assert got[key] == pytest.approx(ref, rel=1e-5, abs=tiny), (key, got[key], ref)
        elif key != "regularizer":  # the regularizer saturates at +inf; the others overflow to +-inf, never NaN
            assert not math.isnan(got[key]), (key, got[key])


def test_kl_helpers_and_aggregate_name_an_input_that_is_not_a_tensor():
    """A list raised AttributeError from inside the helper."""
    t = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="ref_logp must be a torch.Tensor, got list"):
        kl_penalty(t, [[0.0, 0.0]], "k3")
    with pytest.raises(ValueError, match="logp must be a torch.Tensor, got list"):
        grpo_kl_term([[0.0, 0.0]], t, t, corrected=True)
    with pytest.raises(ValueError, match="sampler_logp must be a torch.Tensor, got list"):
        anchored_kl_term(t, t, [[0.0, 0.0]], direction="forward")
    with pytest.raises(ValueError, match="per_token and mask must be tensors, got list"):
        aggregate([[1.0, 2.0]], torch.ones(1, 2))


def test_rho_phi_near_log_u_0_under_a_large_normal_rho_stays_on_the_direct_form():
    """A review's regressions of a first bound (rho (1 + |log u|) with e^8 to spare): fkl's gradient at log u = 0,
    log rho = 84 was cut to 0 (exact -e^84), and urkl's term at log u = 0.05 lost 2e-3 of relative precision in the
    w-and-rho form. References: the closed forms in float64."""
    from rpgrl.objectives import divergences as dv

    lu = torch.zeros(1, requires_grad=True)
    (g,) = torch.autograd.grad(dv.rho_phi("fkl", lu, torch.tensor([84.0])).sum(), lu)
    assert g.item() == pytest.approx(-math.exp(84.0), rel=1e-5)
    exact = math.exp(84.0) * (math.exp(0.05) * (0.05 - 1) + 1)  # rho (u log u - u + 1)
    assert dv.rho_phi("urkl", torch.tensor([0.05]), torch.tensor([84.0])).item() == pytest.approx(exact, rel=1e-4)


def test_corrected_k3_backward_multiplies_beta_in_before_it_overflows():
    """log w = 88.4, x = -2, beta 1e-3: the gradient beta x w ... = 4.93e35 fits float32, but backward formed the
    factor w |x| (7.5e38) first and raised LossOverflow. Reference: the closed form in float64."""
    lp = torch.tensor([[-1.6]], requires_grad=True)
    out = ppo_loss(lp, torch.tensor([[-90.0]]), torch.tensor([0.0]), torch.ones(1, 1), kl="k3_corrected", beta=1e-3,
                   ref_logp=torch.tensor([[-3.6]]))  # fmt: skip
    out.loss.backward()
    lp64, x = -1.6, -3.6 - (-1.6)
    exact = 1e-3 * -x * math.exp(float(torch.tensor(lp64)) - -90.0)  # beta (logp - a) w
    assert lp.grad.item() == pytest.approx(exact, rel=1e-4)


def _closed_form_dual_gradient(divergence: str, log_w: float, log_rho: float, adv: float, beta: float,
                               w_b: float | None) -> float:  # fmt: skip
    """d loss / d log w of Alg. 1 with the exact analogue, one sequence, in float64 from closed forms: unclipped
    (w_b None), -(w A + C) with C = -beta rho u phi'(u); clipped at w_b, w_b beta d(phi(u)/u)/d log u."""
    lu = log_w - log_rho
    if w_b is None:
        c = {"fkl": -math.exp(log_rho), "rkl": math.exp(log_w) * (lu + 1), "ufkl": math.exp(log_w) - math.exp(log_rho),
             "urkl": math.exp(log_w) * lu}[divergence]  # fmt: skip
        return -(math.exp(log_w) * adv - beta * c)
    d_phi_over_u = {"fkl": (lu - 1) * math.exp(-lu), "rkl": 1.0, "ufkl": lu * math.exp(-lu),
                    "urkl": -math.expm1(-lu)}[divergence]  # fmt: skip
    return w_b * beta * d_phi_over_u


_DUAL_CASES = [(0.0625, 20.0, 0.1), (0.0625, 50.0, 0.1), (0.0625, 80.0, 0.1), (-0.125, -20.0, 0.1), (2.5, 20.0, 0.1),
               (2.5, 60.0, 0.1), (0.0625, 88.75, 0.1), (0.0625, 83.0, 10.0), (0.0, 84.28125, 1.0)]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
@pytest.mark.parametrize("log_w, log_rho, beta", _DUAL_CASES)
def test_dual_clip_with_the_kl_inside_keeps_its_gradient_under_a_far_anchor(dtype, divergence, log_w, log_rho, beta):
    """Alg. 1 (differentiable, dual clip, exact analogue, the KL inside the clip), sequence level, a separate anchor
    log rho nats from the sampler. Unclipped, the loss -A_hat w is -w A + beta rho phi(u); taken as the product, its
    gradient added two terms of size beta rho that cancel: urkl's gradient was -4.0 for -1.05 at log rho = 20 in
    float32 and 0 for -4.2 at 50 in float64. log w = 2.5 is clipped (w > c = 10, or > 1.28 where A_hat >= 0), where the
    gradient runs through A_hat alone. At log rho = 88.75 rho phi(u) passes float32's largest while beta rho phi(u)
    does not (urkl: a gradient of 0, then a refusal); at 83 with beta = 10 and at 84.28 with beta = 1, beta rho |log u|
    does not fit while the gradient does (refused in backward). A loss or gradient beyond the dtype is refused. The
    inputs are exact binary fractions; reference: the closed forms in float64."""
    adv = -1.0
    old = torch.tensor([[-1.0]], dtype=dtype)
    lp = (old + log_w).requires_grad_()

    def loss():
        return rpg_loss(lp, old, torch.tensor([adv], dtype=dtype), torch.ones(1, 1), divergence=divergence,
                        style="differentiable", beta=beta, level="sequence", agg="seq-mean-token-sum", clip="dual",
                        kl_in_clip=True, analogue="exact", anchor_logp=old + log_rho).loss  # fmt: skip

    lu = log_w - log_rho
    phi_over_u = {"fkl": -lu * math.exp(-lu), "rkl": lu, "ufkl": 1 - (1 + lu) * math.exp(-lu),
                  "urkl": lu - 1 + math.exp(-lu)}[divergence]  # fmt: skip
    bound = 1.28 if adv - beta * phi_over_u >= 0 else 10.0  # the positive branch's 1 + eps_high, else c
    log_b = torch.nextafter(torch.tensor(math.log(bound), dtype=dtype), torch.tensor(0.0, dtype=dtype))  # 1 ulp in
    w_b = None if log_w < math.log(1.2) else math.exp(log_b.item())
    want = _closed_form_dual_gradient(divergence, log_w, log_rho, adv, beta, w_b)
    want_loss = (-adv + beta * phi_over_u) * (math.exp(log_w) if w_b is None else w_b)
    if max(abs(want), abs(want_loss)) > torch.finfo(dtype).max:
        with pytest.raises(LossOverflow):
            loss().backward()
        return
    loss().backward()
    rel = 1e-5 if dtype == torch.float32 else 1e-12
    assert lp.grad.item() == pytest.approx(want, rel=rel), (lp.grad.item(), want)


@pytest.mark.parametrize("divergence", ["fkl", "rkl"])
@pytest.mark.parametrize("kl_value_clamp", [10.0, None])
def test_separate_kl_gradient_at_u_equal_one_under_a_normal_rho_past_87(divergence, kl_value_clamp):
    """Differentiable, no clip, a separate anchor with log rho = log w = 87.5 (u = 1, rho a normal float32 number
    past `direct_ok`'s symmetric bound 87.34): the KL term is 0 but its gradient -+beta rho is not; it was dropped
    (0), silently. Reference: -(w A + C), C = -beta rho u phi'(u), in float64."""
    adv, beta, log_rho = 0.5, 0.01, 87.5
    old = torch.tensor([[-1.0]])
    lp = (old + log_rho).requires_grad_()
    out = rpg_loss(lp, old, torch.tensor([adv]), torch.ones(1, 1), divergence=divergence, style="differentiable",
                   beta=beta, level="sequence", clip=None, kl_value_clamp=kl_value_clamp,
                   anchor_logp=old + log_rho)  # fmt: skip
    out.loss.backward()
    rho = w = math.exp(log_rho)
    c = -beta * (-rho if divergence == "fkl" else w)
    assert lp.grad.item() == pytest.approx(-(w * adv + c), rel=1e-5)


@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
@pytest.mark.parametrize("log_rho_total, log_w_total", [(-95.0, 0.0), (-95.0, 0.5), (-60.0, 0.0), (95.0, 0.0)])
def test_clamped_kl_term_where_rho_or_u_leaves_float32(divergence, log_rho_total, log_w_total):
    """The released loss's separate KL term clamped to +-10 (`kl_value_clamp`), sequence level, a separate anchor
    far from the sampler: ufkl's rho k3(u) at log rho = -95, log u = 95 is about 1, but taken as the direct product
    it was 0 x inf = NaN in float32, counted as clamped, and its gradient (about 1) was cut. Reference: float64."""

    def run(dtype):
        old = torch.full((1, 10), -1.0, dtype=dtype)
        lp = (old + log_w_total / 10).requires_grad_()
        out = rpg_loss(lp, old, torch.tensor([1.0], dtype=dtype), torch.ones(1, 10), anchor_logp=old +
                       log_rho_total / 10, level="sequence", divergence=divergence, style="differentiable",
                       beta=0.5, clip=None, kl_value_clamp=10.0)  # fmt: skip
        (g,) = torch.autograd.grad(out.loss, lp)
        return out.loss.item(), g.double(), out.metrics["clip/frac_kl_clamp"].item()

    v64, g64, c64 = run(torch.float64)
    v32, g32, c32 = run(torch.float32)
    assert c32 == c64
    assert v32 == pytest.approx(v64, rel=1e-5, abs=1e-6)
    assert torch.allclose(g32, g64, rtol=1e-4, atol=1e-6), (g32, g64)


_BETA_FIRST = [  # (divergence, style, clip, dtype, log w, log rho, A, beta): one token, old log-prob 0
    ("urkl", "differentiable", None, torch.float32, 0.0, -60.0, 0.0, 1e-30),  # beta rho underflowed: 0
    ("urkl", "differentiable", "dual", torch.float32, 0.1, -60.0, 0.0, 1e-30),
    ("rkl", "differentiable", None, torch.float32, -6.0, -87.3, 0.0, 1e-4),  # a denormal beta rho: 9e-5 off
    ("rkl", "differentiable", None, torch.float64, -6.0, -700.0, 0.0, 1e-30),
    ("fkl", "differentiable", None, torch.float32, 20.0, 100.0, -1.0, 1e-30),  # refused: rho before beta
    ("fkl", "differentiable", None, torch.float32, 0.1, 90.0, 0.5, 1e-4),
    ("rkl", "differentiable", None, torch.float32, -6.0, -87.3, -1.0, 1e6),
    ("rkl", "reinforce", None, torch.float32, -6.0, -87.3, -1.0, 1e6),
    ("rkl", "differentiable", None, torch.float64, 2.0, -700.0, 1.0, 1e6),
    ("fkl", "reinforce", None, torch.float32, 20.0, 100.0, -1.0, 0.0),  # beta = 0: -0 x inf was NaN
    ("rkl", "reinforce", None, torch.float32, 0.5, -95.0, 1.0, 0.0),
    ("fkl", "reinforce", None, torch.float64, 0.5, 720.0, 1.0, 0.0),
]


@pytest.mark.parametrize("divergence, style, clip, dtype, log_w, log_rho, adv, beta", _BETA_FIRST)
def test_beta_is_multiplied_into_the_kl_before_rho_can_leave_the_dtype(divergence, style, clip, dtype, log_w,
                                                                        log_rho, adv, beta):  # fmt: skip
    """A separate anchor log rho from the sampler, where beta rho fits the dtype and rho does not (or the reverse):
    the KL term and its gradient weight C = -beta rho u phi'(u) were formed as rho first, so they were refused,
    underflowed to 0 or kept a denormal's few digits; at beta = 0 the REINFORCE weight was -0 x inf = NaN. Reference:
    mpmath at 60 digits, the loss -w A + beta rho phi(u) (REINFORCE: -(w A + C) log p) and the gradient -(w A + C)."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(60):
        lw, lr = mpmath.mpf(log_w), mpmath.mpf(log_rho)
        lu, w, rho = lw - lr, mpmath.exp(lw), mpmath.exp(lr)
        u = mpmath.exp(lu)
        phi = {"fkl": -lu, "rkl": u * lu, "ufkl": u - 1 - lu, "urkl": u * lu - u + 1}[divergence]
        u_dphi = {"fkl": -1, "rkl": u * (lu + 1), "ufkl": u - 1, "urkl": u * lu}[divergence]
        weight = w * adv - beta * rho * u_dphi  # w A + C
        want_loss = float(-weight * lw if style == "reinforce" else -w * adv + beta * rho * phi)
        weight = float(weight)
    old = torch.zeros(1, 1, dtype=dtype)
    lp = (old + log_w).requires_grad_()
    out = rpg_loss(lp, old, torch.tensor([adv], dtype=dtype), torch.ones(1, 1), divergence=divergence, style=style,
                   beta=beta, clip=clip, anchor_logp=old + log_rho, normalizer=1)  # fmt: skip
    out.loss.backward()
    rel = 1e-5 if dtype == torch.float32 else 1e-12
    assert out.loss.item() == pytest.approx(want_loss, rel=rel)
    assert lp.grad.item() == pytest.approx(-weight, rel=rel)


@pytest.mark.parametrize("divergence", ["fkl", "ufkl", "urkl"])
@pytest.mark.parametrize("dtype, log_w", [(torch.float32, -90.0), (torch.float64, -712.0)])
def test_clipped_rows_multiply_beta_in_before_one_over_u_overflows(divergence, dtype, log_w):
    """Alg. 1, exact analogue, no anchor: a unit far below the sampler (w = e^-90 in float32) is clipped at
    1 - eps_low, where the loss is -A_hat w_b with A_hat = A - beta phi(u)/u and its gradient w_b beta (phi/u)'. 1/u
    = e^90 is not a float32 number but beta / u is: A_hat was formed as phi(u)/u first, and the loss (8.8e36 for fkl)
    refused. Reference: mpmath at 60 digits."""
    mpmath = pytest.importorskip("mpmath")
    adv, beta = 0.5, 1e-4
    log_b = torch.nextafter(torch.tensor(math.log(0.8), dtype=dtype), torch.tensor(0.0, dtype=dtype)).item()
    with mpmath.workdps(60):
        lu, w_b = mpmath.mpf(log_w), mpmath.exp(mpmath.mpf(log_b))  # clipped at 1 - eps_low, one ulp inside
        inv = mpmath.exp(-lu)
        phi_over_u = {"fkl": -lu * inv, "ufkl": 1 - (1 + lu) * inv, "urkl": lu - 1 + inv}[divergence]
        d_phi_over_u = {"fkl": (lu - 1) * inv, "ufkl": lu * inv, "urkl": 1 - inv}[divergence]
        want_loss, want_grad = float((-adv + beta * phi_over_u) * w_b), float(w_b * beta * d_phi_over_u)
    old = torch.zeros(1, 1, dtype=dtype)
    lp = (old + log_w).requires_grad_()
    out = rpg_loss(lp, old, torch.tensor([adv], dtype=dtype), torch.ones(1, 1), divergence=divergence,
                   style="differentiable", beta=beta, clip="dual", kl_in_clip=True, analogue="exact")  # fmt: skip
    out.loss.backward()
    rel = 1e-5 if dtype == torch.float32 else 1e-12
    assert out.loss.item() == pytest.approx(want_loss, rel=rel)
    assert lp.grad.item() == pytest.approx(want_grad, rel=rel)
    assert out.metrics["clip/frac_low"].item() == 1.0


# ---------- a fourteenth probe's: beta = 0 with a far anchor, A = 0 under an overflowed w, beta first without anchor

DIVS = ("fkl", "rkl", "ufkl", "urkl")


@pytest.mark.parametrize("divergence", DIVS)
@pytest.mark.parametrize("style", ["reinforce", "differentiable"])
@pytest.mark.parametrize("shift", [-800.0, -100.0, 100.0, 800.0])
def test_beta_zero_ignores_the_anchor_in_the_dual_clips_branch(divergence, style, shift):
    """beta = 0: A' = A, the anchor plays no part. fkl's phi'(u) = -1/u is -inf once u underflows, and 0 x -inf put
    a clipped positive-advantage token on the negative branch: it kept its gradient (a review's)."""
    lp = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.4, -1.0, -0.5]], dtype=torch.float64)  # w = 1.49 (clipped high), 0.37, 1
    adv, mask = torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 3, dtype=torch.float64)
    kw = dict(divergence=divergence, style=style, beta=0.0, clip="dual")
    ref = rpg_loss(lp, old, adv, mask, **kw)
    (g_ref,) = torch.autograd.grad(ref.loss, lp)
    out = rpg_loss(lp, old, adv, mask, anchor_logp=old + shift, **kw)
    (g,) = torch.autograd.grad(out.loss, lp)
    assert float(out.loss.detach()) == float(ref.loss.detach()) and torch.equal(g, g_ref)
    assert float(g[0, 0]) == 0.0 and float(out.metrics["clip/frac_high"]) == pytest.approx(1 / 3)


@pytest.mark.parametrize("divergence", DIVS)
@pytest.mark.parametrize("style", ["reinforce", "differentiable"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_a_zero_advantage_response_whose_ratio_overflows_adds_nothing(divergence, style, level):
    """A = 0 (a group of equal rewards) times a ratio that overflowed float32 was NaN: LossOverflow, where the
    response adds exactly 0 to the loss and its gradient. The loss equals the batch's with that response on-policy."""
    lp = torch.tensor([[-1.0, -1.0], [-0.5, -0.5]], requires_grad=True)
    far = torch.tensor([[-1.1, -0.9], [-50.5, -50.5]])  # sequence log w = 100 in row 2
    near = torch.tensor([[-1.1, -0.9], [-0.5, -0.5]])
    adv, mask = torch.tensor([0.5, 0.0]), torch.ones(2, 2)
    kw = dict(divergence=divergence, style=style, beta=0.0, level=level, clip=None)
    out, ref = rpg_loss(lp, far, adv, mask, **kw), rpg_loss(lp, near, adv, mask, **kw)
    (g,) = torch.autograd.grad(out.loss, lp)
    (g_ref,) = torch.autograd.grad(ref.loss, lp)
    assert float(out.loss.detach()) == float(ref.loss.detach()) and torch.equal(g, g_ref) and torch.isfinite(g).all()


@pytest.mark.parametrize("divergence", DIVS)
@pytest.mark.parametrize(
    "style, clip, kl_in_clip",
    [("reinforce", None, True), ("differentiable", None, True), ("differentiable", "dual", False)],
)
def test_without_an_anchor_beta_is_multiplied_in_before_the_kl_overflows(divergence, style, clip, kl_in_clip):
    """log w = 86 in float32: beta u phi'(u) and beta phi(u) fit where u phi'(u) and phi(u) do not. With the
    sampler passed as the anchor the loss was right; left out (the same anchor), it raised LossOverflow. Both now
    give the float64 loss, and a finite gradient."""
    lp = torch.tensor([[-0.5, -1.0]], requires_grad=True)
    old = torch.tensor([[-86.5, -1.2]])
    kw = dict(divergence=divergence, style=style, beta=1e-4, clip=clip, kl_in_clip=kl_in_clip)
    if clip is None:
        kw.pop("kl_in_clip")
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2)
    f64 = rpg_loss(lp.detach().double(), old.double(), adv.double(), mask.double(), **kw).loss
    for anchor in (old, None):
        out = rpg_loss(lp, old, adv, mask, anchor_logp=anchor, **kw)
        (g,) = torch.autograd.grad(out.loss, lp)
        assert float(out.loss.detach()) == pytest.approx(float(f64), rel=1e-5) and torch.isfinite(g).all()


def test_kl_metrics_of_units_of_opposite_infinite_sign_in_one_row_are_not_nan():
    """rkl's per-token terms of +inf and -inf in one row (float64, an anchor 900 nats either way) summed to NaN
    before the row was saturated: kl/rkl NaN under a finite loss (a review's)."""
    lp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    old = torch.full((1, 2), -800.0, dtype=torch.float64)
    anchor = old + torch.tensor([[-900.0, 820.0]], dtype=torch.float64)
    for beta in (0.0, 1e-300):
        out = rpg_loss(lp, old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 2), divergence="rkl",
                       style="reinforce", beta=beta, clip="truncate", anchor_logp=anchor)  # fmt: skip
        if math.isfinite(float(out.loss.detach())):
            assert all(math.isfinite(float(v)) for v in out.metrics.values()), out.metrics


@pytest.mark.parametrize("kl", ["k3", "k3_corrected"])
@pytest.mark.parametrize("x, beta, dtype", [(92.0, 1e-4, torch.float32), (97.0, 1e-6, torch.float32),
                                           (712.0, 1e-4, torch.float64)])  # fmt: skip
def test_ppo_kl_term_past_the_dtype_under_a_small_beta_gives_the_exact_loss(kl, x, beta, dtype):
    """log(pi_ref / pi_theta) = x past exp's range (88.7 in float32, 709.8 in float64) while beta k3(x) fits: the
    term overflowed before beta multiplied it, and a finite loss was refused as an overflow. Now beta is taken in
    log space where the product overflows: loss and gradient are the closed forms (w = 1, A = 0), in float64:
    beta k3(x) = beta e^x (1 - (1 + x) e^-x); d/dlogp = -beta expm1(x) (k3), -beta x w (k3_corrected)."""
    log_max = math.log(torch.finfo(dtype).max)
    assert math.log(beta) + x < log_max < x
    exact = math.exp(math.log(beta) + x) * (1 - (1 + x) * math.exp(-x))
    grad = -math.exp(math.log(beta) + x) * -math.expm1(-x) if kl == "k3" else -beta * x
    lp = _one(-1.0 - x, dtype, grad=True)
    out = ppo_loss(lp, _one(-1.0 - x, dtype), torch.tensor([0.0], dtype=dtype), torch.ones(1, 1), kl=kl, beta=beta,
                   ref_logp=_one(-1.0, dtype))  # fmt: skip
    out.loss.backward()
    assert math.isclose(out.loss.item(), exact, rel_tol=1e-5), (out.loss.item(), exact)
    assert math.isclose(lp.grad.item(), grad, rel_tol=1e-5), (lp.grad.item(), grad)
    assert out.metrics["loss/kl"].item() == pytest.approx(min(exact, 1e30), rel=1e-5)  # saturated at 1e30


@pytest.mark.parametrize("kl", ["k3", "k3_corrected"])
@pytest.mark.parametrize("x, beta, normalizer, dtype", [(89.0, 1e-3, 1e6, torch.float32),
                                                        (89.0, 1e-3, 1e9, torch.float32),
                                                        (95.0, 1e-8, 1e4, torch.float32),
                                                        (712.0, 1e-290, 1.0, torch.float64)])  # fmt: skip
def test_ppo_kl_metrics_of_a_term_past_the_dtype_are_exact_where_they_fit(kl, x, beta, normalizer, dtype):
    """The term k3(x) alone passes the dtype (x = log(pi_ref / pi_theta) = 89 in float32), beta k3(x) / N does not:
    since the loss takes beta inside the exponential it is finite (4.5e29 at GRPO's beta = 1e-3 over 1e6 tokens), but
    loss/kl was beta x inf, saturated to 1e30, and kl/penalty = k3(x) / N (4.5e29 over 1e9 tokens) too. Reference:
    the closed form e^(x - log N) (1 - (1 + x) e^-x) in float64 (w = 1, A = 0), times beta; saturated at 1e30."""
    log_penalty = x - math.log(normalizer) + math.log1p(-(1 + x) * math.exp(-x))  # log(k3(x) / N)
    assert x > math.log(torch.finfo(dtype).max) and math.log(beta) + log_penalty < math.log(1e30)
    loss_kl = math.exp(math.log(beta) + log_penalty)
    lp = _one(-1.0 - x, dtype, grad=True)
    out = ppo_loss(lp, _one(-1.0 - x, dtype), torch.tensor([0.0], dtype=dtype), torch.ones(1, 1), kl=kl, beta=beta,
                   ref_logp=_one(-1.0, dtype), normalizer=normalizer)  # fmt: skip
    assert out.loss.item() == pytest.approx(loss_kl, rel=1e-5)
    assert out.metrics["loss/kl"].item() == pytest.approx(loss_kl, rel=1e-5)
    assert out.metrics["kl/penalty"].item() == pytest.approx(math.exp(min(log_penalty, math.log(1e30))), rel=1e-5)


@pytest.mark.parametrize("log_w, x, dtype", [(-110.0, 80.0, torch.float32), (-95.0, 80.0, torch.float32),
                                             (-100.0, 88.0, torch.float32), (-800.0, 709.0, torch.float64),
                                             (-740.0, 700.0, torch.float64)])  # fmt: skip
@pytest.mark.parametrize("which", ["grpo_corrected", "forward", "ppo"])
def test_a_weight_below_the_smallest_normal_times_a_large_k3(which, log_w, x, dtype):
    """w = e^log_w underflows (e^-110 in float32) or is denormal (e^-95: a few bits) while k3(x) is large, and the
    product, about e^(log_w + x), is a normal number (e^-30): it came out 0 (or 2e-2 off) as the direct product,
    which was finite, so its log-space form was not taken. The gradient was already formed in log space. Reference:
    the closed form e^(log_w + x) (1 - (1 + x) e^-x), in mpmath at 50 digits."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(50):
        want = float(mpmath.exp(log_w) * (mpmath.expm1(x) - x))
    assert torch.finfo(dtype).tiny < abs(want) < torch.finfo(dtype).max
    t = lambda v: torch.tensor([[v]], dtype=dtype)  # noqa: E731
    if which == "grpo_corrected":  # w = pi / pi_old, x = log(pi_ref / pi)
        got = grpo_kl_term(t(-1.0), t(-1.0 + x), t(-1.0 - log_w), corrected=True)
    elif which == "forward":  # weight rho = pi_a / pi_s, k3(log(pi / pi_a))
        got = anchored_kl_term(t(-1.0), t(-1.0 - x), t(-1.0 - x - log_w), direction="forward")
    else:  # ppo_loss's corrected term alone (A = 0, beta = 1)
        got = ppo_loss(t(-1.0), t(-1.0 - log_w), torch.zeros(1, dtype=dtype), torch.ones(1, 1), kl="k3_corrected",
                       beta=1.0, ref_logp=t(-1.0 + x)).loss  # fmt: skip
    assert got.item() == pytest.approx(want, rel=1e-6 if dtype == torch.float32 else 1e-12, abs=0.0)


@pytest.mark.parametrize("log_w, adv, normalizer, dtype", [
    (89.0, -0.5, None, torch.float32),  # w = e^89 overflows, -A w = 2.2e38 does not: refused
    (710.0, -0.5, None, torch.float64),
    (-119.0, 2e28, None, torch.float32),  # w underflows to 0, -A w = -4.2e-24 does not: loss and gradient 0
    (-100.0, 1e10, None, torch.float32),  # w = 3.7e-44 is denormal (a few bits): -A w was 2% off
    (-760.0, 1e300, None, torch.float64),
    (-1.9, 2.65e38, 0.5, torch.float32),  # backward's g x -A = -5.3e38 overflowed before x w: refused in backward
])  # fmt: skip
def test_ppo_surrogate_where_the_ratio_or_the_advantage_alone_leaves_the_dtype(log_w, adv, normalizer, dtype):
    """The unclipped PPO term -A w (no dual clip) was formed as -A x exp(log w), and backward as (g x -A) x w: where
    one factor over- or underflows the dtype while -A w / N fits, a finite loss was refused or its value and
    gradient came out 0 or a few bits off. Reference: -A e^(log w) / N and the same gradient, mpmath at 50 digits."""
    mpmath = pytest.importorskip("mpmath")
    lp = _one(-1.0, dtype, grad=True)
    old = lp.detach() - log_w
    with mpmath.workdps(50):
        want = float(-mpmath.mpf(adv) * mpmath.exp(mpmath.mpf(lp.item()) - mpmath.mpf(old.item())) / (normalizer or 1))
    assert torch.finfo(dtype).tiny < abs(want) < torch.finfo(dtype).max
    out = ppo_loss(lp, old, torch.tensor([adv], dtype=dtype), torch.ones(1, 1), normalizer=normalizer)
    out.loss.backward()
    rel = 1e-6 if dtype == torch.float32 else 1e-12
    assert out.loss.item() == pytest.approx(want, rel=rel, abs=0.0)
    assert lp.grad.item() == pytest.approx(want, rel=rel, abs=0.0)
    assert out.metrics["loss/policy"].item() == pytest.approx(max(min(want, 1e30), -1e30), rel=rel, abs=0.0)


@pytest.mark.parametrize("logp, log_w, beta", [(-4000.0, 90.0, 1e-3), (-9000.0, 86.0, 0.05)])
def test_ppo_corrected_kl_past_float32_under_beta_keeps_log_w_at_its_own_precision(logp, log_w, beta):
    """k3_corrected's w k3(x) past float32 (anchor = sampler: x = -log w) under a beta that brings it back in range:
    `_times_beta` took beta in as a sampler moved by -log beta, and old_logp - log beta was rounded at old_logp's
    magnitude (ulp 2.4e-4 at 4087), not log w's: the loss and its gradient were 4e-5 off. Reference: beta w k3(-log w)
    and -beta (-log w) w from the float32 inputs, in mpmath at 50 digits; float32 precision at |log w| ~ 90 (1e-5)."""
    mpmath = pytest.importorskip("mpmath")
    lp = _one(logp, grad=True)
    old = lp.detach() - log_w
    with mpmath.workdps(50):
        lw = mpmath.mpf(lp.item()) - mpmath.mpf(old.item())
        want = float(beta * mpmath.exp(lw) * (mpmath.expm1(-lw) + lw))
        grad = float(beta * lw * mpmath.exp(lw))
    assert math.log(F32_MAX) < log_w + math.log(log_w) and abs(want) < F32_MAX and abs(grad) < F32_MAX
    out = ppo_loss(lp, old, torch.zeros(1), torch.ones(1, 1), kl="k3_corrected", beta=beta)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(want, rel=1e-5)
    assert lp.grad.item() == pytest.approx(grad, rel=1e-5)


@pytest.mark.parametrize("divergence, log_w, log_rho, beta", [("rkl", 66.0, None, 1e-3), ("rkl", 80.0, None, 1e-4),
                                                              ("fkl", 74.0, 75.0, 1e-4),
                                                              ("ufkl", 70.0, None, 1e-8)])  # fmt: skip
@pytest.mark.parametrize("style", ["differentiable", "reinforce"])
def test_rpg_kl_metrics_of_a_unit_past_the_metric_limit(divergence, log_w, log_rho, beta, style):
    """A unit's rho phi(u) past 1e30 (rkl's e^66 x 66 = 3e30) was saturated to 1e30 before beta multiplied it: loss/kl
    read 1e30 beta (1e27 for 3e27; 1e26 for 4.4e32, which saturates at 1e30) and loss/policy = total - loss/kl kept
    the difference (2e27 for a policy part of 0, A = 0). Reference: beta rho phi(u) from mpmath, saturated at 1e30."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(50):
        lw, lr = mpmath.mpf(log_w), mpmath.mpf(log_rho or 0.0)
        lu, rho = lw - lr, mpmath.exp(lr)
        u = mpmath.exp(lu)
        phi = {"fkl": -lu, "rkl": u * lu, "ufkl": u - 1 - lu, "urkl": u * lu - u + 1}[divergence]
        kl = float(rho * phi)
    old = torch.zeros(1, 1)
    out = rpg_loss(old + log_w, old, torch.zeros(1), torch.ones(1, 1), divergence=divergence, style=style, beta=beta,
                   anchor_logp=None if log_rho is None else old + log_rho)  # fmt: skip
    assert out.metrics["loss/kl"].item() == pytest.approx(min(beta * kl, 1e30), rel=1e-5)
    assert out.metrics[f"kl/{divergence}"].item() == pytest.approx(min(kl, 1e30), rel=1e-5)
    if style == "differentiable":  # the loss is the KL part alone
        assert abs(out.metrics["loss/policy"].item()) <= 1e-6 * out.loss.item()


@pytest.mark.parametrize("style", ["differentiable", "reinforce"])
@pytest.mark.parametrize("log_w, adv, level, dtype", [
    (89.0, -0.5, "token", torch.float32),  # w = e^89 overflows, w A = -2.2e38 does not: refused
    (710.0, -0.5, "sequence", torch.float64),  # over two tokens
    (-119.0, 2e28, "token", torch.float32),  # w underflows to 0, w A = 4.2e-24 does not: loss and gradient 0
    (-100.0, 1e10, "sequence", torch.float32),  # w = 3.7e-44 is denormal: w A was 2% off
])  # fmt: skip
def test_rpg_unclipped_ratio_where_w_alone_leaves_the_dtype(style, log_w, adv, level, dtype):
    """clip=None, beta = 0: the unit's w A (differentiable: the loss -w A; REINFORCE: the coefficient of -logp) was
    formed as exp(log w) x A, refused where w alone overflows while w A fits (|A| < 1) and 0 or a few bits off where
    w underflows under a large A. Reference: mpmath at 50 digits; the loss -w A (REINFORCE: -w A sum logp) and the
    gradient -w A on each of the unit's tokens (normalizer 1, seq-mean-token-sum)."""
    mpmath = pytest.importorskip("mpmath")
    T = 1 if level == "token" else 2
    old = torch.full((1, T), -0.25 - log_w / T, dtype=dtype)
    lp = torch.full((1, T), -0.25, dtype=dtype, requires_grad=True)
    with mpmath.workdps(50):
        lw = sum(mpmath.mpf(a) - mpmath.mpf(b) for a, b in zip(lp[0].tolist(), old[0].tolist(), strict=True))
        wa = mpmath.exp(lw) * adv
        want_loss = float(-wa if style == "differentiable" else -wa * sum(mpmath.mpf(v) for v in lp[0].tolist()))
        want_grad = float(-wa)
    assert torch.finfo(dtype).tiny < abs(want_grad) < torch.finfo(dtype).max
    out = rpg_loss(lp, old, torch.tensor([adv], dtype=dtype), torch.ones(1, T), divergence="rkl", style=style,
                   beta=0.0, level=level, agg="seq-mean-token-sum", normalizer=1)  # fmt: skip
    out.loss.backward()
    rel = 1e-6 if dtype == torch.float32 else 1e-12
    assert out.loss.item() == pytest.approx(want_loss, rel=rel, abs=0.0)
    assert lp.grad[0].tolist() == pytest.approx([want_grad] * T, rel=rel, abs=0.0)


def test_meta_tensors_are_named_in_one_line():
    """A probe's: log-probs of a model built on the meta device and never loaded reached the losses, which failed
    with torch's "Tensor.item() cannot be called on meta tensors" (kl_penalty returned a meta tensor)."""
    meta, cpu = torch.zeros(2, 3, device="meta"), torch.zeros(2, 3)
    adv, mask = torch.zeros(2), torch.ones(2, 3)
    calls = {
        "logp": lambda: rpg_loss(meta, cpu, adv, mask, divergence="urkl", style="reinforce", beta=0.1),
        "old_logp": lambda: ppo_loss(cpu, meta, adv, mask),
        "ref_logp": lambda: kl_penalty(cpu, meta, "k3"),
        "per_token": lambda: aggregate(meta, mask),
        "normalizer": lambda: aggregate(cpu, mask, normalizer=torch.tensor(2.0, device="meta")),
        "rewards": lambda: ADVANTAGES.get("grpo")(torch.zeros(2, device="meta"), torch.tensor([0, 0]), mask),
        "values": lambda: whiten(meta, mask),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=f"^{name} is a meta tensor") as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("divergence", ["rkl", "ufkl", "urkl"])
@pytest.mark.parametrize("clip", [None, "dual"])
@pytest.mark.parametrize("log_w, adv, beta, dtype", [
    (705.0, 0.0, 1e-300, torch.float64),  # beta rho phi(u) = 1e9: loss/kl read 1.0 (the row bounded at 1e300 first)
    (700.0, 0.0, 1e-10, torch.float64),  # loss/policy read 1e30 for 0
    (700.0, 1e-290, 1e-10, torch.float64),  # a policy part of -1e14 under a KL part of 7e296
    (80.0, 1e-30, 1e-4, torch.float32),  # -5.5e4 under 4.4e32: total - loss/kl read 2e25
])  # fmt: skip
def test_rpg_separate_kl_past_the_row_limit_keeps_both_loss_metrics(divergence, clip, log_w, adv, beta, dtype):
    """The differentiable loss as a policy term plus a separate KL term (clip=None; kl_in_clip=False), where beta rho
    phi(u) passes 1e300 before beta or the policy term is below the KL term's rounding: loss/kl took each row's rho
    phi(u) bounded at 1e300 and then beta (1.0 for 1.06e9 at log w = 705, beta = 1e-300), and loss/policy = total -
    loss/kl kept the difference, or the rounding of two numbers near 1e296 (1e30 for a policy part of 0). Reference:
    mpmath at 50 digits: beta phi(w) and the policy term -A w (-A min(w, 1 + eps_high) clipped), saturated at 1e30."""
    mpmath = pytest.importorskip("mpmath")
    old = torch.full((1, 1), -0.5, dtype=dtype)
    lp = (old + log_w).requires_grad_()
    with mpmath.workdps(50):
        lw = mpmath.mpf(lp.item()) - mpmath.mpf(old.item())
        w = mpmath.exp(lw)
        phi = {"rkl": w * lw, "ufkl": w - 1 - lw, "urkl": w * lw - w + 1}[divergence]
        want_kl = float(beta * phi)
        want_policy = float(-mpmath.mpf(adv) * (w if clip is None else mpmath.mpf(1.28)))
    kw = {} if clip is None else {"kl_in_clip": False}
    out = rpg_loss(lp, old, torch.tensor([adv], dtype=dtype), torch.ones(1, 1), divergence=divergence,
                   style="differentiable", beta=beta, clip=clip, **kw)  # fmt: skip
    out.loss.backward()
    assert math.isfinite(out.loss.item()) and math.isfinite(lp.grad.item())
    rel = 1e-6 if dtype == torch.float32 else 1e-12
    assert out.metrics["loss/kl"].item() == pytest.approx(min(want_kl, 1e30), rel=rel, abs=0.0)
    assert out.metrics["loss/policy"].item() == pytest.approx(want_policy, rel=rel, abs=0.0)


def _bound_calls(bound: float | None) -> dict[str, object]:
    """Each clamp's or clip's positive bound (None: off, or its no-op value), applied to one float32 batch."""
    g = torch.Generator().manual_seed(3)
    lp = (torch.randn(3, 4, generator=g) - 2).requires_grad_()
    old, ref = lp.detach() + 0.3 * torch.randn(3, 4, generator=g), lp.detach() + torch.randn(3, 4, generator=g)
    adv, mask = torch.tensor([1.0, -2.0, 0.5]), torch.ones(3, 4)
    sep = dict(divergence="rkl", style="differentiable", beta=0.1, clip="dual", kl_in_clip=False)
    big = 1e30 if bound is None else bound  # a clip range that binds nothing either
    return {
        "max_log_w": lambda: rpg_loss(lp, old, adv, mask, **sep, max_log_w=bound),
        "kl_value_clamp": lambda: rpg_loss(lp, old, adv, mask, **sep, kl_value_clamp=bound),
        "clip_c": lambda: ppo_loss(lp, old, adv, mask, clip_c=bound),
        "eps_high": lambda: ppo_loss(lp, old, adv, mask, eps_high=big),
        "kl_clamp": lambda: ppo_loss(lp, old, adv, mask, kl="k3", beta=0.1, ref_logp=ref, kl_clamp=bound),
        "value_clamp": lambda: kl_penalty(lp, ref, "k3", value_clamp=bound, log_ratio_clamp=bound),
    }


@pytest.mark.parametrize("name", list(_bound_calls(None)))
def test_a_bound_past_float32_s_largest_number_binds_nothing(name):
    """A clamp's or clip's bound above float32's largest number (max_log_w, kl_value_clamp, clip_c, eps_high,
    kl_clamp, the KL penalty's clamps: 1e39 or 1e300) met a float32 tensor and raised torch's RuntimeError ("value
    cannot be converted to type float without overflow"). It binds no finite value: the loss, its gradient and the
    per-token values are those of the bound off (or 1e30, a bound float32 holds), the metrics to float32's rounding."""
    want = _bound_calls(None)[name]()
    for bound in (1e39, 1e300):
        got = _bound_calls(bound)[name]()
        if isinstance(got, torch.Tensor):
            assert torch.equal(got, want)
            continue
        assert torch.equal(got.loss, want.loss) and torch.equal(got.per_token, want.per_token)
        for k, v in want.metrics.items():  # a clamped KL's metrics come from its float32 term, not float64's
            assert got.metrics[k].item() == pytest.approx(v.item(), rel=1e-6, abs=0.0), k


def test_rpg_dual_clip_refuses_a_beta_past_float32_in_one_line():
    """beta above float32's largest number with the differentiable dual clip and the KL inside it (A_hat = A - beta
    phi(u)/u, formed in the loss's dtype) raised torch's RuntimeError ("value cannot be converted to type float without
    overflow"); a one-line ValueError naming beta now. In float64 the same beta gives a finite loss."""
    old = torch.full((1, 2), -1.2)
    for divergence in ("fkl", "rkl", "ufkl", "urkl"):
        for analogue in ("exact", "paper") if divergence in ("rkl", "urkl") else ("exact",):  # paper fkl: KL apart
            kw = dict(divergence=divergence, style="differentiable", beta=1e39, clip="dual", analogue=analogue)
            with pytest.raises(ValueError, match=r"^beta 1e\+39 is past torch.float32's largest number") as info:
                rpg_loss(old + 0.2, old, torch.tensor([1.0]), torch.ones(1, 2), **kw)
            assert "\n" not in str(info.value)
            out = rpg_loss((old + 0.2).double(), old.double(), torch.tensor([1.0]).double(), torch.ones(1, 2), **kw)
            assert math.isfinite(out.loss.item())


@pytest.mark.parametrize("divergence, style, clip, log_w, adv, beta", [
    ("fkl", "differentiable", None, 0.2, 1.0, 1e308),  # beta |u phi'(u)| = 1e308 per token, 2e308 over two
    ("rkl", "differentiable", None, 0.2, 1.0, 1e308),
    ("urkl", "reinforce", "dual", 60.0, 1e300, 1e300),  # |w A| = 5e321, |C| = 3e323 (log w capped at 50): clipped
])  # fmt: skip
def test_kl_grad_share_where_its_parts_pass_float64(divergence, style, clip, log_w, adv, beta):
    """kl/grad_share = sum|C| / (sum|w A| + sum|C|), C = -beta rho u phi'(u), summed in float64: where a part or
    their sum passed float64's largest under a finite loss the metric was NaN (inf / inf), which `reported` passes
    on: a finite loss came with a NaN metric. Reference: the same ratio in mpmath (log w capped at 50, as the
    metric's docstring says)."""
    mpmath = pytest.importorskip("mpmath")
    old = torch.full((1, 2), -1.0, dtype=torch.float64)
    lp = (old + log_w).requires_grad_()
    with mpmath.workdps(50):
        lw = mpmath.mpf(lp[0, 0].item()) - mpmath.mpf(old[0, 0].item())
        w = mpmath.exp(min(lw, 50))
        u_dphi = {"fkl": -1, "rkl": w * (mpmath.log(w) + 1), "urkl": w * mpmath.log(w)}[divergence]
        kl, reward = beta * abs(u_dphi), w * abs(mpmath.mpf(adv))
        want = float(kl / (kl + reward))
    try:
        out = rpg_loss(lp, old, torch.tensor([adv], dtype=torch.float64), torch.ones(1, 2), divergence=divergence,
                       style=style, beta=beta, clip=clip)  # fmt: skip
    except LossOverflow:
        pytest.fail("the loss fits float64")
    assert out.metrics["kl/grad_share"].item() == pytest.approx(want, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("clip", [None, "dual"])
def test_a_clamped_separate_kl_refuses_a_beta_past_float32_in_one_line(clip):
    """kl_value_clamp's clamped KL term is added times beta in the loss's dtype: beta 1e39 in float32 raised torch's
    RuntimeError ("value cannot be converted to type float without overflow"); a one-line ValueError naming beta now.
    In float64 the same call gives beta x the clamped term: 1e39 x clamp(rkl's w log w at log w = 0.2) = 2.44e38."""
    old = torch.full((1, 1), -1.2)
    kw = dict(divergence="rkl", style="differentiable", beta=1e39, clip=clip, kl_in_clip=False, kl_value_clamp=10.0)
    with pytest.raises(ValueError, match=r"^beta 1e\+39 is past torch.float32's largest number") as info:
        rpg_loss(old + 0.2, old, torch.tensor([0.0]), torch.ones(1, 1), **kw)
    assert "\n" not in str(info.value)
    out = rpg_loss((old + 0.2).double(), old.double(), torch.tensor([0.0]).double(), torch.ones(1, 1), **kw)
    lw = (old + 0.2).double().item() - old.double().item()
    assert out.loss.item() == pytest.approx(1e39 * math.exp(lw) * lw, rel=1e-12)


def test_an_overflow_caused_by_beta_names_beta():
    """beta 1e308 with w = e^0.2 overflowed the loss, and the message blamed the ratio alone ("log w per token in
    [0.2, 0.2]: a ratio is too extreme"): it gives beta and the largest |A| beside log w, and names beta as a cause."""
    logp = torch.full((1, 2), -1.0, dtype=torch.float64, requires_grad=True)
    old, adv = torch.full((1, 2), -1.2, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
    with pytest.raises(LossOverflow) as e:
        rpg_loss(logp, old, adv, torch.ones(1, 2), divergence="fkl", style="reinforce", beta=1e308, clip=None)
    message = str(e.value)
    assert "beta = 1e+308, |A| up to 1)" in message and "a smaller beta" in message and "\n" not in message


@pytest.mark.parametrize("divergence", ["fkl", "ufkl", "urkl"])
@pytest.mark.parametrize("log_rho, dtype", [(20.0, torch.float32), (40.0, torch.float32), (40.0, torch.float64),
                                            (600.0, torch.float64), (-30.0, torch.float32)])  # fmt: skip
@pytest.mark.parametrize("log_ws", [(0.1, -0.05, 0.2, -0.1), (0.1, -0.3, 2.5, -0.05)])  # all within the clip; two out
def test_rpg_exact_dual_clip_loss_policy_with_a_far_anchor(divergence, log_rho, dtype, log_ws):
    """The differentiable dual clip with the exact analogue and an anchor far above the sampler (rho = e^40):
    loss/policy was total - loss/kl and kept their rounding (float32, rho = e^40: 7.8e8 for a policy part of -0.72;
    float64: -4.0).
    Reference, per unit in mpmath at 50 digits: the unit loss less beta rho phi(u), -A w unclipped and -A_hat clamp(w)
    - beta rho phi(u) clipped (A_hat = A - beta phi(u) / u, clamp(w) at the loss's bounds), token-mean."""
    mpmath = pytest.importorskip("mpmath")
    beta, adv = 0.1, [0.7, -0.3, 0.7, -0.3]
    old = torch.full((1, 4), -1.0, dtype=dtype)
    lp = (old + torch.tensor([log_ws], dtype=dtype)).requires_grad_()
    anchor = old + log_rho

    def bound(b: float, inward: int):  # the clip's bound as the loss takes it: its log in the dtype, one ulp inside
        x = torch.tensor(math.log(b), dtype=dtype)
        return mpmath.exp(torch.nextafter(x, torch.tensor(inward * math.inf, dtype=dtype)).item())

    with mpmath.workdps(50):
        want = 0
        for a, p, q, s in zip(adv, lp[0].tolist(), old[0].tolist(), anchor[0].tolist(), strict=True):
            a, lw, lr = mpmath.mpf(torch.tensor(a, dtype=dtype).item()), mpmath.mpf(p) - q, mpmath.mpf(s) - q
            w, u = mpmath.exp(lw), mpmath.exp(lw - lr)
            phi = {"fkl": -mpmath.log(u), "ufkl": u - 1 - mpmath.log(u), "urkl": u * mpmath.log(u) - u + 1}[divergence]
            a_hat = a - beta * phi / u
            wc = min(w, bound(1.28, -1)) if a_hat >= 0 else min(max(w, bound(0.8, 1)), bound(10.0, -1))
            want += -a * w if wc == w else -a_hat * wc - beta * mpmath.exp(lr) * phi
        want = float(want / 4)
    out = rpg_loss(lp, old, torch.tensor([adv], dtype=dtype), torch.ones(1, 4), divergence=divergence,
                   style="differentiable", beta=beta, clip="dual", anchor_logp=anchor)  # fmt: skip
    out.loss.backward()
    assert math.isfinite(out.loss.item()) and bool(torch.isfinite(lp.grad).all())
    rel = 1e-6 if dtype == torch.float32 else 1e-12
    assert out.metrics["loss/policy"].item() == pytest.approx(max(min(want, 1e30), -1e30), rel=rel, abs=0.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.complex64])
def test_helpers_take_the_losses_dtypes(dtype):
    """The KL helpers, aggregate, the advantage estimators and whiten took float16 / bfloat16 (and integers: a float32
    result; complex: torch's "isposinf does not support complex inputs") where the losses refuse them in one line
    naming the argument and its dtype; they refuse them so now, and two log-probs of different float dtypes as the
    losses do (the result was promoted to float64)."""
    x, mask = torch.zeros(2, 3, dtype=dtype), torch.ones(2, 3)
    f32, f64 = torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.float64)
    group = torch.tensor([0, 0])
    calls = [
        ("logp", lambda: kl_penalty(x, x, "k3")),
        ("logp", lambda: grpo_kl_term(x, x, x, corrected=True)),
        ("logp", lambda: anchored_kl_term(x, x, x, direction="forward")),
        ("per_token", lambda: aggregate(x, mask)),
        ("values", lambda: whiten(x, mask)),
        *[("rewards", lambda k=k: ADVANTAGES.get(k)(x[:, 0], group, mask)) for k in ADVANTAGES.names()],
    ]
    for name, call in calls:
        with pytest.raises(
            ValueError, match=rf"^{name} has dtype {dtype}; .* needs float32 or float64 .*\(upcast "
        ) as e:
            call()
        assert "\n" not in str(e.value)
    mixed = {
        "ref_logp": lambda: kl_penalty(f32, f64, "k1"),
        "old_logp": lambda: grpo_kl_term(f32, f32, f64, corrected=True),
        "sampler_logp": lambda: anchored_kl_term(f64, f64, f32, direction="reverse"),
    }
    for name, call in mixed.items():
        with pytest.raises(ValueError, match=rf"^{name} has dtype torch.float\d\d but logp has torch.float\d\d; pass "):
            call()
    assert grpo_kl_term(f32, f32, f64, corrected=False).dtype == torch.float32  # old_logp unused uncorrected


@pytest.mark.parametrize(
    "term",
    [lambda lp, a, s: anchored_kl_term(lp, a, s, direction="reverse"),
     lambda lp, a, s: grpo_kl_term(lp, a, s, corrected=True),
     lambda lp, a, s: kl_penalty(lp, a + 0.3, "mse") * 3e38],  # lr = 1.2: value 0.72 x 3e38, gradient 1.2 x 3e38
    ids=["anchored-reverse", "grpo-corrected", "kl_penalty-mse-scaled"],
)  # fmt: skip
def test_a_kl_helper_whose_finite_term_has_an_overflowing_gradient_raises_in_backward(term):
    """The public KL helpers had no `finite_gradient` net: w k3(pi_a / pi_theta) with w = e^88.5 and the anchor 1.5
    nats below is 2.0e38, finite in float32, while its gradient, (k3 + 1 - pi_a / pi_theta) w = 4.1e38 in a float64
    reference, reached logp as inf. Backward raises LossOverflow in one line naming the helper; float64 is unchanged."""
    sampler, anchor = torch.tensor([-88.5]), torch.tensor([-1.5])
    ref = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    term(ref, anchor.double(), sampler.double()).sum().backward()
    assert F32_MAX < ref.grad.abs().item() < math.inf
    lp = torch.zeros(1, requires_grad=True)
    value = term(lp, anchor, sampler)
    assert torch.isfinite(value).all(), value
    with pytest.raises(LossOverflow, match=r"gradient overflows torch.float32 under a finite loss") as info:
        value.sum().backward()
    assert "\n" not in str(info.value) and "mask=" in str(info.value)  # a helper has no advantage or normalizer


@pytest.mark.parametrize("kl", ["k3", "k3_corrected"])
@pytest.mark.parametrize("far", [False, True])
def test_ppo_loss_guards_its_gradient_once_under_its_own_name(kl, far, monkeypatch):
    """The KL helpers' own guard ran inside ppo_loss's, which already guards logp: a second host sync in every
    backward with a KL term, and an overflow named "grpo_kl_term's gradient", a function the caller never called.
    One guard, named ppo_loss, whichever form the KL term takes (`far`: past the dtype alone, beta taken inside)."""
    from rpgrl.objectives import checks

    names = []
    backward = checks._FiniteGradient.backward

    def counted(ctx, grad):
        names.append(ctx.loss)
        return backward(ctx, grad)

    monkeypatch.setattr(checks._FiniteGradient, "backward", staticmethod(counted))
    lp = torch.full((1, 2), -1.0, requires_grad=True)
    ref = torch.tensor([[-0.5, 90.0 if far else 0.0]])
    kw = dict(ref_logp=ref, kl=kl, beta=1e-3 if far else 0.1)
    ppo_loss(lp, lp.detach() - 0.1, torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool), **kw).loss.backward()
    assert names == ["ppo_loss"] and torch.isfinite(lp.grad).all()
    names.clear()
    one = torch.zeros(1, 1, requires_grad=True)  # beta k3(1.5) = 2.0e38 fits float32, its gradient 3.5e38 does not
    loss = ppo_loss(one, one.detach(), torch.tensor([0.0]), torch.ones(1, 1, dtype=torch.bool),
                    ref_logp=torch.full((1, 1), 1.5), kl="k3", beta=1e38).loss  # fmt: skip
    with pytest.raises(LossOverflow, match=r"^ppo_loss's gradient overflows torch.float32 under a finite loss"):
        loss.backward()
