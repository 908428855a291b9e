"""A fast decode step for Qwen2 / Qwen3 / Llama-style causal LMs: a preallocated (static) KV cache and fused
projections, reading the Hugging Face model's own weights.

Why: one decode step of a small model through `transformers` spends most of its time outside the matrix products
(module calls, cache bookkeeping, mask building: ~35 ops per layer for a 1-token query). This step does the same math
in 4 matrix products per layer (q|k|v fused, o, gate|up fused, down) plus one fused attention call on a cache that is
written in place, never concatenated.

The math is the model's: RMSNorm in float32 (`w * x * rsqrt(mean(x^2) + eps)`), RoPE with the cos/sin of the model's
own rotary module (so rope scaling types and their attention factor carry over), grouped-query attention over the
valid (non-padding) keys, SiLU-gated MLP, the final norm and lm_head. `supported(model)` names what it does not
handle (another architecture, sliding-window layers, post-processed logits, a non-SiLU MLP); `rollout.sample` then
uses the `transformers` path. `tests/test_decode.py` checks logits against the model's forward.

Shapes: B rows, H hidden, nh / nkv heads of size hd, cache length S = prompt length P + max new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

ARCHS = ("qwen2", "qwen3", "llama")


def supported(model) -> str | None:
    """None if `StaticDecoder` computes exactly `model`'s forward, else the reason it does not. `model` may also be
    its config alone (a `PretrainedConfig`: checked before the weights are loaded)."""
    cfg = getattr(model, "config", model)
    if cfg.model_type not in ARCHS:
        return f"model_type {cfg.model_type!r} (fast decode knows {', '.join(ARCHS)})"
    layer_types = getattr(cfg, "layer_types", None) or ()
    if getattr(cfg, "use_sliding_window", False) or any(t != "full_attention" for t in layer_types):
        return "sliding-window attention layers"
    if cfg.hidden_act != "silu":
        return f"hidden_act {cfg.hidden_act!r}"
    if getattr(cfg, "mlp_bias", False):
        return "MLP biases"
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling", "attn_logit_softcapping"):
        if getattr(cfg, attr, None) not in (None, 1, 1.0):
            return f"config.{attr}"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    if cfg is not model:  # the module's own rotary type is the one that runs
        rope_type = getattr(model.model.rotary_emb, "rope_type", rope_type)
    if rope_type == "dynamic":
        return "dynamic RoPE (its frequencies depend on the sequence length)"
    return None


@dataclass
class _Layer:
    ln1: Tensor  # (H,)
    wqkv: Tensor  # ((nh + 2 nkv) hd, H)
    bqkv: Tensor | None
    qk_norm: Tensor | None  # (nh + nkv, hd): Qwen3's q_norm and k_norm weights, one row per head
    wo: Tensor  # (H, nh hd)
    bo: Tensor | None
    ln2: Tensor
    wgu: Tensor  # (2 I, H)
    wd: Tensor  # (H, I)
    keys: Tensor  # (B, nkv, S, hd), written in place
    values: Tensor


def _cat(*ts: Tensor | None) -> Tensor | None:
    return None if ts[0] is None else torch.cat(ts, 0)


def _rms(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """transformers' RMSNorm: normalised in float32 (also for a float64 or bfloat16 model), then scaled by w."""
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype) * w


def _rotate_half_matrix(hd: int, dtype, device) -> Tensor:
    """R (hd, hd) with x @ R = rotate_half(x) = cat(-x2, x1): entries 0 and +-1, so the product is exact."""
    half = hd // 2
    r = torch.zeros(hd, hd, dtype=dtype, device=device)
    idx = torch.arange(half, device=device)
    r[idx + half, idx] = -1.0
    r[idx, idx + half] = 1.0
    return r


class StaticDecoder:
    """One model's decode step on a static cache of `batch` rows and `length` positions. Built per sampling call
    (it fuses the current weights, so a later optimizer step is not seen)."""

    def __init__(self, model, batch: int, length: int):
        cfg, core = model.config, model.model
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh
        self.eps = cfg.rms_norm_eps
        self.embed = core.embed_tokens.weight
        self.norm = core.norm.weight
        head = model.get_output_embeddings()
        self.lm_w, self.lm_b = head.weight, head.bias
        dtype, dev = self.embed.dtype, self.embed.device
        self.layers = [self._layer(layer, batch, length) for layer in core.layers]
        positions = torch.arange(length, device=dev)[None]  # (1, S): every position a row can reach
        cos, sin = core.rotary_emb(self.embed[:1][None], positions)  # (1, S, hd) each, the model's own RoPE
        self.cos, self.sin = cos[0], sin[0]
        self.rot = _rotate_half_matrix(self.hd, dtype, dev)
        self.valid = torch.ones(batch, length, dtype=torch.bool, device=dev)  # keys a row may attend to
        self.filled = 0
        self.rows: Tensor | None = None  # the rows still computed (after compaction), None = all
        self.out: Tensor | None = None  # (B, V) logits of every row once rows are dropped

    def _layer(self, layer, batch: int, length: int) -> _Layer:
        a, m = layer.self_attn, layer.mlp
        qk_norm = None
        if hasattr(a, "q_norm"):  # Qwen3: RMSNorm over each head's dims, before RoPE
            qk_norm = torch.cat([a.q_norm.weight.expand(self.nh, -1), a.k_norm.weight.expand(self.nkv, -1)], 0)
        w = a.q_proj.weight
        kv = dict(size=(batch, self.nkv, length, self.hd), dtype=w.dtype, device=w.device)
        return _Layer(
            ln1=layer.input_layernorm.weight,
            wqkv=torch.cat([w, a.k_proj.weight, a.v_proj.weight], 0),
            bqkv=_cat(a.q_proj.bias, a.k_proj.bias, a.v_proj.bias),
            qk_norm=qk_norm,
            wo=a.o_proj.weight,
            bo=a.o_proj.bias,
            ln2=layer.post_attention_layernorm.weight,
            wgu=torch.cat([m.gate_proj.weight, m.up_proj.weight], 0),
            wd=m.down_proj.weight,
            keys=torch.empty(**kv),
            values=torch.empty(**kv),
        )

    def load_prefill(self, cache, prompt_mask: Tensor, repeats: int) -> None:
        """Copy a `transformers` cache of the U prompts (each layer's keys/values (U, nkv, P, hd)) into the first P
        positions of every row, each prompt `repeats` times (rows of a group adjacent). prompt_mask: (U, P)."""
        P = prompt_mask.shape[1]
        for mine, theirs in zip(self.layers, cache.layers, strict=True):
            mine.keys[:, :, :P] = theirs.keys.repeat_interleave(repeats, 0)
            mine.values[:, :, :P] = theirs.values.repeat_interleave(repeats, 0)
        self.valid[:, :P] = prompt_mask.bool().repeat_interleave(repeats, 0)
        self.filled = P

    def step(self, tokens: Tensor, positions: Tensor, done: Tensor | None = None) -> Tensor:
        """Feed one token per row (tokens, positions: (B,)) at the next cache slot; returns logits (B, V).

        `done` (B,) bool marks finished rows, whose logits nobody reads: once they are a quarter of the rows still
        computed, those rows are dropped from the cache (compaction) and their logits rows are left stale."""
        if done is not None:
            self._compact(~done)
        if self.rows is None:
            return self._forward(tokens, positions)
        logits = self._forward(tokens[self.rows], positions[self.rows])
        if self.out is None:
            self.out = logits.new_zeros(tokens.shape[0], logits.shape[-1])
        return self.out.index_copy_(0, self.rows, logits)

    def _compact(self, alive: Tensor) -> None:
        rows = self.rows if self.rows is not None else torch.arange(alive.shape[0], device=alive.device)
        keep = alive[rows]
        n = int(keep.sum())
        if n == 0 or 4 * n > 3 * rows.shape[0]:
            return
        local = keep.nonzero().squeeze(-1)
        for L in self.layers:
            L.keys, L.values = L.keys[local], L.values[local]
        self.valid = self.valid[local]
        self.rows = rows[local]

    def _forward(self, tokens: Tensor, positions: Tensor) -> Tensor:
        B, s, nh, nkv, hd, eps = tokens.shape[0], self.filled, self.nh, self.nkv, self.hd, self.eps
        x = F.embedding(tokens, self.embed)  # (B, H)
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # (B, 1, hd)
        mask = self.valid[:, None, None, : s + 1]  # (B, 1, 1, s + 1)
        for L in self.layers:
            qkv = F.linear(_rms(x, L.ln1, eps), L.wqkv, L.bqkv).view(B, nh + 2 * nkv, hd)
            qk, v = qkv[:, : nh + nkv], qkv[:, nh + nkv :]  # queries and keys rotate together
            if L.qk_norm is not None:
                qk = _rms(qk, L.qk_norm, eps)
            qk = torch.addcmul(qk * cos, qk @ self.rot, sin)  # RoPE: x cos + rotate_half(x) sin
            L.keys[:, :, s] = qk[:, nh:]
            L.values[:, :, s] = v
            att = F.scaled_dot_product_attention(
                qk[:, :nh, None], L.keys[:, :, : s + 1], L.values[:, :, : s + 1], attn_mask=mask,
                enable_gqa=nh != nkv,
            )  # fmt: skip  # (B, nh, 1, hd); scale 1/sqrt(hd), the models' own
            x = x + F.linear(att.reshape(B, nh * hd), L.wo, L.bo)
            gate, up = F.linear(_rms(x, L.ln2, eps), L.wgu).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, L.wd)
        self.filled = s + 1
        return F.linear(_rms(x, self.norm, eps), self.lm_w, self.lm_b)
