"""The training forward on packed tokens: the states that predict a rollout's response tokens, for Qwen2 / Qwen3 /
Llama-style causal LMs, differentiable, with each distinct prompt run once per group.

Why: the `transformers` path with shared prompts (`rollout._response_states`) runs the decoder twice, once on the
U distinct prompts and once on the B responses over an indexed cache. Every weight then gets two gradient products
in backward, the prompt's with K = U x P rows (a thin, slow product), and an accumulation add of the two. Here the
U x P prompt tokens and the B x T response tokens are one (N, H) matrix of rows: every linear layer, norm and MLP
runs once over all of them (one product per weight forward and backward, no accumulation), and only the attention
sees the structure. It runs twice per layer: the prompts among themselves (U, P) and the responses (B, T) over their
group's prompt keys and their own. The rows hold the valid response tokens only (up to each row's EOS): the padding
after a short response is computed by no layer, and only the attention scatters the responses' queries, keys and
values to their (B, T) layout and back. At the CPU default's lengths (~38 of at most ~44 tokens) the scatter costs what
the tenth fewer rows save; with the long-tailed lengths of math reasoning the padding is most of a mini-batch (at 31M,
34% of the positions valid: x0.38 per update, `benchmarks/bench_padding.py`).

The math is the model's own: the norms, projections, q/k norms and MLPs are the model's modules, called on the
packed rows (so their exact code runs, LoRA-wrapped linears included); RoPE takes the cos/sin of the model's rotary
module, and the attention is transformers' SDPA attention with the module's own `scaling` over the valid
(non-padding) keys: on the CPU, where it is small, as batched products with a hand-written backward
(`_GroupedAttention`: the CPU default's whole update took x0.95-0.96 the time it took on SDPA's CPU kernel, which is
made for long sequences), else `scaled_dot_product_attention`. `tests/test_packed.py` checks log-probs and every
parameter's gradient against the `transformers` forward in float64, on both attention paths.

Shapes: B rows (U distinct prompts), P prompt positions (left-padded), T response positions, H hidden, nh / nkv
heads of size hd, R <= B T valid response tokens, N = U P + R packed rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def supported(model) -> str | None:
    """None if `response_states` computes exactly what `model`'s own forward computes in its current mode, else the
    reason it does not (then `rollout.token_logprobs` takes the `transformers` path)."""
    from rpgrl.decode import supported as arch_supported

    reason = arch_supported(model)
    if reason is not None:
        return reason
    if model.training and getattr(model, "is_gradient_checkpointing", False):
        return "gradient checkpointing (train mode)"
    if model.training and getattr(model.config, "attention_dropout", 0.0):
        return "attention dropout (train mode)"
    core = model.get_decoder()
    skipped = [core, *core.layers, *(layer.self_attn for layer in core.layers)]  # modules whose forward is not called
    if any(m._forward_hooks or m._forward_pre_hooks for m in skipped):
        return "forward hooks on the decoder, its layers or their attention modules"
    return None


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, -1)
    return torch.cat((-x2, x1), -1)


def _per_row(t: Tensor, inverse: Tensor, group: int | None) -> Tensor:
    """t (U, ...) -> (B, ...): each row's entry of its prompt, t[inverse]. `group` = G when the rows are U runs of G
    adjacent rows (inverse = 0^G 1^G ...): then a broadcast, whose backward sums over G instead of accumulating by
    index (at 31M, the index's backward was ~1% of the update)."""
    if group is None:
        return t[inverse]
    return t[:, None].expand(t.shape[0], group, *t.shape[1:]).flatten(0, 1)


def _group_size(inverse: Tensor, U: int) -> int | None:
    """G when `inverse` (B,) is 0^G 1^G ... (U-1)^G, else None."""
    B = inverse.numel()
    if B % U:
        return None
    G = B // U
    return G if torch.equal(inverse, torch.arange(U, device=inverse.device).repeat_interleave(G)) else None


def _masks(prompt_mask: Tensor, response_mask: Tensor, inverse: Tensor) -> tuple[Tensor, Tensor]:
    """Boolean attention masks: the prompts' (U, 1, P, P) and the responses' (B, 1, T, P + T). A query sees the
    valid keys at or before its position; a padding query also sees itself (no empty row, so no NaN: its output is
    read by nobody)."""
    P, T, dev = prompt_mask.shape[1], response_mask.shape[1], prompt_mask.device
    pm, rm = prompt_mask.bool(), response_mask.bool()
    causal_p = torch.ones(P, P, dtype=torch.bool, device=dev).tril()
    causal_t = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
    eye_p, eye_t = torch.eye(P, dtype=torch.bool, device=dev), torch.eye(T, dtype=torch.bool, device=dev)
    prompt = (causal_p & pm[:, None, :]) | eye_p  # (U, P, P)
    own = (causal_t & rm[:, None, :]) | eye_t  # (B, T, T)
    response = torch.cat([pm[inverse][:, None, :].expand(-1, T, -1), own], -1)  # (B, T, P + T)
    return prompt[:, None], response[:, None]


def response_states(model, rollout, runs: tuple[Tensor, Tensor] | None) -> Tensor:
    """(B, T, H) final hidden states (after the final norm) at positions P-1 .. P+T-2, the states that predict the
    response tokens. `runs` = (first (U,), inverse (B,)) from `rollout.prompt_runs`: the first row of each run of
    rows sharing a prompt and each row's run; None runs every row's prompt on its own."""
    core = model.get_decoder()
    P = rollout.prompt_len
    B, T = rollout.response_mask.shape
    if runs is None:
        runs = torch.arange(B, device=rollout.input_ids.device), torch.arange(B, device=rollout.input_ids.device)
    first, inverse = runs
    U = first.numel()
    ids, pos, att = rollout.input_ids, rollout.position_ids, rollout.attention_mask
    valid = att[:, P:].reshape(-1).bool()  # (B T,): the response tokens up to each row's EOS
    rows = None if bool(valid.all()) else valid.nonzero().squeeze(-1)  # (R,) their positions in B T order
    flat_ids = torch.cat([ids[first, :P].reshape(-1), _compact(ids[:, P:].reshape(-1), rows)])  # (N,)
    flat_pos = torch.cat([pos[first, :P].reshape(-1), _compact(pos[:, P:].reshape(-1), rows)])
    x = core.embed_tokens(flat_ids)  # (N, H)
    cos, sin = core.rotary_emb(x[None], flat_pos[None])  # (1, N, hd): the model's own RoPE, its scaling included
    rope = cos[0, :, None], sin[0, :, None]  # (N, 1, hd), broadcast over heads
    heads = model.config.num_attention_heads, model.config.num_key_value_heads
    masks = tuple(_grouped_bias(m, *heads, x) for m in _masks(att[first, :P], att[:, P:], inverse))
    group = _group_size(inverse, U)
    for layer in core.layers:
        h = layer.input_layernorm(x)
        x = x + _attention(layer.self_attn, h, rope, masks, (inverse, group, rows), (U, P, B, T))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    x = core.norm(x)
    last_prompt = _per_row(x[: U * P].view(U, P, -1)[:, -1], inverse, group)  # (B, H): before each first response
    responses = _scatter(x[U * P :], rows, B * T).view(B, T, -1)  # zeros after each EOS
    return torch.cat([last_prompt[:, None], responses[:, :-1]], 1)


def _compact(t: Tensor, rows: Tensor | None) -> Tensor:
    """t (B T, ...) -> (R, ...): the valid response positions `rows` (None: all of them)."""
    return t if rows is None else t.index_select(0, rows)


def _scatter(t: Tensor, rows: Tensor | None, n: int) -> Tensor:
    """t (R, ...) -> (n, ...) with t at `rows` and zeros elsewhere (None: t itself); differentiable in t."""
    return t if rows is None else t.new_zeros(n, *t.shape[1:]).index_copy(0, rows, t)


def _attention(attn, h: Tensor, rope: tuple[Tensor, Tensor], masks: tuple[Tensor, Tensor],
               runs: tuple[Tensor, int | None, Tensor | None], dims: tuple[int, int, int, int]) -> Tensor:  # fmt: skip
    """One attention module on the packed rows h (N, H): q/k/v projections (and Qwen3's q/k norms), RoPE, the
    prompts' attention and the responses' over their prompt's keys and their own, then o_proj. Returns (N, H).
    `runs` = (inverse, group, rows): each row's prompt (`_per_row`) and the valid response positions (`_compact`)."""
    U, P, B, T = dims
    inverse, group, rows = runs
    hd = attn.head_dim
    q = attn.q_proj(h).view(h.shape[0], -1, hd)  # (N, nh, hd)
    k = attn.k_proj(h).view(h.shape[0], -1, hd)  # (N, nkv, hd)
    v = attn.v_proj(h).view(h.shape[0], -1, hd)
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    cos, sin = rope
    q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
    n = U * P
    qp, kp, vp = (t[:n].view(U, P, -1, hd) for t in (q, k, v))  # (U, P, heads, hd)
    qr, kr, vr = (_scatter(t[n:], rows, B * T).view(B, T, -1, hd) for t in (q, k, v))  # zeros after each EOS
    out_p = _attend(qp, kp.transpose(1, 2), vp.transpose(1, 2), masks[0], attn.scaling)  # (U P, nh hd)
    keys = torch.cat([_per_row(kp, inverse, group), kr], 1).transpose(1, 2)  # (B, nkv, P + T, hd)
    values = torch.cat([_per_row(vp, inverse, group), vr], 1).transpose(1, 2)
    out_r = _attend(qr, keys, values, masks[1], attn.scaling)  # (B T, nh hd)
    return attn.o_proj(torch.cat([out_p, _compact(out_r, rows)]))


# Score elements (rows x heads x queries x keys) up to which an attention runs as batched products on the CPU
# (`_GroupedAttention`, which keeps its probabilities for backward: 16 MB in float32); above, SDPA's CPU kernel,
# which keeps none (math reasoning's long responses).
GROUPED_MAX_SCORES = 1 << 22


def _grouped_bias(mask: Tensor, nh: int, nkv: int, like: Tensor) -> Tensor:
    """The attention `mask` (N, 1, Tq, L) as `_GroupedAttention` adds it to its scores: (N nkv, g Tq, L), 0 where
    True and -inf where False, g = nh / nkv; or the mask itself where SDPA's kernel runs that attention: outside the
    CPU, for dtypes other than float32/float64, above GROUPED_MAX_SCORES. Built once per forward, for every layer."""
    N, _, Tq, L = mask.shape
    small = N * nh * Tq * L <= GROUPED_MAX_SCORES
    if not (small and like.device.type == "cpu" and like.dtype in (torch.float32, torch.float64)):
        return mask
    bias = torch.zeros(mask.shape, dtype=like.dtype, device=like.device).masked_fill_(~mask, float("-inf"))
    return bias[:, :, None].expand(N, nkv, nh // nkv, Tq, L).reshape(N * nkv, nh // nkv * Tq, L)


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
    """Attention of queries q (N, Tq, nh, hd) over keys and values k, v (N, nkv, L, hd), as transformers' SDPA
    attention computes it (query head j reads key/value head j // (nh / nkv)), where `mask` (from `_grouped_bias`)
    allows. Returns (N Tq, nh hd). A boolean mask (N, 1, Tq, L) runs SDPA's kernel; a float bias runs
    `_GroupedAttention` (at the CPU default's response attention, forward and backward took 1.6 against 2.9 ms)."""
    N, Tq, nh, hd = q.shape
    nkv, L = k.shape[1], k.shape[2]
    if mask.dtype == torch.bool:
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask, scale=scale,
                                             enable_gqa=nh != nkv)  # fmt: skip
        return out.transpose(1, 2).reshape(N * Tq, nh * hd)
    rows = q.view(N, Tq, nkv, nh // nkv, hd).permute(0, 2, 3, 1, 4).reshape(N * nkv, -1, hd)  # a group's queries
    out = _GroupedAttention.apply(rows, k.reshape(N * nkv, L, hd), v.reshape(N * nkv, L, hd), mask, scale)
    return out.view(N, nkv, nh // nkv, Tq, hd).permute(0, 3, 1, 2, 4).reshape(N * Tq, nh * hd)


class _GroupedAttention(torch.autograd.Function):
    """softmax(q k^T x scale + bias) v for q (M, Q, hd), k and v (M, L, hd), bias (M, Q, L) (0 or -inf, no row all
    -inf): each of the M batches is one key/value head with its query heads stacked as the Q rows, so forward and
    backward are five batched products and a softmax, with no key/value repeated per query head and a handful of
    autograd nodes where the same math composed of ops records a dozen. Keeps the probabilities (M, Q, L)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float) -> Tensor:
        probs = torch.softmax(torch.baddbmm(bias, q, k.transpose(1, 2), alpha=scale), -1)  # (M, Q, L)
        ctx.save_for_backward(q, k, v, probs)
        ctx.scale = scale
        return torch.bmm(probs, v)  # (M, Q, hd)

    @staticmethod
    def backward(ctx, grad: Tensor):
        q, k, v, probs = ctx.saved_tensors
        d_probs = torch.bmm(grad, v.transpose(1, 2))  # (M, Q, L)
        d_scores = torch._softmax_backward_data(d_probs, probs, -1, probs.dtype).mul_(ctx.scale)
        d_q = torch.bmm(d_scores, k)
        d_k = torch.bmm(d_scores.transpose(1, 2), q)
        d_v = torch.bmm(probs.transpose(1, 2), grad)
        return d_q, d_k, d_v, None, None
