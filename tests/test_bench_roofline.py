"""The roofline benchmark's product replay (`benchmarks/bench_roofline.py`): it must see every weight product of a
phase, forward and backward, and replaying them must compute the same products (the bounds it reports rest on it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_roofline  # noqa: E402

from rpgrl.decode import onednn_available  # noqa: E402

ONEDNN = onednn_available(torch.float32, torch.device("cpu"))


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


def test_record_products_sees_inference_mode_linears_once():
    """Under inference mode (as sampling runs) F.linear reaches the recorder as one `aten::linear`, not split."""
    x, w1, w2, b2 = _mlp()
    with torch.inference_mode():
        calls = bench_roofline.record_products(lambda: torch.nn.functional.linear(x, w1, None))
    assert [c[0]._schema.name for c in calls] == ["aten::linear"]


@pytest.mark.skipif(not ONEDNN, reason="this torch build has no oneDNN")
def test_onednn_alternative_computes_the_same_product():
    """The generous bound's oneDNN stand-in for each product kind (mm, addmm with a bias, linear, a transposed
    right operand) computes what the product computed."""
    x, w1, w2, b2 = _mlp()
    x, w1, w2, b2 = (t.detach() for t in (x, w1, w2, b2))
    h = torch.randn(5, 16)
    products = [
        lambda: torch.mm(x, w1.t()),
        lambda: torch.addmm(b2, h, w2.t()),
        lambda: torch.nn.functional.linear(h, w2, b2),
        lambda: torch.mm(w1, x.t()),
    ]
    for product in products:
        with torch.inference_mode():
            (call,) = bench_roofline.record_products(product)
            alt = bench_roofline._on_onednn(*call)
            assert alt is not None
            assert torch.allclose(alt(), call[0](*call[1], **call[2]), atol=1e-5)


def test_product_share_replays_every_product():
    """A phase of 50 small products between other ops: all 50 are replayed and timed (no bound on the times: this
    machine is shared, and a timed assertion would be flaky)."""
    x, w1, w2, b2 = _mlp()

    def phase():
        with torch.no_grad():
            y = x
            for _ in range(50):
                y = torch.tanh(torch.nn.functional.linear(y, w1)).sum(-1, keepdim=True).expand(5, 8).contiguous()
        return y

    p = bench_roofline.product_share(phase, reps=3)
    assert p["products"] == 50
    assert min(p["whole_s"], p["products_s"], p["fastest_s"]) > 0
