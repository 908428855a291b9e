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
    """None if `StaticDecoder` computes exactly `model`'s forward, else the reason it does not."""
    cfg = model.config
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
    if getattr(model.model.rotary_emb, "rope_type", "default") == "dynamic":
        return "dynamic RoPE (its frequencies depend on the sequence length)"
    return None


@dataclass
class _Layer:
    ln1: Tensor  # (H,)
    wqkv: Tensor  # ((nh + 2 nkv) hd, H)
    bqkv: Tensor | None
    q_norm: Tensor | None  # (hd,) Qwen3 only
    k_norm: Tensor | None
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
    """transformers' RMSNorm: statistics in float32, scaled by the weight in the input dtype."""
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, heads, hd) rotated by cos/sin (B, 1, hd): x cos + rotate_half(x) sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class StaticDecoder:
    """One model's decode step on a static cache of `batch` rows and `length` positions. Built per sampling call
    (it fuses the current weights, so a later optimizer step is not seen)."""

    def __init__(self, model, batch: int, length: int):
        cfg, core = model.config, model.model
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh
        self.eps = cfg.rms_norm_eps
        self.scale = self.hd**-0.5
        self.embed = core.embed_tokens.weight
        self.norm = core.norm.weight
        head = model.get_output_embeddings()
        self.lm_w, self.lm_b = head.weight, head.bias
        dtype, dev = self.embed.dtype, self.embed.device
        self.layers = []
        for layer in core.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(
                _Layer(
                    ln1=layer.input_layernorm.weight,
                    wqkv=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight], 0),
                    bqkv=_cat(a.q_proj.bias, a.k_proj.bias, a.v_proj.bias),
                    q_norm=a.q_norm.weight if hasattr(a, "q_norm") else None,
                    k_norm=a.k_norm.weight if hasattr(a, "k_norm") else None,
                    wo=a.o_proj.weight,
                    bo=a.o_proj.bias,
                    ln2=layer.post_attention_layernorm.weight,
                    wgu=torch.cat([m.gate_proj.weight, m.up_proj.weight], 0),
                    wd=m.down_proj.weight,
                    keys=torch.empty(batch, self.nkv, length, self.hd, dtype=dtype, device=dev),
                    values=torch.empty(batch, self.nkv, length, self.hd, dtype=dtype, device=dev),
                )
            )
        positions = torch.arange(length, device=dev)[None]  # (1, S): every position a row can reach
        cos, sin = core.rotary_emb(self.embed[:1][None], positions)  # (1, S, hd) each, the model's own RoPE
        self.cos, self.sin = cos[0], sin[0]
        self.valid = torch.ones(batch, length, dtype=torch.bool, device=dev)  # keys a row may attend to
        self.filled = 0

    def load_prefill(self, cache, prompt_mask: Tensor, repeats: int) -> None:
        """Copy a `transformers` cache of the U prompts (each layer's keys/values (U, nkv, P, hd)) into the first P
        positions of every row, each prompt `repeats` times (rows of a group adjacent). prompt_mask: (U, P)."""
        P = prompt_mask.shape[1]
        for mine, theirs in zip(self.layers, cache.layers, strict=True):
            mine.keys[:, :, :P] = theirs.keys.repeat_interleave(repeats, 0)
            mine.values[:, :, :P] = theirs.values.repeat_interleave(repeats, 0)
        self.valid[:, :P] = prompt_mask.bool().repeat_interleave(repeats, 0)
        self.filled = P

    def step(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """Feed one token per row (tokens, positions: (B,)) at the next cache slot; returns logits (B, V)."""
        B, s = tokens.shape[0], self.filled
        x = F.embedding(tokens, self.embed)  # (B, H)
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # (B, 1, hd)
        mask = self.valid[:, None, None, : s + 1]  # (B, 1, 1, s + 1)
        q_size, kv_size = self.nh * self.hd, self.nkv * self.hd
        for L in self.layers:
            qkv = F.linear(_rms(x, L.ln1, self.eps), L.wqkv, L.bqkv)
            q, k, v = qkv.split([q_size, kv_size, kv_size], -1)
            q, k, v = q.view(B, self.nh, self.hd), k.view(B, self.nkv, self.hd), v.view(B, self.nkv, self.hd)
            if L.q_norm is not None:
                q, k = _rms(q, L.q_norm, self.eps), _rms(k, L.k_norm, self.eps)
            L.keys[:, :, s] = _rope(k, cos, sin)
            L.values[:, :, s] = v
            att = F.scaled_dot_product_attention(
                _rope(q, cos, sin)[:, :, None], L.keys[:, :, : s + 1], L.values[:, :, : s + 1], attn_mask=mask,
                scale=self.scale, enable_gqa=self.nh != self.nkv,
            )  # fmt: skip  # (B, nh, 1, hd)
            x = x + F.linear(att.reshape(B, q_size), L.wo, L.bo)
            gate, up = F.linear(_rms(x, L.ln2, self.eps), L.wgu).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, L.wd)
        self.filled = s + 1
        return F.linear(_rms(x, self.norm, self.eps), self.lm_w, self.lm_b)
