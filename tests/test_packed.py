"""The packed training forward (`rpgrl.packed`) computes the model's own log-probs and gradients: against one
unpadded forward per row of the `transformers` model (float64; Qwen2 with biases, Qwen3 with q/k norms, Llama with
attention biases and another attention scale; left-padded prompts of different lengths, responses cut at EOS,
shared and unshared prompts, a selection that splits groups), in eval and train mode; and it is not taken where it
would not be exact (dropout in train mode, gradient checkpointing, hooks, other architectures)."""

from __future__ import annotations

import pytest
import torch
from test_decode import models

from rpgrl.models import build_char_tokenizer, build_tiny_model
from rpgrl.packed import supported
from rpgrl.rollout import sample, token_logprobs

CHARS = "0123456789+-=:\nAQnswer "
PROMPTS = ["Q:1+2\n", "Q:123+456\n", "Q:7\n", "Q:99-12=\n"]  # different lengths: left padding
NAMES = ["qwen2", "qwen3", "llama", "llama-scaling", "qwen3-norms"]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(CHARS)


def _rollout(model, tok, seed: int, n: int = 3, max_new_tokens: int = 9):
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    eos = [tok.eos_token_id, tok.convert_tokens_to_ids("=")]  # a second stop token: responses of many lengths
    r = sample(model, tok, prompts, n=n, max_new_tokens=max_new_tokens, eos_token_ids=eos,
               generator=torch.Generator().manual_seed(seed))  # fmt: skip
    assert len(set(r.lengths.tolist())) > 1  # some rows stop early: padding after EOS is exercised
    return r


def _reference(model, r, weights: torch.Tensor) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """Per row: one unpadded full forward of the model, log-softmax of its logits at the response positions; and
    the gradient of sum(logp * weights) with respect to every parameter."""
    model.zero_grad()
    out, total = [], 0.0
    for i in range(len(r)):
        prompt = r.prompt_ids[i][r.attention_mask[i, : r.prompt_len].bool()]
        resp = r.response_ids[i, : int(r.lengths[i])]
        logits = model(torch.cat([prompt, resp])[None]).logits[0]
        lp = torch.log_softmax(logits, -1)[len(prompt) - 1 + torch.arange(len(resp)), resp]
        out.append(lp.detach())
        total = total + (lp * weights[i, : len(resp)]).sum()
    total.backward()
    return out, {k: p.grad.clone() for k, p in model.named_parameters()}


def _packed(model, r, weights: torch.Tensor, share: bool = True):
    model.zero_grad()
    lp, _ = token_logprobs(model, r, forward="packed", share_prompts=share)
    (lp * weights).sum().backward()
    return lp.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


def _assert_matches(model, r, share: bool = True) -> None:
    weights = torch.randn(r.response_mask.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want_lp, want_grad = _reference(model, r, weights)
    got_lp, got_grad = _packed(model, r, weights, share)
    for i, want in enumerate(want_lp):
        torch.testing.assert_close(got_lp[i, : len(want)], want, rtol=0, atol=1e-12)
        assert (got_lp[i, len(want) :] == 0).all()
    assert set(got_grad) == set(want_grad)
    for k, g in want_grad.items():
        # transformers' RMSNorm computes in float32 even in a float64 model: the two computations round apart
        # there (measured ~1e-9 of each tensor's largest entry); a lost or doubled gradient path is off by order 1
        err = float((got_grad[k] - g).abs().max() / g.abs().max())
        assert err < 1e-6, (k, err)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("share", [True, False])
def test_logprobs_and_gradients_equal_a_forward_per_row(tok, name, share):
    model = dict(models(tok, torch.float64))[name]
    assert supported(model) is None
    r = _rollout(model, tok, seed=NAMES.index(name))
    _assert_matches(model, r, share)


@pytest.mark.parametrize("name", ["qwen2", "qwen3-norms"])
def test_sdpa_attention_path_equals_a_forward_per_row(tok, name, monkeypatch):
    """Above GROUPED_MAX_SCORES (and off the CPU, or in other dtypes) the attention runs SDPA's kernel: the same
    exactness there."""
    import rpgrl.packed as packed

    monkeypatch.setattr(packed, "GROUPED_MAX_SCORES", 0)
    model = dict(models(tok, torch.float64))[name]
    _assert_matches(model, _rollout(model, tok, seed=5))


@pytest.mark.parametrize("heads", [(4, 2), (4, 4), (6, 1)])
def test_grouped_attention_equals_sdpa_with_its_gradients(heads):
    """`_attend`'s batched-product attention (`_GroupedAttention`, its hand-written backward) against SDPA's kernel
    on the same boolean mask in float64 (rows of several lengths, padding keys masked, grouped query heads), and
    its backward against finite differences (gradcheck)."""
    import torch.nn.functional as F

    from rpgrl.packed import _attend, _grouped_bias, _GroupedAttention

    nh, nkv = heads
    N, Tq, L, hd, scale = 3, 5, 8, 4, 0.37
    g = torch.Generator().manual_seed(7)
    q = torch.randn(N, Tq, nh, hd, dtype=torch.float64, generator=g, requires_grad=True)
    k, v = (torch.randn(N, nkv, L, hd, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(2))
    valid = torch.tensor([[1] * 8, [0, 0, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    itself = torch.zeros(Tq, L, dtype=torch.bool)
    itself[torch.arange(Tq), L - Tq + torch.arange(Tq)] = True  # query i sits at key L - Tq + i
    mask = (torch.ones(Tq, L, dtype=torch.bool).tril(L - Tq) & valid[:, None, :]) | itself
    mask = mask[:, None]  # (N, 1, Tq, L); every query sees at least itself
    bias = _grouped_bias(mask, nh, nkv, q)
    assert bias.dtype == torch.float64 and bias.shape == (N * nkv, nh // nkv * Tq, L)
    got = _attend(q, k, v, bias, scale)
    want = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask, scale=scale,
                                          enable_gqa=nh != nkv).transpose(1, 2).reshape(N * Tq, nh * hd)  # fmt: skip
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)
    w = torch.randn(got.shape, dtype=torch.float64, generator=g)
    got_g = torch.autograd.grad((got * w).sum(), (q, k, v))
    want_g = torch.autograd.grad((want * w).sum(), (q, k, v))
    for a, b in zip(got_g, want_g, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    rows = q.detach().view(N, Tq, nkv, nh // nkv, hd).permute(0, 2, 3, 1, 4).reshape(N * nkv, -1, hd)
    args = (rows.requires_grad_(), k.detach().reshape(N * nkv, L, hd).requires_grad_(),
            v.detach().reshape(N * nkv, L, hd).requires_grad_(), bias, scale)  # fmt: skip
    assert torch.autograd.gradcheck(_GroupedAttention.apply, args)


def test_grouped_bias_keeps_sdpa_where_it_should():
    """The boolean mask itself (SDPA's kernel) for float16/bfloat16 and above GROUPED_MAX_SCORES."""
    from rpgrl.packed import GROUPED_MAX_SCORES, _grouped_bias

    mask = torch.ones(2, 1, 3, 4, dtype=torch.bool)
    assert _grouped_bias(mask, 2, 1, torch.zeros(1, dtype=torch.bfloat16)) is mask
    big = torch.ones(1, 1, 1, GROUPED_MAX_SCORES + 1, dtype=torch.bool)
    assert _grouped_bias(big, 1, 1, torch.zeros(1)) is big
    assert _grouped_bias(mask, 2, 1, torch.zeros(1)).dtype == torch.float32


@pytest.mark.parametrize("rows", [[1, 2, 3], [0, 1, 2, 4, 5, 7], [5, 4, 3, 2], [0, 3, 6, 9]])
def test_any_selection_of_rows(tok, rows):
    """Micro-batches that split a group, single-row groups among shared ones, rows out of group order."""
    model = dict(models(tok, torch.float64))["qwen2"]
    r = _rollout(model, tok, seed=11).select(rows).compact()
    _assert_matches(model, r)


@pytest.mark.parametrize("share", [True, False])
def test_no_layer_computes_the_padding_after_eos(tok, share):
    """Every layer's MLP sees the prompts' rows (once per group when shared) and the valid response tokens only,
    not the (B, T) padding after each EOS; a rollout without padding takes the same rows unchanged."""
    from rpgrl.rollout import prompt_runs

    model = dict(models(tok, torch.float64))["qwen2"]
    seen = []
    model.model.layers[-1].mlp.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    one_token = sample(model, tok, [tok(p)["input_ids"] for p in PROMPTS], n=3, max_new_tokens=1)  # no padding
    for r in (_rollout(model, tok, seed=3), one_token):
        seen.clear()
        token_logprobs(model, r, forward="packed", share_prompts=share)
        runs = prompt_runs(r) if share else None
        prompts = len(r) if runs is None else runs[0].numel()
        valid = int(r.attention_mask[:, r.prompt_len :].sum())
        assert seen == [prompts * r.prompt_len + valid]
        if r.response_mask.shape[1] > 1:
            assert valid < r.response_mask.numel()  # there was padding to skip


def test_train_mode_without_dropout_takes_the_packed_forward(tok):
    model = build_tiny_model(tok, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=5).double()
    r = _rollout(model, tok, seed=2)
    model.train()
    assert supported(model) is None
    _assert_matches(model, r)


def test_where_it_is_not_exact_it_is_not_taken(tok):
    model = build_tiny_model(tok, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=5).double()
    r = _rollout(model, tok, seed=3)
    with torch.no_grad():
        want, _ = token_logprobs(model, r, forward="transformers", share_prompts=False)

    model.config.attention_dropout = 0.5
    assert supported(model) is None  # eval mode: no dropout
    model.train()
    assert supported(model) == "attention dropout (train mode)"
    model.config.attention_dropout = 0.0

    model.gradient_checkpointing_enable()
    assert supported(model) == "gradient checkpointing (train mode)"
    with pytest.raises(ValueError, match="forward='packed' does not support this model: gradient checkpointing"):
        token_logprobs(model, r, forward="packed")
    got, _ = token_logprobs(model, r)  # auto: the transformers path, same values
    torch.testing.assert_close(got.detach(), want, rtol=0, atol=1e-12)
    model.gradient_checkpointing_disable()
    model.eval()

    handle = model.model.layers[0].self_attn.register_forward_hook(lambda *a: None)
    assert supported(model) == "forward hooks on the decoder, its layers or their attention modules"
    handle.remove()
    assert supported(model) is None  # hooks on the modules it calls (the embedding's, left by checkpointing) run

    model.config.use_sliding_window = True
    assert "sliding-window" in supported(model)
    model.config.use_sliding_window = False
    with pytest.raises(ValueError, match="forward must be auto, packed or transformers"):
        token_logprobs(model, r, forward="fast")


def test_float32_agrees_with_float64(tok):
    """The default dtype: packed float32 log-probs against the float64 model's, to float32 rounding."""
    model = build_tiny_model(tok, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=7)
    r = _rollout(model, tok, seed=4)
    with torch.no_grad():
        got, _ = token_logprobs(model, r, forward="packed")
        want, _ = token_logprobs(model.double(), r, forward="transformers", share_prompts=False)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=1e-5)
