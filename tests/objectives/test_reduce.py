"""reduce.py: aggregation modes against plain loops, the normalizer under micro-batching, padding garbage."""

from __future__ import annotations

import math

import pytest
import torch

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


@pytest.mark.parametrize("normalizer", [0, -3.0, math.nan, math.inf, torch.tensor(0.0), torch.ones(2), "8"])
def test_normalizer_must_be_one_positive_finite_count(normalizer):
    x, mask, _ = data()
    with pytest.raises(ValueError, match="normalizer must be"):
        aggregate(x, mask, "token-mean", normalizer)
    assert aggregate(x, mask, "token-mean", torch.tensor(4.0)) == aggregate(x, mask, "token-mean", 4)
