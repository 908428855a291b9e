"""Text generation and per-token log-probs: the only module that knows how text is produced.

- `sample(model, tokenizer, prompts, n=G, ...)` -> `Rollout`: G samples per prompt from a Hugging Face causal LM
  with its KV cache. Each prompt is encoded once (prefill of the unique prompts), then the cache is repeated G
  times. A decode loop over `rpgrl.decode`'s static-cache step (or the model's own forward, or the step and the draw
  compiled: `decode`); it samples with true temperature / top-p (no hidden top-k) or greedily, stops at EOS or
  `max_new_tokens`, and stops early once every row is done.
- `token_logprobs(model, rollout)` -> log-probs (and optionally entropies) of the response tokens, computed chunk by
  chunk from the final hidden states, so a full (B, T, V) float32 logits tensor is never materialised; like the
  sampler, it forwards each group's prompt once (`rpgrl.packed`: prompt and response tokens packed as one matrix).

Left padding and positions: prompts are left-padded and `position_ids = cumsum(attention_mask) - 1` (what
`generate` does), both when sampling and in `token_logprobs`, so training-side log-probs equal the sampler's.

Shapes: `B` rows (= prompts x G), `P` padded prompt width, `T` response width, `V` vocabulary.
Left out: vLLM or any other engine, stop strings, repetition penalties, top-k.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from rpgrl.decode import StaticDecoder, supported
from rpgrl.errors import Diverged, UsageError
from rpgrl.packed import response_states as packed_response_states
from rpgrl.packed import supported as packed_supported
from rpgrl.trainer.device import usable_device

MIN_TEMPERATURE = 1e-8
"""The least sampling temperature (as `rollout.temperature`): below it logits / temperature overflow float32, and
sampling failed as if the weights had diverged (1e-40) or log-probs came back NaN."""
MAX_TEMPERATURE = 1e4
"""The largest sampling temperature (as `rollout.temperature`): above it the float32 log-probs of logits / temperature
(about -log V, rounded to ~1e-6) lose the logits' differences, and with them the log-ratios the loss is made of
(50,000 logits of spread 3: 8e-4 off at 1e4, 28% at 1e5, all equal from 1e8; at 1e30 the gradient was 0)."""


def check_temperature(temperature: float, where: str) -> None:
    """ValueError (one line, prefixed with `where`) unless MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE, worded
    as `rollout.temperature`'s check in config.py (the bounds as 1e-8 and 1e4); `sample` adds its greedy=True."""
    if not temperature >= MIN_TEMPERATURE:
        greedy = "; use greedy=True for argmax" if where == "sample" else ""  # (token_logprobs has no greedy)
        raise ValueError(f"{where}: temperature must be >= {_bound(MIN_TEMPERATURE)} (logits / temperature stay finite "
                         f"in float32{greedy}), got {temperature}")  # fmt: skip
    if not temperature <= MAX_TEMPERATURE:
        raise ValueError(f"{where}: temperature must be <= {_bound(MAX_TEMPERATURE)} (above, float32 log-probs of "
                         f"logits / temperature lose the logits' differences, and the gradient with them), got "
                         f"{temperature}")  # fmt: skip


def _bound(x: float) -> str:
    """A power of ten as config.py writes it: 1e-8, 1e4 (not 1e-08, 10000)."""
    return f"{x:.0e}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


@dataclass
class Rollout:
    """Prompts and responses of one batch, side by side in one token matrix.

    `input_ids` (B, P+T): left-padded prompt | response right-padded with the pad id.
    `attention_mask` (B, P+T): 1 on prompt tokens and on response tokens up to and including the first EOS.
    `prompt_len`: P, the padded prompt width.
    `response_mask` (B, T) float: 1 for response tokens up to AND including the first EOS, else 0.
    `group` (B,): index of the row's prompt in the input list (the G samples of a prompt are adjacent).
    `texts`: decoded responses, special tokens skipped.
    `sampler_logp` (B, T) or None: log-prob of each sampled token under the sampler's logits / temperature
    (before top-p filtering), 0 where `response_mask` is 0.
    `sampler_entropy` (B, T) or None: entropy of that distribution at each response position, 0 where the mask is 0.
    """

    input_ids: Tensor
    attention_mask: Tensor
    prompt_len: int
    response_mask: Tensor
    group: Tensor
    texts: list[str]
    sampler_logp: Tensor | None = None
    sampler_entropy: Tensor | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def response_ids(self) -> Tensor:
        """(B, T) response tokens (pad id after the first EOS)."""
        return self.input_ids[:, self.prompt_len :]

    @property
    def prompt_ids(self) -> Tensor:
        """(B, P) left-padded prompt tokens."""
        return self.input_ids[:, : self.prompt_len]

    @property
    def lengths(self) -> Tensor:
        """(B,) long: response lengths in tokens, EOS included."""
        return self.response_mask.sum(-1).long()

    @property
    def position_ids(self) -> Tensor:
        """(B, P+T): cumsum(attention_mask) - 1, clamped at 0 on left padding (what `generate` uses)."""
        return position_ids(self.attention_mask)

    def select(self, index: Tensor | Sequence[int] | slice) -> Rollout:
        """The rows `index` (a slice, a list of row numbers, a long tensor or a bool mask), widths unchanged."""
        if isinstance(index, slice):
            rows = torch.arange(len(self))[index]
        else:
            rows = torch.as_tensor(index)
            if rows.dtype == torch.bool:
                rows = rows.nonzero().squeeze(-1)
        rows = rows.to(self.input_ids.device)
        return Rollout(
            input_ids=self.input_ids[rows],
            attention_mask=self.attention_mask[rows],
            prompt_len=self.prompt_len,
            response_mask=self.response_mask[rows],
            group=self.group[rows],
            texts=[self.texts[i] for i in rows.tolist()],
            sampler_logp=None if self.sampler_logp is None else self.sampler_logp[rows],
            sampler_entropy=None if self.sampler_entropy is None else self.sampler_entropy[rows],
        )

    def compact(self) -> Rollout:
        """Drop prompt columns that are padding in every row and response columns past the longest response."""
        P = self.prompt_len
        start = int((self.attention_mask[:, :P].sum(0) == 0).sum())  # left padding is a prefix in every row
        T = int(self.lengths.max()) if len(self) else 0
        return replace(
            self,
            input_ids=self.input_ids[:, start : P + T],
            attention_mask=self.attention_mask[:, start : P + T],
            prompt_len=P - start,
            response_mask=self.response_mask[:, :T],
            sampler_logp=None if self.sampler_logp is None else self.sampler_logp[:, :T],
            sampler_entropy=None if self.sampler_entropy is None else self.sampler_entropy[:, :T],
        )


def _upcast(x: Tensor) -> Tensor:
    """Half-precision logits -> float32; float32/float64 unchanged (float64 models give float64 log-probs)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def position_ids(attention_mask: Tensor) -> Tensor:
    """(B, L) -> (B, L): cumsum(mask) - 1, with left-padding positions set to 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_(min=0)


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s) :] = torch.as_tensor(s, dtype=torch.long)
            mask[i, width - len(s) :] = 1
    return ids.to(device), mask.to(device)


def _eos_ids(model, tokenizer, eos_token_ids: Sequence[int] | int | None) -> list[int]:
    if eos_token_ids is None:
        found = []
        for src in (getattr(model, "generation_config", None), tokenizer):
            v = getattr(src, "eos_token_id", None)
            found += [] if v is None else [v] if isinstance(v, int) else list(v)
        eos_token_ids = found
    ids = [eos_token_ids] if isinstance(eos_token_ids, int) else sorted(set(eos_token_ids))
    if not ids:
        raise ValueError("no EOS token id: pass eos_token_ids= or use a tokenizer with an eos_token")
    return ids


def _pad_id(tokenizer, eos: list[int]) -> int:
    pad = tokenizer.pad_token_id
    return eos[0] if pad is None else pad


def _decode(tokenizer, response_ids: Tensor, lengths: Tensor) -> list[str]:
    rows = [ids[:n] for ids, n in zip(response_ids.tolist(), lengths.tolist(), strict=True)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


def response_mask_from_ids(response_ids: Tensor, eos_ids: Sequence[int], valid: Tensor | None = None) -> Tensor:
    """(B, T) long ids -> (B, T) float mask: 1 up to AND including the first EOS (or everything if none).

    `valid` (B, T) bool, optional: positions that hold a token at all (e.g. not right padding).
    """
    is_eos = torch.isin(response_ids, torch.as_tensor(list(eos_ids), device=response_ids.device))
    if valid is not None:
        is_eos &= valid
    eos_before = is_eos.long().cumsum(-1) - is_eos.long()  # number of EOS strictly before each position
    mask = eos_before == 0
    if valid is not None:
        mask &= valid
    return mask.float()


def make_rollout(
    tokenizer,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    group: Sequence[int] | Tensor | None = None,
    eos_token_ids: Sequence[int] | int | None = None,
    device: torch.device | str = "cpu",
) -> Rollout:
    """A Rollout from given token lists (teacher forcing: supervised warm start, tests, replaying responses).

    Each response counts up to and including its first EOS; tokens after it are padded out.
    `group` defaults to one group per row.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"make_rollout: {len(prompts)} prompts but {len(responses)} responses")
    if not prompts:
        raise ValueError("make_rollout: empty batch")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("make_rollout: empty prompt (encode at least one token, e.g. BOS)")
    eos = _eos_ids(None, tokenizer, eos_token_ids)
    pad = _pad_id(tokenizer, eos)
    device = usable_device(device, "make_rollout: device")
    p_ids, p_mask = _left_pad(prompts, pad, device)
    T = max(1, max(len(r) for r in responses))
    r_ids = torch.full((len(responses), T), pad, dtype=torch.long)
    valid = torch.zeros((len(responses), T), dtype=torch.bool)
    for i, r in enumerate(responses):
        r_ids[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        valid[i, : len(r)] = True
    r_ids, valid = r_ids.to(device), valid.to(device)
    r_mask = response_mask_from_ids(r_ids, eos, valid)
    r_ids = torch.where(r_mask.bool(), r_ids, pad)
    g = torch.arange(len(prompts)) if group is None else torch.as_tensor(group, dtype=torch.long)
    return Rollout(
        input_ids=torch.cat([p_ids, r_ids], 1),
        attention_mask=torch.cat([p_mask, r_mask.long()], 1),
        prompt_len=p_ids.shape[1],
        response_mask=r_mask,
        group=g.to(device),
        texts=_decode(tokenizer, r_ids, r_mask.sum(-1).long()),
    )


def cat_rollouts(rollouts: Sequence[Rollout], *, pad_id: int, renumber_groups: bool = True) -> Rollout:
    """Concatenate rollouts along rows, re-padding prompts on the left and responses on the right.

    With `renumber_groups`, each part's group ids are shifted past the previous parts' (so groups stay distinct,
    e.g. chunks of one prompt list keep their prompt indices); otherwise they are kept as they are.
    """
    if not rollouts:
        raise ValueError("cat_rollouts: nothing to concatenate")
    P = max(r.prompt_len for r in rollouts)
    T = max(r.response_mask.shape[1] for r in rollouts)
    ids, att, rmask, groups, texts, logps, ents = [], [], [], [], [], [], []
    offset = 0
    for r in rollouts:
        lp, rp = P - r.prompt_len, T - r.response_mask.shape[1]
        ids.append(F.pad(r.prompt_ids, (lp, 0), value=pad_id))
        ids[-1] = torch.cat([ids[-1], F.pad(r.response_ids, (0, rp), value=pad_id)], 1)
        att.append(F.pad(r.attention_mask, (lp, rp), value=0))
        rmask.append(F.pad(r.response_mask, (0, rp), value=0.0))
        groups.append(r.group + offset if renumber_groups else r.group)
        if renumber_groups and len(r):
            offset = int(groups[-1].max()) + 1
        texts += r.texts
        logps.append(None if r.sampler_logp is None else F.pad(r.sampler_logp, (0, rp), value=0.0))
        ents.append(None if r.sampler_entropy is None else F.pad(r.sampler_entropy, (0, rp), value=0.0))
    return Rollout(
        input_ids=torch.cat(ids),
        attention_mask=torch.cat(att),
        prompt_len=P,
        response_mask=torch.cat(rmask),
        group=torch.cat(groups),
        texts=texts,
        sampler_logp=None if any(lp is None for lp in logps) else torch.cat(logps),
        sampler_entropy=None if any(e is None for e in ents) else torch.cat(ents),
    )


def top_p_filter(probs: Tensor, top_p: float) -> Tensor:
    """(N, V) probabilities -> (N, V) renormalised over the smallest set of tokens whose mass reaches `top_p`.

    A token is kept when the mass of the tokens ranked strictly above it is below `top_p`, so the top token is always
    kept and `top_p=1` keeps every token with non-zero probability.
    """
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(-1, descending=True)
    mass_above = sorted_p.cumsum(-1) - sorted_p
    drop = mass_above >= top_p
    drop[..., 0] = False  # also when top_p rounds to 0 in the probabilities' dtype
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return kept / kept.sum(-1, keepdim=True)


def categorical(probs: Tensor, generator: torch.Generator | None = None, *, noise: Tensor | None = None) -> Tensor:
    """(N, V) probabilities -> (N,) one draw per row: argmax(probs / E) with E ~ Exp(1) i.i.d. (the Gumbel-max
    trick). This is torch.multinomial(probs, 1)'s own algorithm and random stream, without its input checks (each a
    device sync); `tests/test_rollout.py` checks that the draws are identical. noise: E, if already drawn
    (`_noise(probs, generator)`: the compiled decode draws it outside its graph)."""
    return (probs / (_noise(probs, generator) if noise is None else noise)).argmax(-1)


def _noise(like: Tensor, generator: torch.Generator | None) -> Tensor:
    """The Exp(1) draws `categorical` divides by, shaped and typed like `like` (N, V)."""
    return torch.empty_like(like).exponential_(1, generator=generator)


def _draw(logits: Tensor, temperature: float, top_p: float, noise: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """(B, V) logits -> the next tokens (B,), their log-probs under softmax(logits / temperature) (B,) and its
    entropies (B,). noise: `_noise(logits)` for a draw as `categorical` makes it (top-p filtered), None = argmax."""
    logp_all = torch.log_softmax(logits if temperature == 1.0 else logits / temperature, -1)  # (B, V)
    p_all = logp_all.exp()
    tok = logits.argmax(-1) if noise is None else categorical(top_p_filter(p_all, top_p), noise=noise)
    return tok, logp_all.gather(-1, tok[:, None]).squeeze(-1), -(p_all * logp_all).nansum(-1)  # 0 * -inf = nan


def _compiled_draw(dec: StaticDecoder, tokens: Tensor, positions: Tensor, slot: Tensor, temperature: float,
                   top_p: float, noise: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """`decode="compiled"`'s whole step, one graph: the decoder at `slot`, then `_draw` of the next tokens."""
    return _draw(_upcast(dec.forward_at(tokens, positions, slot)), temperature, top_p, noise)


COMPILE_OPTIONS = {"cpp_wrapper": True, "emulate_precision_casts": True}  # Inductor's, for decode="compiled"


@functools.cache
def _compiled_step() -> Callable:
    """`_compiled_draw` under torch.compile: static shapes (one graph per rows x cache length x sampling mode), the
    generated kernels called from C++ (`cpp_wrapper`: no Python between them). Built on first use; compiled graphs
    are also cached on disk by Inductor, so a later process compiles faster. `_graph_budget` keeps the graphs
    under torch._dynamo's recompile limit (8); not `fullgraph` all the same: should its guards still see more
    graphs than counted there, they run `_compiled_draw` eagerly, the same values, where a full graph would raise
    in the middle of a run. `emulate_precision_casts`: a bfloat16 model's intermediates are rounded where eager
    rounds them (without it its logits moved by ~2e-3 and draws flipped)."""
    return torch.compile(_compiled_draw, dynamic=False, options=COMPILE_OPTIONS)


@functools.cache
def compiler_missing() -> str | None:
    """None when torch.compile's CPU backend builds and runs a small graph as decode="compiled" compiles (C++
    wrapper), else why not: a missing or broken compiler, headers or OpenMP fail here, once per process, not in the
    middle of a run. Takes a few seconds the first time (Inductor's import and one compile)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as e:  # noqa: BLE001 - any failure means no compiled decode
        cxx = os.environ.get("CXX")
        return f"torch.compile finds no C++ compiler ({type(e).__name__}; " + (
            f"CXX={cxx} does not work)" if cxx else "set CXX to one)"
        )
    try:
        probe = torch.compile(_probe, dynamic=False, options=COMPILE_OPTIONS)
        ok = torch.equal(probe(torch.arange(4.0)), torch.arange(4.0) * 2 + 1)
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        return f"torch.compile cannot build a graph here ({type(e).__name__}: {first})"
    return None if ok else "torch.compile's graph computed a wrong value"


def _probe(x: Tensor) -> Tensor:
    return x * 2 + 1


COMPILED_LENGTH_STEP = 32  # decode="compiled" rounds the cache length up to a multiple of this: fewer recompiles


_GRAPHS: set[tuple] = set()  # the graphs decode="compiled" has built in this process (`_graph_budget`)


def _graph_budget(model, rows: int, length: int, mode: tuple) -> bool:
    """Whether decode="compiled" runs a chunk of `rows` x `length` in sampling `mode` compiled: a graph it built
    already, or a new one while fewer than torch._dynamo's recompile limit exist. Past the limit torch._dynamo would
    run the compiled function eagerly (its whole-cache attention, no rows dropped: slower than the static step), so
    `sample` takes the static path for such a chunk instead, the same draws."""
    import torch._dynamo

    p = next(model.parameters())
    key = (rows, length, mode, p.dtype, p.device.type, model.config.to_json_string())
    cfg = torch._dynamo.config
    limit = getattr(cfg, "recompile_limit", None) or getattr(cfg, "cache_size_limit", 8)  # older torch's name
    if key not in _GRAPHS and len(_GRAPHS) >= limit:
        return False
    _GRAPHS.add(key)
    return True


def _cache_length(length: int, decode: str) -> int:
    """The KV cache positions a decode path allocates for `length` = prompt + new tokens."""
    return -(-length // COMPILED_LENGTH_STEP) * COMPILED_LENGTH_STEP if decode == "compiled" else length


def kv_cache_bytes(model, rows: int, length: int) -> int:
    """Bytes of the KV cache that generating `rows` sequences of `length` positions (prompt + new tokens) holds:
    keys and values of every layer, KV head and head dimension, in the model's dtype."""
    cfg = model.config.get_text_config()
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    nkv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    itemsize = next(model.parameters()).element_size()
    return rows * length * cfg.num_hidden_layers * 2 * nkv * hd * itemsize


def device_memory(device: torch.device) -> int:
    """Bytes of memory of `device`: the GPU's total, or the machine's physical RAM for the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_kv_cache(model, rows: int, length: int, hint: str = "fewer rows per chunk or fewer new tokens") -> None:
    """UsageError when the KV cache of `rows` x `length` positions exceeds the memory of the model's device (all
    of it: CPU RAM, or the GPU's), so that a run asks for a smaller generation instead of dying out of memory."""
    device = next(model.parameters()).device
    have = device_memory(device)
    need = kv_cache_bytes(model, rows, length)
    if need > have:
        raise UsageError(
            f"generating {rows} rows of {length} positions needs a {need / 2**30:.3g} GiB KV cache, more than the "
            f"{have / 2**30:.3g} GiB of this {device.type}: {hint}"
        )


def sample(
    model,
    tokenizer,
    prompts: Sequence[Sequence[int]],
    *,
    n: int = 1,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
    eos_token_ids: Sequence[int] | int | None = None,
    progress: bool = False,
    decode: str = "auto",
) -> Rollout:
    """Sample `n` responses per prompt; rows `i*n .. i*n+n-1` belong to prompt `i` (`group == i`).

    prompts: token-id lists (already templated / with BOS as the model expects), each non-empty.
    temperature, top_p: true sampling from softmax(logits / temperature), optionally nucleus-filtered; no top-k.
    greedy: argmax instead of sampling (`sampler_logp` is still taken from logits / temperature).
    batch_size: prompts per forward chunk (each chunk holds batch_size * n rows); None = all at once.
    generator: a `torch.Generator` for reproducible sampling (on the model's device).
    eos_token_ids: stop tokens; default = the model's generation-config EOS ids plus the tokenizer's.
    decode: "static" (`rpgrl.decode.StaticDecoder`: static KV cache, fused projections), "compiled" (the same
    decoder and the token draw as one torch.compile graph per rows x cache length: asked for only, as its first call
    compiles for seconds; the same draws to float rounding), "transformers" (the model's own forward with a
    DynamicCache, any causal LM), or "auto": static where `decode.supported(model)` and the weights are under
    AUTO_STATIC_BYTES (the fused q|k|v and gate|up weights are copies made per call, and on oneDNN the o and down
    weights too, reordered).
    Each path also prefills the prompts its own way, each distinct prompt once per chunk.
    """
    if not prompts:
        raise ValueError("sample: empty prompt list")
    if any(isinstance(p, str) for p in prompts):
        raise ValueError("sample: prompts must be token-id lists, got a string (encode it with the tokenizer first)")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("sample: empty prompt (encode at least one token, e.g. BOS)")
    vocab = model.get_input_embeddings().num_embeddings
    bad = next(((i, t) for i, p in enumerate(prompts) for t in p if not 0 <= t < vocab), None)
    if bad is not None:
        i, t = bad
        raise ValueError(f"sample: prompt {i} holds token id {t}, outside the model's vocabulary [0, {vocab})")
    if n < 1 or max_new_tokens < 1:
        raise ValueError(f"sample: need n >= 1 and max_new_tokens >= 1, got {n=}, {max_new_tokens=}")
    check_temperature(temperature, "sample")
    if not 0 < top_p <= 1:
        raise ValueError(f"sample: top_p must be in (0, 1], got {top_p}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"sample: batch_size must be >= 1, got {batch_size}")
    step = batch_size or len(prompts)
    decode = _decode_path(model, decode)
    check_kv_cache(model, min(step, len(prompts)) * n, _cache_length(max(map(len, prompts)) + max_new_tokens, decode))
    eos = _eos_ids(model, tokenizer, eos_token_ids)
    pad = _pad_id(tokenizer, eos)
    starts = range(0, len(prompts), step)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="sampling", unit="chunk")
    with torch.inference_mode():
        parts = [
            _sample_chunk(
                model, prompts[s : s + step], n, max_new_tokens, temperature, top_p, greedy, generator, eos, pad, decode
            )
            for s in starts
        ]
        out = parts[0] if len(parts) == 1 else cat_rollouts(parts, pad_id=pad)
    # Inference-mode tensors cannot enter autograd later (token_logprobs under grad): copy them out.
    return Rollout(
        input_ids=out.input_ids.clone(),
        attention_mask=out.attention_mask.clone(),
        prompt_len=out.prompt_len,
        response_mask=out.response_mask.clone(),
        group=out.group.clone(),
        texts=_decode(tokenizer, out.response_ids, out.lengths),
        sampler_logp=out.sampler_logp.clone(),
        sampler_entropy=out.sampler_entropy.clone(),
    )


def _decode_path(model, decode: str) -> str:
    """The decode path `sample` takes: 'static', 'compiled' (asked for only) or 'transformers'."""
    if decode == "compiled":
        if (why := supported(model)) is not None:
            raise ValueError(f"sample: decode='compiled' does not support this model: {why}")
        if (why := compiler_missing()) is not None:
            raise ValueError(f"sample: decode='compiled': {why}")
        return decode

    def reason() -> str | None:
        why = supported(model)
        if why is None and decode == "auto":  # the fused projections are copies of the weights: small models only
            size = sum(p.numel() * p.element_size() for p in model.parameters())
            why = "weights over AUTO_STATIC_BYTES" if size > AUTO_STATIC_BYTES else None
        return why

    return _pick_path("sample", "decode", "static", decode, reason, also="compiled")


def _pick_path(where: str, key: str, fast: str, choice: str, reason: Callable[[], str | None], also: str = "") -> str:
    """`fast` or 'transformers' for `choice` in (auto, `fast`, transformers): `fast` when `reason()` (why the model
    does not suit it) is None; `fast` asked for on a model it does not suit is a ValueError naming the reason.
    `also`: one more valid choice, handled by the caller (named in the error)."""
    if choice not in ("auto", fast, "transformers"):
        more = f", {also}" if also else ""
        raise ValueError(f"{where}: {key} must be auto, {fast}{more} or transformers, got {choice!r}")
    if choice == "transformers":
        return "transformers"
    why = reason()
    if choice == fast and why is not None:
        raise ValueError(f"{where}: {key}='{fast}' does not support this model: {why}")
    return "transformers" if why is not None else fast


AUTO_STATIC_BYTES = 2**31  # decode="auto" takes the static path for models up to 2 GiB of weights


def _sample_chunk(model, prompts, n, max_new_tokens, temperature, top_p, greedy, generator, eos, pad,
                  decode: str) -> Rollout:  # fmt: skip
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = _left_pad(prompts, pad, device)  # (U, P)
    U, P = prompt_ids.shape
    B = U * n
    pos = position_ids(prompt_mask)
    length = _cache_length(P + max_new_tokens, decode)
    if decode == "compiled" and not _graph_budget(model, B, length, (temperature, top_p, greedy)):
        decode = "static"  # past torch._dynamo's recompile limit: the static step, not the compiled one run eagerly
    # Prefill the U unique prompts once, then repeat cache and last logits n times (rows of a group adjacent).
    if decode == "transformers":
        step = _TransformersStep(model, prompt_ids, prompt_mask, pos, n)
        last = step.last
    else:
        step = StaticDecoder(model, B, length, whole_cache=decode == "compiled")
        last = step.prefill(prompt_ids, prompt_mask, pos, n)
    logits = _upcast(last).repeat_interleave(n, 0)  # (B, V)
    next_pos = pos[:, -1].repeat_interleave(n, 0) + 1  # (B,)
    eos_t = torch.as_tensor(eos, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    tokens, logps, ents = [], [], []
    tok, lp, ent = _draw(logits, temperature, top_p, None if greedy else _noise(logits, generator))
    for t in range(max_new_tokens):
        tokens.append(tok)  # finished rows' tokens, log-probs and entropies are masked once, after the loop
        logps.append(lp)
        ents.append(ent)
        done = done | torch.isin(tok, eos_t)
        if t == max_new_tokens - 1 or bool(done.all()):
            break
        # drawn in the same order on every path, shaped like every step's logits: (B, V) in the upcast dtype
        noise = None if greedy else _noise(logits, generator)
        if decode == "compiled":  # every row, whole cache: no rows dropped, no Python number changes
            slot = torch.tensor(P + t, device=device)
            tok, lp, ent = _compiled_step()(step, tok, next_pos, slot, temperature, top_p, noise)
        else:
            tok, lp, ent = _draw(_upcast(step.step(tok, next_pos, done)), temperature, top_p, noise)
        next_pos = next_pos + 1
    response = torch.stack(tokens, 1)  # (B, T)
    r_mask = response_mask_from_ids(response, eos)
    keep = r_mask.bool()
    sampler_logp = torch.stack(logps, 1).where(keep, 0.0)
    if not bool(sampler_logp.isfinite().all()):
        raise Diverged("sample: the model's logits are not finite (NaN or inf): its weights are broken")
    response = response.where(keep, pad)
    return Rollout(
        input_ids=torch.cat([prompt_ids.repeat_interleave(n, 0), response], 1),
        attention_mask=torch.cat([prompt_mask.repeat_interleave(n, 0), r_mask.long()], 1),
        prompt_len=P,
        response_mask=r_mask,
        group=torch.arange(U, device=device).repeat_interleave(n),
        texts=[],  # decoded once by `sample`
        sampler_logp=sampler_logp,
        sampler_entropy=torch.stack(ents, 1).where(keep, 0.0),
    )


class _TransformersStep:
    """The decode step through the model's own forward and a `transformers` DynamicCache (any causal LM). Built by
    prefilling the U prompts (U, P) once; `last` (U, V) holds their last positions' logits."""

    def __init__(self, model, prompt_ids: Tensor, prompt_mask: Tensor, positions: Tensor, repeats: int):
        from transformers import DynamicCache

        self.cache = DynamicCache(config=model.config)
        out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                    past_key_values=self.cache, use_cache=True, logits_to_keep=1)  # fmt: skip
        self.last = out.logits[:, -1]
        if repeats > 1:
            self.cache.batch_repeat_interleave(repeats)
        self.model = model
        self.mask = prompt_mask.repeat_interleave(repeats, 0)  # (B, P), grows by one column per step
        self.ones = torch.ones((self.mask.shape[0], 1), dtype=self.mask.dtype, device=self.mask.device)

    def step(self, tokens: Tensor, positions: Tensor, done: Tensor) -> Tensor:
        self.mask = torch.cat([self.mask, self.ones], 1)
        out = self.model(input_ids=tokens[:, None], attention_mask=self.mask, position_ids=positions[:, None],
                         past_key_values=self.cache, use_cache=True)  # fmt: skip
        return out.logits[:, -1]


LOGITS_BUDGET = 2**26  # logits elements per chunk in token_logprobs (256 MiB in float32)
MAX_CHUNK = 1024  # positions per chunk at most: measured ~10% faster than one big chunk on the tiny default


def _check_plain_lm_head(model) -> None:
    # token_logprobs applies lm_head itself; models that post-process logits would silently differ from sampling.
    cfg = model.config
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        v = getattr(cfg, attr, None)
        if v not in (None, 1, 1.0):
            raise ValueError(f"token_logprobs: models with config.{attr}={v} are not supported (logits post-processed)")


def _chunk_logprobs(h: Tensor, targets: Tensor, weight: Tensor, bias: Tensor | None, temperature: float, with_entropy):
    """(N, H) hidden states, (N,) targets -> (N,) log-probs and (N,) entropies (or an empty tensor)."""
    logits = _upcast(F.linear(h, weight, bias)) / temperature  # (N, V)
    logp_all = torch.log_softmax(logits, -1)
    lp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else lp.new_zeros(0)
    return lp, ent


def prompt_runs(rollout: Rollout) -> tuple[Tensor, Tensor] | None:
    """(first, inverse) when some adjacent rows share both their group and their (padded) prompt: `first` (U,) the
    first row of each run, `inverse` (B,) each row's run; None when every row is its own run (nothing to share)."""
    _, inverse, counts = torch.unique_consecutive(rollout.group, return_inverse=True, return_counts=True)
    if counts.numel() == len(rollout):
        return None
    first = counts.cumsum(0) - counts
    P = rollout.prompt_len
    ids, att = rollout.input_ids[:, :P], rollout.attention_mask[:, :P]
    if not (torch.equal(ids, ids[first][inverse]) and torch.equal(att, att[first][inverse])):
        return None  # a group whose rows hold different prompts (hand-built rollouts): no sharing
    return first, inverse


def _forward_path(model, forward: str) -> str:
    """The forward `token_logprobs` takes: 'packed' or 'transformers'."""
    return _pick_path("token_logprobs", "forward", "packed", forward, lambda: packed_supported(model))


def _response_states(model, rollout: Rollout, share_prompts: bool, forward: str = "auto") -> Tensor:
    """(B, T, H) final hidden states at positions P-1 .. P+T-2, the states that predict the response tokens."""
    if _forward_path(model, forward) == "packed":  # supported: no dropout, no gradient checkpointing, in any mode
        return packed_response_states(model, rollout, prompt_runs(rollout) if share_prompts else None)
    P = rollout.prompt_len
    decoder = model.get_decoder()
    pos = rollout.position_ids
    # Eval mode only: in train mode transformers' gradient checkpointing drops the cache (the prompt would be lost)
    # and dropout would draw one mask for a whole group.
    runs = prompt_runs(rollout) if share_prompts and not model.training else None
    if runs is None:
        hidden = decoder(
            input_ids=rollout.input_ids, attention_mask=rollout.attention_mask, position_ids=pos, use_cache=False
        ).last_hidden_state  # (B, P+T, H)
        return hidden[:, P - 1 : -1]
    from transformers import DynamicCache

    first, inverse = runs
    cache = DynamicCache(config=model.config)
    h_prompt = decoder(
        input_ids=rollout.input_ids[first, :P],
        attention_mask=rollout.attention_mask[first, :P],
        position_ids=pos[first, :P],
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state  # (U, P, H)
    if cache.get_seq_length() != P:
        raise RuntimeError(f"token_logprobs: the prompt pass cached {cache.get_seq_length()} of {P} positions")
    cache.batch_select_indices(inverse)  # (U, ...) -> (B, ...) keys and values, differentiable
    h_resp = decoder(
        input_ids=rollout.input_ids[:, P:],
        attention_mask=rollout.attention_mask,
        position_ids=pos[:, P:],
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state  # (B, T, H)
    return torch.cat([h_prompt[inverse, -1:], h_resp[:, :-1]], 1)


def token_logprobs(
    model,
    rollout: Rollout,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    with_entropy: bool = False,
    share_prompts: bool = True,
    forward: str = "auto",
) -> tuple[Tensor, Tensor | None]:
    """Log-probs of the response tokens under `model`, from logits / temperature: (B, T), 0 off the response mask.

    With `with_entropy`, also the entropy of the full next-token distribution (softmax(logits / temperature)) at
    each response position, (B, T), 0 off the mask; else None.

    Runs the base model once for the hidden states, then applies the output head + log-softmax to the masked
    response positions in chunks of `chunk_size` positions (flattened over rows; None = MAX_CHUNK, or fewer to keep
    one chunk's logits under LOGITS_BUDGET elements: ~440 positions for Qwen's 152k vocabulary); when
    gradients are enabled each chunk is wrapped in `torch.utils.checkpoint`, so at most one (chunk_size, V) float32
    logits block is alive at a time.
    With `share_prompts` (default), rows of one group that carry the same prompt are run as the sampler runs them:
    each distinct prompt once, its keys and values serving every row of the group, so the prompt's forward (and
    backward) is paid once per group instead of once per row; gradients through the shared keys and values sum over
    the group, exactly as in separate forwards; `share_prompts=False` runs every row's prompt on its own.
    forward: "packed" (`rpgrl.packed`: prompt and response tokens as one matrix of rows through every layer, the
    attention alone split by prompt; Qwen2/Qwen3/Llama without dropout or gradient checkpointing), "transformers"
    (the decoder's own forward, twice with shared prompts: prompts, then responses over the indexed cache; one plain
    forward when nothing is shared or in train mode) or "auto": packed where `packed.supported(model)`.
    Differentiable when called with grad enabled; the caller chooses train/eval mode.
    """
    check_temperature(temperature, "token_logprobs")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"token_logprobs: chunk_size must be >= 1, got {chunk_size}")
    _check_plain_lm_head(model)
    P = rollout.prompt_len
    if P < 1:
        raise ValueError("token_logprobs: rollout has no prompt token to condition the first response token on")
    head = model.get_output_embeddings()
    h = _response_states(model, rollout, share_prompts, forward)  # (B, T, H): the state before each response token
    keep = rollout.response_mask.bool()  # (B, T)
    h_sel, tgt = h[keep], rollout.response_ids[keep]  # (N, H), (N,)
    lp, ent = head_logprobs(h_sel, tgt, head.weight, head.bias, temperature, chunk_size, with_entropy)
    logp = torch.zeros(keep.shape, dtype=lp.dtype, device=h.device).masked_scatter(keep, lp)
    entropy = None
    if with_entropy:
        entropy = torch.zeros(keep.shape, dtype=lp.dtype, device=h.device).masked_scatter(keep, ent)
    return logp, entropy


def head_logprobs(
    h: Tensor,
    targets: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor]:
    """Log-probs of `targets` (N,) under softmax(h W^T + b) / temperature for hidden states h (N, H), the output head
    W (V, H), in chunks of `chunk_size` positions (None: MAX_CHUNK, or fewer to keep one chunk's logits under
    LOGITS_BUDGET elements). With gradients enabled each chunk is recomputed in backward (`torch.utils.checkpoint`),
    so at most one (chunk, V) float32 logits block is alive, not (N, V). Returns (N,) log-probs and (N,) entropies
    of the full distribution (an empty tensor without `with_entropy`), in float32 or wider."""
    if chunk_size is None:
        chunk_size = max(1, min(MAX_CHUNK, LOGITS_BUDGET // weight.shape[0]))
    lps, ents = [], []
    for s in range(0, targets.shape[0], chunk_size):
        args = (h[s : s + chunk_size], targets[s : s + chunk_size], weight, bias, temperature, with_entropy)
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(*args)
        lps.append(lp)
        ents.append(ent)
    if not lps:
        empty = _upcast(h[:0, 0])
        return empty, empty
    return torch.cat(lps), torch.cat(ents)
