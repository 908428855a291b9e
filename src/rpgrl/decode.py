"""A fast decode step for Qwen2 / Qwen3 / Llama-style causal LMs: a preallocated (static) KV cache and fused
projections, reading the Hugging Face model's own weights.

Why: one decode step of a small model through `transformers` spends most of its time outside the matrix products (module
calls, cache bookkeeping, mask building: ~35 ops per layer for a 1-token query). This step does the same math in 4
matrix products per layer (q|k|v fused, o, gate|up fused, down; the residual adds fused into the o and down products)
and two batched products for attention, on a cache that is written in place, never concatenated. The four weights are
fixed for the whole sampling call, so where oneDNN is there (float32 on the CPU) and the hidden size is at least
`ONEDNN_MIN_HIDDEN` they are reordered once into oneDNN's blocked layout and multiplied by oneDNN, which then skips
the per-call packing of the weight that a BLAS call does; otherwise, from a hidden size of WEIGHT_LEFT_MIN_HIDDEN on,
the products run as w @ x^T (the weight on the left), which the BLAS runs faster at few rows. The prompts are
prefilled by the same layers (`prefill`: each distinct prompt once, its keys and values copied to the rows of its
group), so no `transformers` cache is built at all. `forward_at` is the same step over the whole cache under a mask,
with the cache slot as a tensor, so every step has the same shapes: what `rollout.sample(decode="compiled")` compiles.

The math is the model's: RMSNorm in float32 (`w * x * rsqrt(mean(x^2) + eps)`; in a float32 or float64 model the
weight w is folded into the q|k|v and gate|up weights, a rounding-level difference), RoPE with the cos/sin of the
model's own rotary module (so rope scaling types and their attention factor carry over), grouped-query attention
over the valid (non-padding) keys, SiLU-gated MLP, the final norm and lm_head. `supported(model)` names what it does not
handle (another architecture, sliding-window layers, post-processed logits, a non-SiLU MLP); `rollout.sample` then
uses the `transformers` path. `tests/test_decode.py` checks logits against the model's forward.

Shapes: B rows, H hidden, nh / nkv heads of size hd, cache length S = prompt length P + max new tokens.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

ARCHS = ("qwen2", "qwen3", "llama")
# From this hidden size on, the layer products run as w @ x^T: the weight is the left operand, the row-major hidden
# states x (N, H) the transposed right one, and the (M, N) product is read transposed (a column-major (N, M) view;
# the q|k|v split, the gated MLP's output and the residual adds write row-major again). In-process A/B, torch 2.13
# CPU, 2 threads, 32-44 rows:
#   - 2-core Intel Xeon (AVX-512), hidden 512 (bench_trl's 31M): sampling 8-10% faster than w @ x^T on
#     column-major states (whose right operand is contiguous), which was itself faster than x @ w^T; at hidden 128,
#     x @ w^T stays faster (6% at 32 rows, 18% at 256);
#   - 2-core AMD EPYC, the column-major variant against x @ w^T: x1.15 (hidden 256), x1.2-1.3 (512), x1.2-1.5 (1024)
#     at 32-128 rows, equal at hidden 128 (this row-major variant was not measured there).
WEIGHT_LEFT_MIN_HIDDEN = 256
# oneDNN with weights reordered once (`torch.ops.mkldnn._reorder_linear_weight`) against the BLAS paths above, float32,
# 2 threads, GFLOP/s of one product at rows x in x out (2-core AMD EPYC, torch 2.13, MKL 2024.2 / oneDNN 3.12):
#   32 x 512 x 1536: 206 against 170 (w @ x^T); 32 x 1536 x 512: 206 / 173; 32 x 256 x 1536: 182 / 163;
#   32 x 128 x 384: 106 against 138: slower at the 0.8M model's 32 rows. Whole sampling calls, in-process A/B:
#   bench_trl's 31M (hidden 512, 32 rows) x1.10-1.30; the default's 256 rows at hidden 128 x0.88-1.00 (its gate|up
#   product ran faster, the o product with oneDNN's sum post-op slower), so oneDNN starts at hidden 256.
ONEDNN_MIN_HIDDEN = 256


def onednn_available(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the decode products can run on oneDNN with reordered weights: float32 on a CPU build with oneDNN
    (`torch.backends.mkldnn`, on by default) whose reorder and product ops compute a small product right."""
    return (
        dtype == torch.float32
        and device.type == "cpu"
        and torch.backends.mkldnn.is_available()
        and torch.backends.mkldnn.enabled
        and _onednn_works()
    )


@functools.cache
def _onednn_works() -> bool:
    """The ops `_linear` and `_residual` call (internal to torch: what Inductor's CPU backend runs) exist and give
    x @ w^T + b and that plus a residual on a 3 x 5 x 4 product, once per process; any failure means the BLAS."""
    try:
        with torch.no_grad():
            g = torch.Generator().manual_seed(0)
            x, w, b, r = (torch.randn(*s, generator=g) for s in ((3, 5), (4, 5), (4,), (3, 4)))
            packed = _pack(w, "onednn", 3)
            y, z = _linear(x, packed, b, "onednn"), _residual(r, x, packed, b, "onednn")
            want = torch.addmm(b, x, w.t())
            return bool(torch.allclose(y, want, atol=1e-5)) and bool(torch.allclose(z, want + r, atol=1e-5))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


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
    ln1: Tensor | None  # (H,), None when folded into wqkv
    wqkv: Tensor  # ((nh + 2 nkv) hd, H)
    bqkv: Tensor | None
    qk_norm: Tensor | None  # (nh + nkv, hd): Qwen3's q_norm and k_norm weights, one row per head
    wo: Tensor  # (H, nh hd): o_proj's weight
    bo: Tensor | None
    ln2: Tensor | None  # None when folded into wgu
    wgu: Tensor  # (2 I, H)
    wd: Tensor  # (H, I): down_proj's weight
    keys: Tensor  # (B, nkv, S, hd), written in place
    values: Tensor


def _cat(*ts: Tensor | None) -> Tensor | None:
    return None if ts[0] is None else torch.cat(ts, 0)


@torch.no_grad()
def _fused(ws: tuple[Tensor, ...], scale: Tensor | None) -> Tensor:
    """The weights (M_i, K) stacked into one (sum M_i, K) matrix, each column times `scale` (K,) if given, written
    in one pass (no concatenated copy scaled afterwards)."""
    out = ws[0].new_empty(sum(w.shape[0] for w in ws), ws[0].shape[1])
    for w, rows in zip(ws, out.split([w.shape[0] for w in ws]), strict=True):
        rows.copy_(w) if scale is None else torch.mul(w, scale, out=rows)
    return out


def _rms(x: Tensor, w: Tensor | None, eps: float) -> Tensor:
    """transformers' RMSNorm, op for op: x * rsqrt(mean(x^2) + eps) in float32 (also for a float64 or bfloat16
    model), back to x's dtype, then scaled by w (None: w was folded into the next product's weight)."""
    h = x.to(torch.float32)  # x itself in a float32 model
    h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return h if w is None else w * h


def _half_signs(hd: int, dtype, device) -> Tensor:
    """(hd,) -1 on the first half, +1 on the second: roll(x, hd/2) * signs = cat(-x2, x1) = rotate_half(x), exactly
    (a sign flip rounds nothing), so RoPE's sin can carry the signs and rotate_half becomes one `roll`."""
    return torch.ones(hd, dtype=dtype, device=device).index_fill_(0, torch.arange(hd // 2, device=device), -1.0)


class StaticDecoder:
    """One model's decode step on a static cache of `batch` rows and `length` positions. Built per sampling call
    (it fuses the current weights, so a later optimizer step is not seen)."""

    def __init__(self, model, batch: int, length: int, whole_cache: bool = False):
        """whole_cache: for `forward_at`, which reads every slot: the cache starts zeroed (a masked key still
        multiplies its value by 0, and uninitialised memory may hold NaN), and oneDNN's products run through the
        `rpgrl::onednn_*` custom ops, which torch.compile calls as they are (kernel 'onednn_op')."""
        cfg, core = model.config, model.model
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh
        self.eps = cfg.rms_norm_eps
        self.embed = core.embed_tokens.weight
        self.norm = core.norm.weight
        head = model.get_output_embeddings()
        self.lm_w, self.lm_b = head.weight, head.bias
        dtype, dev = self.embed.dtype, self.embed.device
        positions = torch.arange(length, device=dev)[None]  # (1, S): every position a row can reach
        cos, sin = core.rotary_emb(self.embed[:1][None], positions)  # (1, S, hd) each, the model's own RoPE
        scaling = getattr(core.layers[0].self_attn, "scaling", self.hd**-0.5)  # the attention's own, 1/sqrt(hd)
        scale = torch.ones(self.nh + self.nkv, 1, dtype=dtype, device=dev)  # `scaling` on the q heads, 1 on k:
        scale.index_fill_(0, torch.arange(self.nh, device=dev), scaling)  # the attention's scale, folded into RoPE
        self.cos = cos[0][:, None] * scale  # (S, nh + nkv, hd)
        self.sin = sin[0][:, None] * scale * _half_signs(self.hd, dtype, dev)  # rotate_half's signs folded in
        self.bias = torch.zeros(batch, length, dtype=dtype, device=dev)  # -inf at the keys a row may not attend to
        self.softmax_dtype = torch.promote_types(dtype, torch.float32)  # attention weights in float32 or wider
        self.kernel = _kernel(cfg.hidden_size, dtype, dev, traced=whole_cache)
        self.new_cache = torch.zeros if whole_cache else torch.empty
        self.layers = [self._layer(layer, batch, length) for layer in core.layers]
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
        ln1, ln2 = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
        fold = w.element_size() >= 4  # folding the norm weights into the products costs a bf16 model precision
        k = self.kernel
        return _Layer(
            ln1=None if fold else ln1,
            wqkv=_pack(_fused((w, a.k_proj.weight, a.v_proj.weight), ln1 if fold else None), k, batch),
            bqkv=_cat(a.q_proj.bias, a.k_proj.bias, a.v_proj.bias),
            qk_norm=qk_norm,
            wo=_pack(a.o_proj.weight, k, batch),
            bo=a.o_proj.bias,
            ln2=None if fold else ln2,
            wgu=_pack(_fused((m.gate_proj.weight, m.up_proj.weight), ln2 if fold else None), k, batch),
            wd=_pack(m.down_proj.weight, k, batch),
            keys=self.new_cache(**kv),
            values=self.new_cache(**kv),
        )

    def prefill(self, ids: Tensor, mask: Tensor, positions: Tensor, repeats: int) -> Tensor:
        """Run the U prompts (ids, mask, positions: (U, P), left-padded) once, write their keys and values into the
        first P positions of every row, each prompt `repeats` times (rows of a group adjacent), and return the
        logits (U, V) at each prompt's last position."""
        (U, P), nh, nkv, hd = ids.shape, self.nh, self.nkv, self.hd
        x = F.embedding(ids, self.embed).flatten(0, 1)  # (U P, H)
        cos, sin = self.cos[positions].flatten(0, 1), self.sin[positions].flatten(0, 1)  # (U P, nh + nkv, hd)
        keep = mask.bool()
        allowed = torch.ones(P, P, dtype=torch.bool, device=ids.device).tril() & keep[:, None, :]  # (U, P, P)
        allowed |= torch.eye(P, dtype=torch.bool, device=ids.device)  # a padding query sees itself: no empty row
        pad = torch.zeros(keep.shape, dtype=self.bias.dtype, device=ids.device).masked_fill_(~keep, -torch.inf)
        self.bias[:, :P] = pad.repeat_interleave(repeats, 0)
        for L in self.layers:
            qk, v = self._qkv(L, x, cos, sin)
            q = qk[:, :nh].view(U, P, nh, hd).transpose(1, 2)  # (U, nh, P, hd), already times the scale
            k, v = qk[:, nh:].view(U, P, nkv, hd).transpose(1, 2), v.view(U, P, nkv, hd).transpose(1, 2)
            L.keys[:, :, :P] = k.repeat_interleave(repeats, 0)
            L.values[:, :, :P] = v.repeat_interleave(repeats, 0)
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None], scale=1.0, enable_gqa=nh != nkv)
            x = self._attn_out_and_mlp(L, x, att.transpose(1, 2).reshape(U * P, nh * hd))
        self.filled = P
        return F.linear(_rms(x.view(U, P, -1)[:, -1], self.norm, self.eps), self.lm_w, self.lm_b)

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
        self.bias = self.bias[local]
        self.rows = rows[local]

    def _forward(self, tokens: Tensor, positions: Tensor) -> Tensor:
        B, s, nh, nkv, hd = tokens.shape[0], self.filled, self.nh, self.nkv, self.hd
        x = F.embedding(tokens, self.embed)  # (B, H)
        cos, sin = self.cos[positions], self.sin[positions]  # (B, nh + nkv, hd)
        bias = self.bias[:, None, None, : s + 1].expand(B, nkv, 1, s + 1).reshape(B * nkv, 1, s + 1)  # 0 or -inf
        for L in self.layers:
            qk, v = self._qkv(L, x, cos, sin)
            L.keys[:, :, s] = qk[:, nh:]
            L.values[:, :, s] = v
            keys, values = L.keys.view(B * nkv, -1, hd)[:, : s + 1], L.values.view(B * nkv, -1, hd)[:, : s + 1]
            x = self._attend(L, x, qk, keys, values, bias)
        self.filled = s + 1
        return F.linear(_rms(x, self.norm, self.eps), self.lm_w, self.lm_b)

    def forward_at(self, tokens: Tensor, positions: Tensor, slot: Tensor) -> Tensor:
        """Feed one token per row (tokens, positions: (B,)) at cache slot `slot` (a 0-dim integer tensor); returns
        logits (B, V). Every row, whole cache: each query attends over all S keys with the ones after `slot` masked,
        so every step has the same shapes and no Python number changes, and `torch.compile` builds it once per
        (B, S) (`rollout.sample(decode="compiled")`). It neither drops rows nor moves `filled`: use `step` or this,
        on a decoder built with `whole_cache=True`."""
        B, S, nh, nkv, hd = tokens.shape[0], self.bias.shape[1], self.nh, self.nkv, self.hd
        x = F.embedding(tokens, self.embed)  # (B, H)
        cos, sin = self.cos[positions], self.sin[positions]  # (B, nh + nkv, hd)
        later = torch.arange(S, device=tokens.device) > slot  # (S,): keys not written yet
        bias = self.bias.masked_fill(later, -torch.inf)[:, None].expand(B, nkv, S).reshape(B * nkv, 1, S)
        at = slot.view(1)
        for L in self.layers:
            qk, v = self._qkv(L, x, cos, sin)
            L.keys.index_copy_(2, at, qk[:, nh:, None])
            L.values.index_copy_(2, at, v[:, :, None])
            x = self._attend(L, x, qk, L.keys.view(B * nkv, S, hd), L.values.view(B * nkv, S, hd), bias)
        return F.linear(_rms(x, self.norm, self.eps), self.lm_w, self.lm_b)

    def _attend(self, L: _Layer, x: Tensor, qk: Tensor, keys: Tensor, values: Tensor, bias: Tensor) -> Tensor:
        """One query per row against `keys`/`values` (B nkv, K, hd) under `bias` (B nkv, 1, K: 0 or -inf), then the
        rest of the layer: x (B, H) -> the layer's output (B, H). qk: `_qkv`'s queries|keys (B, nh + nkv, hd)."""
        B, nh, nkv, hd = x.shape[0], self.nh, self.nkv, self.hd
        q = qk[:, :nh].reshape(B * nkv, nh // nkv, hd)  # query head h reads KV head h // (nh / nkv)
        p = torch.softmax(torch.baddbmm(bias, q, keys.transpose(1, 2)), -1, dtype=self.softmax_dtype)
        return self._attn_out_and_mlp(L, x, (p.to(values.dtype) @ values).view(B, nh * hd))

    def _qkv(self, L: _Layer, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """x (N, H) -> queries|keys (N, nh + nkv, hd) after the q/k norms and RoPE (queries times the attention's scale,
        folded into cos/sin (N, nh + nkv, hd)), and values (N, nkv, hd)."""
        nh, nkv, hd = self.nh, self.nkv, self.hd
        qkv = _linear(_rms(x, L.ln1, self.eps), L.wqkv, L.bqkv, self.kernel)
        qkv = qkv.contiguous().view(x.shape[0], nh + 2 * nkv, hd)  # row-major again: RoPE and attention read rows
        qk, v = qkv[:, : nh + nkv], qkv[:, nh + nkv :]  # queries and keys rotate together
        if L.qk_norm is not None:
            qk = _rms(qk, L.qk_norm, self.eps)
        # RoPE: x cos + rotate_half(x) sin, with rotate_half(x) sin = roll(x, hd/2) (signs x sin), the same values
        return torch.addcmul(qk * cos, qk.roll(self.hd // 2, -1), sin), v

    def _attn_out_and_mlp(self, L: _Layer, x: Tensor, att: Tensor) -> Tensor:
        """The rest of a layer: x (N, H) + o(att (N, nh hd)), then + down(silu(gate) * up) of its norm."""
        x = _residual(x, att, L.wo, L.bo, self.kernel)
        gate, up = _linear(_rms(x, L.ln2, self.eps), L.wgu, None, self.kernel).chunk(2, -1)
        act = F.silu(gate)
        # weight_left: gate and up are column-major views; their product is written row-major for the down product
        act = torch.mul(act, up, out=x.new_empty(gate.shape)) if self.kernel == "weight_left" else act * up
        return _residual(x, act, L.wd, None, self.kernel)


def _kernel(hidden: int, dtype: torch.dtype, device: torch.device, traced: bool = False) -> str:
    """How the layer products run: 'onednn' (reordered weights), 'onednn_op' (the same through custom ops that
    torch.compile traces), 'weight_left' (w @ x^T) or 'rows' (x @ w^T)."""
    if hidden >= ONEDNN_MIN_HIDDEN and onednn_available(dtype, device):  # the probe costs ~1 s once
        return "onednn_op" if traced else "onednn"
    return "weight_left" if hidden >= WEIGHT_LEFT_MIN_HIDDEN else "rows"


def _pack(w: Tensor, kernel: str, rows: int) -> Tensor:
    """The weight w (M, K) as the products of `kernel` take it: reordered into oneDNN's layout for `rows` rows (any
    row count still works), else w itself."""
    return torch.ops.mkldnn._reorder_linear_weight(w.detach(), rows) if kernel.startswith("onednn") else w


def _linear(x: Tensor, w: Tensor, b: Tensor | None, kernel: str) -> Tensor:
    """x @ w^T (+ b) for x (N, K), w (M, K): (N, M). 'weight_left': computed as w @ x^T, the (M, N) product returned
    transposed (a column-major view); 'onednn': w reordered by `_pack`."""
    if kernel == "onednn":
        return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
    if kernel == "onednn_op":
        return onednn_linear(x, w, b, w.shape[0])
    if kernel == "rows":
        return F.linear(x, w, b)
    return (torch.mm(w, x.t()) if b is None else torch.addmm(b[:, None], w, x.t())).t()


def _residual(x: Tensor, a: Tensor, w: Tensor, b: Tensor | None, kernel: str) -> Tensor:
    """x + a @ w^T (+ b) for x (N, H), a (N, K), w (H, K), row-major like x: the add fused into the product (oneDNN's
    sum post-op; the addmm for rows without a bias), or after it (the sum takes x's layout)."""
    if kernel == "onednn":
        return torch.ops.mkldnn._linear_pointwise.binary(a, x, w, b, "add")
    if kernel == "onednn_op":
        return onednn_residual(x, a, w, b)
    if kernel == "rows":
        return torch.addmm(x, a, w.t()) if b is None else x + torch.addmm(b, a, w.t())
    return x + _linear(a, w, b, kernel)


@torch.library.custom_op("rpgrl::onednn_linear", mutates_args=())
def onednn_linear(x: Tensor, w: Tensor, b: Tensor | None, out_features: int) -> Tensor:
    """x (N, K) @ w^T (+ b) with w reordered by `_pack`: (N, out_features). A custom op, so torch.compile calls it
    as it is (Inductor's own lowering of the oneDNN product wants the weight to be a frozen constant)."""
    return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")


@onednn_linear.register_fake
def _(x: Tensor, w: Tensor, b: Tensor | None, out_features: int) -> Tensor:
    return x.new_empty(x.shape[0], out_features)


@torch.library.custom_op("rpgrl::onednn_residual", mutates_args=())
def onednn_residual(x: Tensor, a: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """x + a @ w^T (+ b), w reordered by `_pack` (oneDNN's sum post-op), as `onednn_linear` for torch.compile."""
    return torch.ops.mkldnn._linear_pointwise.binary(a, x, w, b, "add")


@onednn_residual.register_fake
def _(x: Tensor, a: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return torch.empty_like(x)
