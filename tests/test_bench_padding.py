"""The padding benchmark's baseline (`benchmarks/bench_padding.py`): the same rollout with every response position
valid must be the same computation at the positions that were valid (plus the padding), so that the ratio it reports
measures the padding's cost and nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_padding  # noqa: E402

from rpgrl.models import build_char_tokenizer, build_tiny_model  # noqa: E402
from rpgrl.rollout import token_logprobs  # noqa: E402


def test_all_valid_computes_the_same_log_probs_at_the_valid_positions():
    tok = build_char_tokenizer("0123456789+=")
    model = build_tiny_model(tok, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=1).double()
    prompts = [tok(p)["input_ids"] for p in ("1+2=", "33+4=", "5=", "6+7=")]
    r, mean_len = bench_padding.long_tail_rollout(tok, prompts, T=20)
    assert r.response_mask.shape == (bench_padding.PROMPTS * bench_padding.G, 20)
    assert 2 <= mean_len < 20 and int(r.lengths.max()) == 20 and int(r.lengths.min()) >= 2
    full = bench_padding.all_valid(r)
    assert bool(full.response_mask.all()) and torch.equal(
        full.attention_mask[:, : r.prompt_len], r.attention_mask[:, : r.prompt_len]
    )
    with torch.no_grad():
        got, _ = token_logprobs(model, r)
        want, _ = token_logprobs(model, full)
    keep = r.response_mask.bool()
    torch.testing.assert_close(got[keep], want[keep], rtol=0, atol=1e-12)
    assert (want[~keep] != 0).all()  # the baseline did compute the padding
