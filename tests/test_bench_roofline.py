"""The roofline benchmark's product replay (`benchmarks/bench_roofline.py`): it must see every weight product of a
phase, forward and backward, and replaying them must compute the same products (the bounds it reports rest on it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_roofline  # noqa: E402


def _mlp():
    g = torch.Generator().manual_seed(0)
    w1 = torch.randn(16, 8, generator=g, requires_grad=True)
    w2 = torch.randn(4, 16, generator=g, requires_grad=True)
    b2 = torch.randn(4, generator=g, requires_grad=True)
    x = torch.randn(5, 8, generator=g)
    return x, w1, w2, b2


def test_record_products_sees_forward_and_backward_products():
    """Two linear layers and a backward: 2 forward products, then the second layer's input gradient and both weight
    gradients (the input needs none): 5 products, each replaying to the value it had."""
    x, w1, w2, b2 = _mlp()

    def step():
        h = torch.relu(torch.nn.functional.linear(x, w1))
        torch.nn.functional.linear(h, w2, b2).square().sum().backward()

    calls = bench_roofline.record_products(step)
    assert len(calls) == 5, [c[0]._schema.name for c in calls]
    shapes = sorted(tuple(c[0](*c[1], **c[2]).shape) for c in calls)
    assert shapes == sorted([(5, 16), (5, 4), (5, 16), (4, 16), (16, 8)])
    first = calls[0][0](*calls[0][1], **calls[0][2])
    assert torch.allclose(first.double(), x.double() @ w1.detach().double().t(), atol=1e-5)


def test_product_share_is_a_share_of_the_whole():
    """A phase of 50 small products between other ops: all 50 are replayed, and the shares are positive fractions
    of the phase's time (below 1.5: timing noise on a shared machine)."""
    x, w1, w2, b2 = _mlp()

    def phase():
        with torch.no_grad():
            y = x
            for _ in range(50):
                y = torch.tanh(torch.nn.functional.linear(y, w1)).sum(-1, keepdim=True).expand(5, 8).contiguous()
        return y

    p = bench_roofline.product_share(phase, reps=3)
    assert p["products"] == 50
    assert 0 < p["share"] < 1.5 and 0 < p["share_fastest_kernels"] < 1.5
    assert p["products_s"] == pytest.approx(p["share"] * p["whole_s"])
