"""Metric reduction, metrics.jsonl truncation on resume, and the final plot."""

import json

import pytest
import torch

from rpgrl.trainer.log import (
    clip_fraction,
    mean_over_steps,
    plot_metrics,
    print0,
    read_metrics,
    reduce_micro,
    to_floats,
    truncate_metrics,
)


def test_reduce_micro_sums_losses_and_weights_means():
    parts = [
        {"loss/policy": torch.tensor(0.25), "clip/frac_high": torch.tensor(0.5)},
        {"loss/policy": torch.tensor(-0.75), "clip/frac_high": torch.tensor(0.0), "kl/x": torch.tensor(2.0)},
    ]
    out = to_floats(reduce_micro(parts, weights=[30.0, 10.0]))
    assert out["loss/policy"] == pytest.approx(-0.5)  # global-normalizer losses add up
    assert out["clip/frac_high"] == pytest.approx(0.5 * 30 / 40)  # token-weighted mean
    assert out["kl/x"] == pytest.approx(2.0)  # present in one micro-batch only
    steps = [{"a": torch.tensor(1.0)}, {"a": torch.tensor(3.0), "b": torch.tensor(5.0)}]
    assert to_floats(mean_over_steps(steps)) == {"a": 2.0, "b": 5.0}


@pytest.mark.parametrize("kl", ["k1", "k3"])
def test_reduce_micro_of_micro_batches_is_the_mini_batch(kl):
    """Micro-batches of a mini-batch, each on the mini-batch's normalizer: reduce_micro of their metrics equals the
    mini-batch's own metrics, the normaliser-based ones (loss/*, kl/penalty) summed and the token means weighted.
    kl/penalty, the aggregated KL term, was averaged like a local mean: 1/3 of the truth over 3 equal micro-batches."""
    from rpgrl.objectives.baselines import ppo_loss

    g = torch.Generator().manual_seed(5)
    B, T = 9, 6
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    old = logp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = logp + 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.arange(T)[None, :] < torch.randint(1, T + 1, (B,), generator=g)[:, None]).double()
    opts = dict(kl=kl, beta=0.05, ref_logp=ref, eps_low=0.1, eps_high=0.1, clip_c=1.2)
    full = ppo_loss(logp, old, adv, mask, normalizer=mask.sum(), **opts).metrics
    parts, weights = [], []
    for rows in torch.arange(B).split(3):
        out = ppo_loss(logp[rows], old[rows], adv[rows], mask[rows], normalizer=mask.sum(),
                       **(opts | {"ref_logp": ref[rows]}))  # fmt: skip
        parts.append(out.metrics)
        weights.append(float(mask[rows].sum()))
    reduced = reduce_micro(parts, weights)
    assert abs(full["kl/penalty"]) > 0.01 and full["clip/frac_low"] + full["clip/frac_high"] > 0  # nothing vacuous
    assert reduced.keys() == full.keys()
    for key, value in full.items():
        assert torch.allclose(reduced[key].double(), value.double(), rtol=1e-6, atol=1e-9), key


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_reduce_micro_of_rpg_micro_batches_is_the_mini_batch(level):
    """rpg_loss's per-sequence metrics (kl/<divergence>, and at level sequence the clip fractions and log_w/abs_mean)
    are means over rows: combined by sequence count they equal the mini-batch's own; by token count (as before) they
    were off whenever micro-batches differ in response length. kl/grad_share, a ratio of sums, is left out."""
    from rpgrl import metrics as M
    from rpgrl.objectives.rpg import rpg_loss

    g = torch.Generator().manual_seed(7)
    B, T = 8, 7
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    old = logp + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    lengths = torch.tensor([1, 2, 1, 2, 7, 6, 7, 5])  # short responses first: micro-batches of unequal token counts
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    opts = dict(divergence="urkl", style="reinforce", level=level, clip="dual", beta=0.05, eps_low=0.1, eps_high=0.1)
    full = rpg_loss(logp, old, adv, mask, normalizer=mask.sum(), **opts).metrics
    parts, tokens, counts = [], [], []
    for rows in torch.arange(B).split(4):
        parts.append(rpg_loss(logp[rows], old[rows], adv[rows], mask[rows], normalizer=mask.sum(), **opts).metrics)
        tokens.append(float(mask[rows].sum()))
        counts.append(float(len(rows)))
    per_seq = M.per_sequence("rpg", "urkl", level)
    reduced = reduce_micro(parts, tokens, counts, per_seq)
    by_tokens = reduce_micro(parts, tokens)
    assert full[M.CLIP_LOW] + full[M.CLIP_HIGH] + full[M.CLIP_DUAL] > 0  # the clip fractions are not vacuous
    assert reduced.keys() == full.keys()
    for key, value in full.items():
        if key != M.KL_GRAD_SHARE:
            assert torch.allclose(reduced[key].double(), value.double(), rtol=1e-6, atol=1e-9), key
    assert not torch.allclose(by_tokens["kl/urkl"].double(), full["kl/urkl"].double(), rtol=1e-3)  # the old bias
    # kl/grad_share, a ratio of sums, is combined as a mean over its units: sequences at level sequence
    weights = counts if level == "sequence" else tokens
    share = sum(w * float(p[M.KL_GRAD_SHARE]) for w, p in zip(weights, parts, strict=True)) / sum(weights)
    assert float(reduced[M.KL_GRAD_SHARE]) == pytest.approx(share, rel=1e-6)
    assert M.per_sequence("grpo", "urkl", level) == frozenset()  # the PPO family's metrics are token means


def test_extremes_are_reduced_as_extremes():
    """log_w/max is the largest log-ratio of the step, not an average of the micro-batches' or mini-batches'."""
    parts = [
        {"log_w/max": torch.tensor(0.1), "log_w/min": torch.tensor(-0.3), "log_w/abs_mean": torch.tensor(0.2)},
        {"log_w/max": torch.tensor(0.9), "log_w/min": torch.tensor(-0.1), "log_w/abs_mean": torch.tensor(0.4)},
    ]
    out = to_floats(reduce_micro(parts, weights=[1.0, 3.0]))
    assert out == pytest.approx({"log_w/max": 0.9, "log_w/min": -0.3, "log_w/abs_mean": 0.35})
    steps = [{"log_w/max": torch.tensor(0.0), "log_w/min": torch.tensor(0.0)},
             {"log_w/max": torch.tensor(0.5), "log_w/min": torch.tensor(-0.7)}]  # fmt: skip
    assert to_floats(mean_over_steps(steps)) == pytest.approx({"log_w/max": 0.5, "log_w/min": -0.7})


def test_clip_fraction_sums_the_clipped_rows():
    row = {"clip/frac_low": 0.01, "clip/frac_high": 0.02, "clip/frac_dual": 0.005, "clip/frac_kl_clamp": 0.5}
    assert clip_fraction(row) == pytest.approx(0.035)  # the three rows of the dual clip; guards are not rows
    assert clip_fraction({"reward/mean": 1.0}) == 0.0


def test_truncate_metrics_keeps_each_step_once(tmp_path):
    p = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "reward/mean": s / 10} for s in range(1, 6)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 6, "rew')  # torn last line from a kill
    assert [r["step"] for r in read_metrics(p)] == [1, 2, 3, 4, 5]
    truncate_metrics(p, 3)
    assert read_metrics(p) == rows[:3]
    assert p.read_text().endswith("\n")


def test_plot_writes_png(tmp_path):
    rows = [{"step": s, "reward/mean": s * 0.1, "response/length_mean": 10 + s, "clip/frac_low": 0.0} for s in (1, 2)]
    rows[-1]["eval/accuracy"] = 0.5
    out = plot_metrics(rows, tmp_path / "curves.png")
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_metrics([], tmp_path / "none.png") is None


def test_print0_escapes_what_the_stream_cannot_encode():
    """A run directory whose name holds a non-UTF-8 byte (a lone surrogate in Python) is printed escaped on a
    strict UTF-8 stdout, where printing "resolved config: ..." raised UnicodeEncodeError after config.json was
    written (a plain rerun was then refused as a run to --resume)."""
    import io

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
    print0("resolved config:", "t1\udcff/config.json", "é", file=stream)
    stream.flush()
    assert raw.getvalue().decode("utf-8") == "resolved config: t1\\udcff/config.json é\n"
