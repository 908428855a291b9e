"""reduce.py: aggregation modes against plain loops, the normalizer under micro-batching, padding garbage."""

from __future__ import annotations

import math

import pytest
import torch

from rpgrl.objectives import ppo_loss, rpg_loss
from rpgrl.objectives.reduce import AGG_MODES, aggregate, aggregate_rows, masked_mean, masked_sum

DT = torch.float64


def data(B=5, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=g, dtype=DT)
    lens = torch.tensor([1, 6, 3, 4, 2])[:B]
    mask = (torch.arange(T)[None, :] < lens[:, None]).to(DT)
    return x, mask, lens


def loop_reference(x, mask, lens, agg):
    rows = [sum(x[i, t].item() for t in range(int(lens[i]))) for i in range(x.shape[0])]
    if agg == "token-mean":
        return sum(rows) / int(lens.sum())
    if agg == "seq-mean-token-sum":
        return sum(rows) / len(rows)
    return sum(r / int(n) for r, n in zip(rows, lens, strict=True)) / len(rows)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_modes_match_loops(agg):
    x, mask, lens = data()
    assert math.isclose(aggregate(x, mask, agg).item(), loop_reference(x, mask, lens, agg), rel_tol=1e-13)
    assert math.isclose(aggregate(x, mask.bool(), agg).item(), loop_reference(x, mask, lens, agg), rel_tol=1e-13)


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("normalizer", [None, 7.0])
def test_aggregate_rows_matches_loops(agg, normalizer):
    x, mask, lens = data()
    rows = torch.where(mask.bool(), x, 0.0).sum(-1)  # (B,) token-sums
    got = aggregate_rows(rows, mask.bool(), agg, normalizer).item()
    ref = loop_reference(x, mask, lens, agg)
    if normalizer is not None:  # the loop divides by the local count
        ref *= (int(lens.sum()) if agg == "token-mean" else len(lens)) / normalizer
    assert math.isclose(got, ref, rel_tol=1e-13)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_global_normalizer_makes_micro_batches_add_up(agg):
    x, mask, _ = data()
    n = mask.sum() if agg == "token-mean" else x.shape[0]
    parts = sum(aggregate(x[s], mask[s], agg, normalizer=n) for s in (slice(0, 2), slice(2, 5)))
    assert torch.allclose(parts, aggregate(x, mask, agg), rtol=1e-13)


def test_padding_garbage_never_leaks():
    x, mask, lens = data()
    junk = torch.where(mask.bool(), x, torch.tensor(math.nan, dtype=DT))
    junk[0, -1] = math.inf
    xr = junk.clone().requires_grad_(True)
    for agg in AGG_MODES:
        assert math.isclose(aggregate(xr, mask, agg).item(), loop_reference(x, mask, lens, agg), rel_tol=1e-13)
        (g,) = torch.autograd.grad(aggregate(xr, mask, agg), xr)
        assert torch.isfinite(g).all() and (g[~mask.bool()] == 0).all()
    assert math.isclose(masked_sum(junk, mask).item(), x[mask.bool()].sum().item(), rel_tol=1e-13)
    assert torch.allclose(masked_mean(junk, mask, dim=-1), (x * mask).sum(-1) / lens)


def test_unknown_mode():
    x, mask, _ = data()
    with pytest.raises(ValueError, match="unknown agg 'mean'"):
        aggregate(x, mask, "mean")


@pytest.mark.parametrize(
    "normalizer",
    # a probe's: True counted as 1, a complex count and an int past float's range raised torch's / math's errors
    [0, -3.0, math.nan, math.inf, torch.tensor(0.0), torch.ones(2), "8", torch.tensor(True), torch.tensor(4 + 0j),
     10**400, 2**63, torch.tensor(math.inf), torch.tensor(math.nan)],  # a tensor inf gave a loss of 0
)  # fmt: skip
def test_normalizer_must_be_one_positive_finite_count(normalizer):
    x, mask, _ = data()
    with pytest.raises(ValueError, match="normalizer must be") as e:
        aggregate(x, mask, "token-mean", normalizer)
    assert len(str(e.value)) < 200
    assert aggregate(x, mask, "token-mean", torch.tensor(4.0)) == aggregate(x, mask, "token-mean", 4)
    np = pytest.importorskip("numpy")
    assert aggregate(x, mask, "token-mean", np.int64(4)) == aggregate(x, mask, "token-mean", 4)  # refused before


def test_masked_reductions_refuse_a_mask_of_another_shape_and_count_the_positions_set():
    """A (T,) mask broadcast over (B, T) values summed B times its positions but counted them once (mean 2.0 of
    ones), and a mask of 2.0 counted each position twice (mean 0.5): the shapes must match, and the positions set
    (nonzero) are counted."""
    x = torch.ones(2, 3)
    for fn in (masked_sum, masked_mean):
        with pytest.raises(ValueError, match=r"mask has shape \(3,\) but must have the shape of x \(2, 3\)"):
            fn(x, torch.ones(3))
        with pytest.raises(ValueError, match="must be tensors"):
            fn([1.0, 2.0], torch.ones(2))
    assert masked_mean(x, torch.full((2, 3), 2.0)) == 1.0
    assert masked_mean(torch.tensor([[1.0, 5.0, 9.0]]), torch.tensor([[3.0, 0.0, 1.0]])) == 5.0  # (1 + 9) / 2
    assert torch.equal(masked_mean(x, torch.zeros(2, 3), dim=-1), torch.zeros(2))  # empty -> 0


@pytest.mark.parametrize("agg", AGG_MODES)
def test_aggregate_of_no_response_and_a_one_element_normalizer(agg):
    """No response (B = 0) in the seq-mean modes was 0 / 0 = NaN, as token-mean with a normalizer is 0; a normalizer
    of shape (1,) gave a (1,) loss. aggregate_rows agrees with aggregate, an empty row included (it was NaN)."""
    if agg != "token-mean":
        assert aggregate(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.bool), agg) == 0
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    out = aggregate(per_token, mask, agg, normalizer=torch.tensor([2.0]))
    assert out.shape == () and out == aggregate(per_token, mask, agg, normalizer=2.0)
    row = masked_sum(per_token, mask, dim=-1)
    for normalizer in (None, 4.0):
        if agg == "token-mean" and normalizer is None:
            continue
        assert aggregate_rows(row, mask, agg, normalizer) == aggregate(per_token, mask, agg, normalizer)


@pytest.mark.parametrize("mask_dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int8])
@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("n", [257, 2049, 70000])
def test_aggregate_counts_a_numeric_mask_exactly(mask_dtype, agg, n):
    """The token counts were the mask's own sums, in its dtype: a float16 mask of 70,000 ones summed to inf (token-mean
    0.0 for 1.0), a bfloat16 one of 257 to 256 (1.0039 for 1.0), and a float64 mask made a float32 loss float64.
    Reference: n tokens of 1 (token-mean, seq-mean-token-mean: 1; seq-mean-token-sum: n), in per_token's dtype."""
    per_token = torch.ones(1, n, requires_grad=True)
    out = aggregate(per_token, torch.ones(1, n, dtype=mask_dtype), agg)
    assert out.dtype == torch.float32 and out.item() == (n if agg == "seq-mean-token-sum" else 1.0)
    out.backward()
    want = 1.0 if agg == "seq-mean-token-sum" else 1.0 / n
    assert per_token.grad.dtype == torch.float32 and torch.allclose(per_token.grad, torch.full((1, n), want))


@pytest.mark.parametrize("agg", AGG_MODES)
def test_a_float64_normalizer_leaves_the_loss_in_its_dtype(agg):
    """A 0-dim float64 tensor normalizer (a count gathered in float64) made aggregate's, rpg_loss's and ppo_loss's
    float32 loss float64 (two 0-dim tensors promote). The loss is in per_token's dtype, its value the float64
    quotient rounded once: reference sum / 7 in float64, then float32."""
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(2, 3, generator=g).requires_grad_()
    old, adv, mask = torch.randn(2, 3, generator=g), torch.randn(2, generator=g), torch.ones(2, 3)
    n64 = torch.tensor(7.0, dtype=torch.float64)
    rows = lp.detach().double().sum(-1) / (3 if agg == "seq-mean-token-mean" else 1)
    want = torch.tensor(rows.sum().item() / 7.0, dtype=torch.float64).float()
    out = aggregate(lp, mask, agg, normalizer=n64)
    assert out.dtype == torch.float32 and out.item() == pytest.approx(want.item(), rel=1e-6)
    rpg = dict(divergence="urkl", style="reinforce", beta=0.1, agg=agg)
    calls = (lambda n: rpg_loss(lp, old, adv, mask, **rpg, normalizer=n),
             lambda n: ppo_loss(lp, old, adv, mask, agg=agg, normalizer=n))  # fmt: skip
    for got, ref in ((call(n64), call(7.0)) for call in calls):
        assert got.loss.dtype == torch.float32 and got.loss.item() == pytest.approx(ref.loss.item(), rel=1e-6)


def test_a_normalizer_that_requires_grad_is_refused():
    """A normalizer tensor that required grad (a count computed from a differentiable tensor) took the loss's
    gradient, -loss / N per unit of N, where every option tensor that requires grad is refused (`options.scalar`).
    One line for aggregate and the losses; its detached value gives the loss of the plain count (reference 6 / 4)."""
    n = torch.tensor(4.0, requires_grad=True)
    mask, lp = torch.ones(2, 3), torch.ones(2, 3, requires_grad=True)
    calls = (lambda m: aggregate(lp, mask, normalizer=m),
             lambda m: rpg_loss(lp, lp.detach(), torch.ones(2), mask, divergence="urkl", style="reinforce", beta=0.1,
                                normalizer=m).loss,
             lambda m: ppo_loss(lp, lp.detach(), torch.ones(2), mask, normalizer=m).loss)  # fmt: skip
    for call in calls:
        with pytest.raises(ValueError, match="^normalizer must be a constant count, got a tensor that requires grad"):
            call(n)
    assert aggregate(lp, mask, normalizer=n.detach()).item() == 6 / 4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_mean_is_summed_in_float32(dtype):
    """masked_mean of 10,000 float16 tens summed to inf (past 65504) before it divided: the mean was inf where 10 is
    exact. Half-precision values are summed in float32 and the mean returned in their dtype, with its gradient."""
    x = torch.full((100, 100), 10.0, dtype=dtype, requires_grad=True)
    mask = torch.ones(100, 100, dtype=torch.bool)
    mask[0, :50] = False
    mean = masked_mean(x, mask)
    assert mean.dtype == dtype and mean.item() == 10.0
    mean.backward()
    expected = mask.to(torch.float64) / mask.sum()
    assert torch.allclose(x.grad.double(), expected, rtol=1e-2, atol=0)
    rows = masked_mean(x.detach(), mask, dim=-1)
    assert rows.dtype == dtype and torch.equal(rows, torch.full((100,), 10.0, dtype=dtype))
