"""Roofline: each phase of an RL step measured against this machine's own float32 matrix-multiply rate.

Run (heavy: take the shared lock):  flock /tmp/rpgrl-heavy.lock .venv/bin/python benchmarks/bench_roofline.py
Writes benchmarks/results/roofline.json and roofline.md.

In one process, 2 torch threads:
  1. `gemm_gflops`: the float32 GEMM rate (the faster of torch.mm, the BLAS, and oneDNN on a weight reordered once,
     as rpgrl.decode runs it; best of several repetitions; `gemm_kernels` has both) at a large square shape, measured
     at the start and again after each configuration, the best of them (`gemm_gflops_samples`: a shared machine
     drifts, and its limit is the best it showed), and at the shapes the 31M model's decode and update multiply
     (recorded under `gemm_shapes`).
  2. Per configuration (`sizes`): the 0.8M and 31M models of bench_trl at its step shape (4 prompts x G=8 x 16 new
     tokens), and the default's step shape (the tiny default model, 32 prompts x G=8 x 48 tokens, one mini-batch of
     4 prompts for the update). FLOPs are counted from the model config and the token counts: every linear layer,
     attention (scores and weighted sum over the actual context), the output head where it is applied; backward =
     2 x forward. Generation runs without a stop token (every row decodes the full length), so tokens and FLOPs
     are exact. Each phase's time is the best of `--reps` runs; `fraction_of_peak` = achieved GFLOP/s / gemm_gflops.
       generation               rpgrl.sample as the trainer runs it (decode="auto": the static-cache path)
       generation_transformers  the same with decode="transformers" (the model's own forward, today's baseline)
       generation_compiled      the same with decode="compiled" (opt-in; where a C++ compiler works), its first
                                call (compiling from scratch, Inductor's disk cache off) as `first_call_s`
       update                   token_logprobs + rpg_loss + backward + gradient clipping + the trainer's optimizer
                                step (`make_optimizer` of the default config: fused AdamW) on the generated batch,
                                as the trainer runs it (forward="auto": the packed forward, `rpgrl.packed`)
       update_transformers      the same with forward="transformers" (the decoder's own forward, twice: the
                                prompts, then the responses over their indexed cache)
     Each phase's `products` (`product_share`: its weight products replayed alone, back to back as they ran and,
     generously, each on its fastest kernel) give `max_fraction_if_only_gemms` / `max_fraction_fastest_kernels`
     (and for generation `max_speedup_if_only_gemms` / `max_speedup_fastest_kernels`): the value if everything
     else took no time. The second is the bound that rules a missed target out or not (`targets`). For the 31M
     update, `product_kernels_cold` (`update_product_kernels`): its products' rates in sequence over every layer's
     own tensors, forward, input and weight gradient, on the BLAS and on oneDNN (is the gap in the products?).
  3. `logprob_memory`: peak memory of log-probs and entropy with their backward at V = 151,936 (Qwen's vocabulary),
     hidden 1024, T = 4096 positions: rpgrl.rollout.head_logprobs (chunked, recomputed in backward) against the
     naive full-logits computation; each in its own subprocess, peak RSS above the RSS after the inputs exist.
  4. `scaling`: the step time (generation + update) of the 0.8M model when G doubles and, separately, when the
     response length doubles, as ratios to the base step.
  5. `targets`: issue 12's targets measured here, each with its value, met or not and, when missed, its bound.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench_trl import MAX_NEW_TOKENS, PROMPTS_PER_STEP, RESULTS, SIZES, G, hardware, versions

THREADS = 2
NO_STOP = 10**6  # an EOS id no model emits: every row decodes max_new_tokens tokens
MEMORY = dict(vocab=151_936, hidden=1024, positions=4096)


def _best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


GEMM_OPS = ("aten::mm", "aten::addmm", "aten::linear", "mkldnn::_linear_pointwise")  # weight products (BLAS, oneDNN)


def record_products(fn) -> list:
    """Run `fn` once and return its weight products (GEMM_OPS) as (op, args, kwargs), in order, with the tensors they
    read (a dispatch mode sees each op once, autograd's backward products included)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Products(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func._schema.name in GEMM_OPS:
                self.calls.append((func, args, kwargs))
            return func(*args, **kwargs)

    with Products() as mode:
        fn()
    return mode.calls


def _on_onednn(func, args, kwargs):
    """The same product on oneDNN with its right operand reordered now (not timed: a generous alternative), or None
    when there is none (already oneDNN, or not a plain 2-D product): rpgrl.decode's own oneDNN product."""
    from rpgrl.decode import _linear, _pack

    name, bias = func._schema.name, None
    if name == "aten::mm":
        a, b = args
    elif name == "aten::addmm" and not kwargs and len(args) == 3 and args[0].dim() == 1:
        bias, a, b = args
    elif name == "aten::linear" and args[0].dim() == 2:
        a, b = args[0], args[1].t()
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
    else:
        return None
    if a.dim() != 2 or b.dim() != 2:
        return None
    w = _pack(b.t().contiguous(), "onednn", a.shape[0])
    return lambda: _linear(a.contiguous(), w, bias, "onednn")


def product_share(fn, reps: int) -> dict:
    """How much of `fn`'s wall time its weight products take, measured by replaying them (`record_products`) with
    nothing in between; the profiler's per-op times are not used (it bills part of a multi-threaded product to the
    op after it: a SiLU and a multiply after two 556 x 512 x 1536 products profiled at 886 us while adding 206 us to
    the wall time). Returns `whole_s` (fn, best of reps), `products_s` (the products back to back as they ran, best
    of reps, interleaved with fn), `fastest_s` (the sum over products of each alone, cache-hot, on the faster of its
    own kernel and oneDNN with its right operand reordered for free: a generous floor), and the shares of whole_s.
    The recorded products keep their inputs (one phase's activations and gradients) alive until this returns.
    1 / share bounds the speed-up of anything that keeps those products as they run (or on their fastest kernels)."""
    import torch

    from rpgrl.decode import onednn_available

    calls = record_products(fn)
    onednn = onednn_available(torch.float32, torch.device("cpu"))

    def replay():
        with torch.inference_mode():
            for func, args, kwargs in calls:
                func(*args, **kwargs)

    whole, products = [], []
    for _ in range(reps):  # interleaved: the same machine for both
        whole.append(_best(fn, 1))
        products.append(_best(replay, 1))
    fastest = 0.0
    with torch.inference_mode():
        for func, args, kwargs in calls:
            t = _best(lambda func=func, args=args, kwargs=kwargs: func(*args, **kwargs), 3)
            alt = _on_onednn(func, args, kwargs) if onednn else None
            fastest += min(t, _best(alt, 3)) if alt is not None else t
    w = min(whole)
    return {"products": len(calls), "whole_s": w, "products_s": min(products), "fastest_s": fastest,
            "share": min(products) / w, "share_fastest_kernels": fastest / w}  # fmt: skip


def gemm_gflops(m: int, n: int, k: int, reps: int = 7) -> float:
    """The machine's float32 rate for an (m, k) x (k, n) product: the faster of its kernels (`gemm_kernel_gflops`)."""
    return max(gemm_kernel_gflops(m, n, k, reps).values())


def gemm_kernel_gflops(m: int, n: int, k: int, reps: int = 7) -> dict[str, float]:
    """GFLOP/s of an (m, k) x (k, n) float32 product by torch.mm (`blas`: MKL in the CPU wheel) and, where the build
    has it, by oneDNN with the (n, k) weight reordered once (`onednn`: what rpgrl.decode runs from hidden 256 on; on
    this project's AMD EPYC at 94de6aa: x1.28 MKL's rate at 2048^3, x1.9-2.9 at the 31M decode's 32 rows)."""
    import torch

    from rpgrl.decode import _linear, _pack, onednn_available

    a, b = torch.randn(m, k), torch.randn(k, n)
    c = torch.empty(m, n)
    inner = max(1, int(2e9 / (2 * m * n * k)))  # ~2 GFLOP per timed repetition
    kernels = {"blas": lambda: torch.mm(a, b, out=c)}
    if onednn_available(torch.float32, torch.device("cpu")):
        w = _pack(b.t().contiguous(), "onednn", m)
        kernels["onednn"] = lambda: _linear(a, w, None, "onednn")
    rates = {}
    for name, f in kernels.items():
        f()

        def run(f=f):
            for _ in range(inner):
                f()

        rates[name] = 2 * m * n * k * inner / _best(run, reps) / 1e9
    return rates


def update_product_kernels(arch: dict, rows: int, reps: int = 5) -> dict[str, dict[str, float]]:
    """GFLOP/s of the update's weight products as it runs them, in sequence over every layer's own tensors (so
    cache-cold, unlike `gemm_kernel_gflops`' one product repeated): the forward x W^T, the input gradient dY W and
    the weight gradient dY^T X at `rows` packed rows, on the BLAS (torch.mm, what autograd runs) and on oneDNN with
    the right operand reordered in the timing (it changes every step). {kernel: {product: GFLOP/s}}."""
    import torch

    from rpgrl.decode import _linear, _pack, onednn_available

    h, f, hd = arch["hidden"], arch["ffn"], arch["hidden"] // arch["heads"]
    outs = [(h, h), (h, arch["kv_heads"] * hd), (h, arch["kv_heads"] * hd), (h, h), (h, f), (h, f), (f, h)]
    g = torch.Generator().manual_seed(0)

    def tensors(k: int, m: int) -> tuple:  # W (m, k), X (rows, k), dY (rows, m)
        return tuple(torch.randn(*shape, generator=g) for shape in ((m, k), (rows, k), (rows, m)))

    layers = [tensors(k, m) for _ in range(arch["layers"]) for k, m in outs]
    flop = sum(2 * rows * w.numel() for w, _, _ in layers)
    products = {
        "blas": {
            "forward": lambda w, x, dy: torch.mm(x, w.t()),
            "input_grad": lambda w, x, dy: torch.mm(dy, w),
            "weight_grad": lambda w, x, dy: torch.mm(dy.t(), x),
        }
    }
    if onednn_available(torch.float32, torch.device("cpu")):
        products["onednn"] = {
            "forward": lambda w, x, dy: _linear(x, _pack(w, "onednn", rows), None, "onednn"),
            "input_grad": lambda w, x, dy: _linear(dy, _pack(w.t().contiguous(), "onednn", rows), None, "onednn"),
            "weight_grad": lambda w, x, dy: _linear(
                dy.t().contiguous(), _pack(x.t().contiguous(), "onednn", w.shape[0]), None, "onednn"
            ),
        }
    out = {}
    for kernel, fns in products.items():
        out[kernel] = {}
        for name, fn in fns.items():

            def run(fn=fn):
                for w, x, dy in layers:
                    fn(w, x, dy)

            run()
            out[kernel][name] = flop / _best(run, reps) / 1e9
    return out


# ---------------------------------------------------------------------------------------------------------------
# FLOP counts


def linear_flops_per_token(cfg) -> float:
    """2 x the weights of every linear layer a token passes through below the output head."""
    h, nh, nkv, inter = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    hd = getattr(cfg, "head_dim", None) or h // nh
    per_layer = h * (nh + 2 * nkv) * hd + nh * hd * h + 3 * h * inter
    return 2.0 * per_layer * cfg.num_hidden_layers


def attention_flops(cfg, context: int) -> float:
    """Scores and weighted sum for one query over `context` keys, all layers."""
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 4.0 * cfg.num_attention_heads * hd * context * cfg.num_hidden_layers


def head_flops(cfg) -> float:
    return 2.0 * cfg.hidden_size * cfg.vocab_size


def generation_flops(cfg, prompts: int, rows: int, prompt_len: int, new_tokens: int) -> float:
    """Prefill of each prompt once (logits at its last position), then new_tokens - 1 decode steps of every row."""
    f = prompts * (prompt_len * linear_flops_per_token(cfg) + head_flops(cfg))
    f += prompts * sum(attention_flops(cfg, p + 1) for p in range(prompt_len))
    for t in range(new_tokens - 1):
        f += rows * (linear_flops_per_token(cfg) + attention_flops(cfg, prompt_len + t + 1) + head_flops(cfg))
    return f


def update_flops(cfg, prompts: int, rows: int, prompt_len: int, new_tokens: int) -> float:
    """3 x the forward of token_logprobs: each prompt once, every response on top, the head on response tokens."""
    fwd = prompts * prompt_len * linear_flops_per_token(cfg) + rows * new_tokens * linear_flops_per_token(cfg)
    fwd += prompts * sum(attention_flops(cfg, p + 1) for p in range(prompt_len))
    fwd += rows * sum(attention_flops(cfg, prompt_len + t + 1) for t in range(new_tokens))
    fwd += rows * new_tokens * head_flops(cfg)
    return 3.0 * fwd


# ---------------------------------------------------------------------------------------------------------------
# Phases


def _setup(arch: dict, prompts: int):
    from rpgrl.models import build_char_tokenizer, build_tiny_model
    from rpgrl.rewards.synthetic import CHARS, make_problems
    from rpgrl.trainer.sft import encode_prompts

    tok = build_char_tokenizer(CHARS)
    model = build_tiny_model(tok, hidden=arch["hidden"], layers=arch["layers"], heads=arch["heads"],
                             kv_heads=arch["kv_heads"], ffn=arch["ffn"], seed=0)  # fmt: skip
    prompt_ids = encode_prompts(tok, make_problems(prompts, seed=0, split="train"))
    width = max(map(len, prompt_ids))
    prompt_ids = [p for p in prompt_ids if len(p) == width][:prompts] or prompt_ids[:prompts]  # one prompt length
    while len(prompt_ids) < prompts:
        prompt_ids.append(prompt_ids[len(prompt_ids) % len(prompt_ids)])
    return tok, model, prompt_ids


def trainer_optimizer(model):
    """The optimizer the trainer builds for the default config (fused AdamW), at a small learning rate."""
    import dataclasses

    from rpgrl.presets import get_preset
    from rpgrl.trainer.setup import make_optimizer

    cfg = get_preset("default")
    cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=1e-6))
    return make_optimizer(cfg, list(model.parameters()))


def update_step(model, opt, batch, forward: str = "auto") -> None:
    """One update as the trainer runs it: token_logprobs (`forward`) + rpg_loss (RPGOptions' defaults, random
    advantages, old log-probs = the update's own, detached) + backward + gradient clipping + `opt`'s step."""
    import torch

    from rpgrl.objectives.rpg import rpg_loss
    from rpgrl.options import RPGOptions
    from rpgrl.rollout import token_logprobs

    logp, _ = token_logprobs(model, batch, forward=forward)
    adv = torch.randn(logp.shape[0])
    rpg_loss(logp, logp.detach(), adv, batch.response_mask, **RPGOptions().kwargs()).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure(name: str, arch: dict, prompts: int, g: int, new_tokens: int, update_prompts: int, reps: int) -> dict:
    import torch

    from rpgrl.rollout import compiler_missing, sample

    tok, model, prompt_ids = _setup(arch, prompts)
    cfg = model.config
    P = max(map(len, prompt_ids))
    rows = prompts * g
    out: dict = {"arch": arch, "prompts": prompts, "group_size": g, "new_tokens": new_tokens, "prompt_len": P,
                 "params": sum(p.numel() for p in model.parameters())}  # fmt: skip

    def gen(decode):
        gen_ = torch.Generator().manual_seed(0)
        return sample(model, tok, prompt_ids, n=g, max_new_tokens=new_tokens, generator=gen_, eos_token_ids=NO_STOP,
                      decode=decode)  # fmt: skip

    flops = generation_flops(cfg, prompts, rows, P, new_tokens)
    paths = {"generation": "auto", "generation_transformers": "transformers"}
    if compiler_missing() is None:
        paths["generation_compiled"] = "compiled"
    first = None
    if "generation_compiled" in paths:  # its first call compiles the graph: timed with Inductor's disk cache off
        from torch._inductor import config as inductor_config

        with inductor_config.patch(force_disable_caches=True):
            first = _best(lambda: gen("compiled"), 1)
    times = {d: [] for d in paths.values()}
    for _ in range(reps):  # interleaved, so all paths see the same machine
        for d in times:
            times[d].append(_best(lambda d=d: gen(d), 1))
    for key, d in paths.items():
        s = min(times[d])
        out[key] = {
            "seconds": s,
            "tokens_per_s": rows * new_tokens / s,
            "gflop": flops / 1e9,
            "gflops": flops / s / 1e9,
        }
    for key in paths.keys() - {"generation_transformers"}:
        out[key]["speedup_vs_transformers"] = out["generation_transformers"]["seconds"] / out[key]["seconds"]
    if first is not None:
        out["generation_compiled"]["first_call_s"] = first  # compiling from scratch, plus one call
    out["generation"]["products"] = product_share(lambda: gen("auto"), reps)

    rollout = gen("auto")
    keep = torch.arange(rows) < update_prompts * g  # the update's mini-batch: the first update_prompts groups
    batch = rollout.select(keep.nonzero().squeeze(-1)) if update_prompts < prompts else rollout
    opt = trainer_optimizer(model)

    def update(forward="auto"):
        update_step(model, opt, batch, forward)

    update()  # AdamW state allocated outside the timing
    uf = update_flops(cfg, update_prompts, update_prompts * g, P, new_tokens)
    times = {f: [] for f in ("auto", "transformers")}
    for _ in range(reps):  # interleaved, as generation
        for f in times:
            times[f].append(_best(lambda f=f: update(f), 1))
    for key, f in (("update", "auto"), ("update_transformers", "transformers")):
        s = min(times[f])
        out[key] = {"seconds": s, "tokens_per_s": update_prompts * g * new_tokens / s, "gflop": uf / 1e9,
                    "gflops": uf / s / 1e9}  # fmt: skip
    out["update"]["speedup_vs_transformers"] = out["update_transformers"]["seconds"] / out["update"]["seconds"]
    out["update"]["products"] = product_share(update, reps)
    gen_, upd = out["generation"], out["update"]
    print(f"{name}: generation {gen_['gflops']:.2f} GFLOP/s (x{gen_['speedup_vs_transformers']:.2f} vs transformers), "
          f"update {upd['gflops']:.2f} GFLOP/s (x{upd['speedup_vs_transformers']:.2f})", flush=True)  # fmt: skip
    return out


def step_seconds(arch: dict, g: int, new_tokens: int, reps: int) -> float:
    """Generation + update of one full batch (PROMPTS_PER_STEP prompts x g rows x new_tokens)."""
    import torch

    from rpgrl.objectives.rpg import rpg_loss
    from rpgrl.rollout import sample, token_logprobs

    tok, model, prompt_ids = _setup(arch, PROMPTS_PER_STEP)
    opt = trainer_optimizer(model)

    def step():
        r = sample(model, tok, prompt_ids, n=g, max_new_tokens=new_tokens, generator=torch.Generator().manual_seed(0),
                   eos_token_ids=NO_STOP)  # fmt: skip
        logp, _ = token_logprobs(model, r)
        adv = torch.randn(logp.shape[0])
        rpg_loss(logp, logp.detach(), adv, r.response_mask, divergence="urkl", style="reinforce", beta=1e-4,
                 clip="dual").loss.backward()  # fmt: skip
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    return _best(step, reps)


def decode_profile(arch: dict, steps: int = 16) -> dict:
    """One static-cache decode loop (G x PROMPTS_PER_STEP rows, `steps` steps after the prefill) timed eager and as
    decode="compiled" runs it (`forward_at` under torch.compile: static shapes, C++ wrapper, on a whole-cache
    decoder, whose oneDNN products are the `rpgrl::onednn_*` custom ops), per step; `products`: the weight
    products' share of the whole eager loop, the decoder's build (its weight reorders) and the prefill included
    (`product_share`: a fresh cache per call)."""
    import torch
    from torch._inductor import config as inductor_config

    from rpgrl.decode import StaticDecoder
    from rpgrl.rollout import COMPILE_OPTIONS, position_ids

    tok, model, prompt_ids = _setup(arch, PROMPTS_PER_STEP)
    B, P = PROMPTS_PER_STEP * G, len(prompt_ids[0])
    ids = torch.tensor(prompt_ids).repeat_interleave(G, 0)
    mask = torch.ones_like(ids)

    def decoder(whole_cache=False):
        dec = StaticDecoder(model, B, P + steps + 1, whole_cache=whole_cache)
        dec.prefill(ids, mask, position_ids(mask), 1)
        return dec

    tokens, pos = ids[:, -1], torch.full((B,), P)

    def loop(fn, whole_cache=False):
        dec = decoder(whole_cache)
        t = time.perf_counter()
        for i in range(steps):
            fn(dec, tokens, pos + i) if not whole_cache else fn(dec, tokens, pos + i, torch.tensor(P + i))
        return (time.perf_counter() - t) / steps

    with torch.inference_mode():
        loop(StaticDecoder._forward)
        products = product_share(lambda: loop(StaticDecoder._forward), 3)
        eager = min(loop(StaticDecoder._forward) for _ in range(3))
        compiled_fn = torch.compile(StaticDecoder.forward_at, dynamic=False, fullgraph=True, options=COMPILE_OPTIONS)
        t = time.perf_counter()
        with inductor_config.patch(force_disable_caches=True):  # compiled from scratch
            first = loop(compiled_fn, True) * steps
        compiled = min(loop(compiled_fn, True) for _ in range(3))
    return {"rows": B, "products": products, "max_speedup_at_these_gemm_rates": 1 / products["share"],
            "eager_ms_per_step": 1e3 * eager, "compiled_ms_per_step": 1e3 * compiled,
            "compile_first_loop_s": first, "compile_wall_s": time.perf_counter() - t}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# Memory at a real vocabulary (one subprocess per variant)


def memory_child(variant: str) -> None:
    import torch

    from rpgrl.rollout import head_logprobs

    torch.set_num_threads(THREADS)
    V, H, T = MEMORY["vocab"], MEMORY["hidden"], MEMORY["positions"]
    gen = torch.Generator().manual_seed(0)
    h = (torch.randn(T, H, generator=gen) * 0.05).requires_grad_()
    w = (torch.randn(V, H, generator=gen) * 0.05).requires_grad_()
    tgt = torch.randint(0, V, (T,), generator=gen)
    base = _rss_mb()
    t = time.perf_counter()
    if variant == "naive":
        logp_all = torch.log_softmax(h @ w.T, -1)  # (T, V)
        lp = logp_all.gather(-1, tgt[:, None]).squeeze(-1)
        ent = -(logp_all.exp() * logp_all).sum(-1)
    else:
        lp, ent = head_logprobs(h, tgt, w, None, 1.0, None, True)
    (lp.sum() + 0.1 * ent.sum()).backward()
    seconds = time.perf_counter() - t
    check = [lp.sum().item(), ent.sum().item(), h.grad.norm().item(), w.grad.norm().item()]
    print("RESULT " + json.dumps({"peak_above_inputs_mb": _rss_mb() - base, "seconds": seconds, "check": check}))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def logprob_memory() -> dict:
    res = {}
    for variant in ("chunked", "naive"):
        done = subprocess.run([sys.executable, __file__, "--memory-child", variant], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"memory {variant} failed:\n{done.stderr[-3000:]}")
        res[variant] = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))[7:])
    a, b = res["chunked"]["check"], res["naive"]["check"]
    same = all(abs(x - y) <= 1e-3 * max(1.0, abs(y)) for x, y in zip(a, b, strict=True))
    ratio = res["chunked"]["peak_above_inputs_mb"] / res["naive"]["peak_above_inputs_mb"]
    return {**MEMORY, **res, "same_values": same, "ratio_to_naive": ratio}


# ---------------------------------------------------------------------------------------------------------------


def _fractions_and_bounds(s: dict, peak: float) -> None:
    """Each phase's fraction of the GEMM rate `peak`, and for generation and update the values if everything but
    their weight products took no time: with the products as they ran, and with each on its fastest kernel."""
    for phase in ("generation", "generation_transformers", "generation_compiled", "update", "update_transformers"):
        if phase in s:
            s[phase]["fraction_of_peak"] = s[phase]["gflops"] / peak
    for phase in ("generation", "update"):
        p = s[phase]["products"]
        s[phase]["max_fraction_if_only_gemms"] = s[phase]["fraction_of_peak"] / p["share"]
        s[phase]["max_fraction_fastest_kernels"] = s[phase]["fraction_of_peak"] / p["share_fastest_kernels"]
    gen_ = s["generation"]
    gen_["max_speedup_if_only_gemms"] = gen_["speedup_vs_transformers"] / gen_["products"]["share"]
    gen_["max_speedup_fastest_kernels"] = gen_["speedup_vs_transformers"] / gen_["products"]["share_fastest_kernels"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--memory-child", choices=("chunked", "naive"))
    a = ap.parse_args()
    if a.memory_child:
        return memory_child(a.memory_child)
    import torch

    from rpgrl.presets import get_preset

    torch.set_num_threads(THREADS)
    t0 = time.perf_counter()
    big = SIZES["30m"]
    h, inter = big["hidden"], big["ffn"]
    qkv = (big["heads"] + 2 * big["kv_heads"]) * (h // big["heads"])
    shapes = {
        "square 2048": (2048, 2048, 2048),
        "decode q|k|v 32x512x1024": (32, qkv, h),
        "decode gate|up 32x512x3072": (32, 2 * inter, h),
        "update mlp 1024x512x1536": (1024, inter, h),
    }
    kernels = {k: gemm_kernel_gflops(*v) for k, v in shapes.items()}
    gemm = {k: max(v.values()) for k, v in kernels.items()}
    samples = [gemm["square 2048"]]  # and again after each configuration: the limit is the best of them
    print(f"GEMM: {json.dumps({k: round(v, 1) for k, v in gemm.items()})}", flush=True)

    d = get_preset("default")
    default_arch = dict(hidden=d.model.hidden_size, layers=d.model.num_layers, heads=d.model.num_heads,
                        kv_heads=d.model.num_kv_heads, ffn=d.model.intermediate_size)  # fmt: skip
    configs = {
        "1m": (SIZES["1m"], PROMPTS_PER_STEP, G, MAX_NEW_TOKENS, PROMPTS_PER_STEP),
        "30m": (big, PROMPTS_PER_STEP, G, MAX_NEW_TOKENS, PROMPTS_PER_STEP),
        "default": (
            default_arch,
            d.rollout.prompts_per_step,
            d.rollout.group_size,
            d.rollout.max_new_tokens,
            d.train.mini_batch_prompts,
        ),  # fmt: skip
    }
    sizes = {}
    for name, c in configs.items():
        sizes[name] = measure(name, *c, reps=a.reps)
        samples.append(gemm_gflops(*shapes["square 2048"]))
    peak = max(samples)
    for s in sizes.values():
        _fractions_and_bounds(s, peak)

    base = step_seconds(SIZES["1m"], G, MAX_NEW_TOKENS, a.reps)
    scaling = {"base_s": base, "G_x2": step_seconds(SIZES["1m"], 2 * G, MAX_NEW_TOKENS, a.reps) / base,
               "T_x2": step_seconds(SIZES["1m"], G, 2 * MAX_NEW_TOKENS, a.reps) / base}  # fmt: skip
    s30 = sizes["30m"]
    update_rows = PROMPTS_PER_STEP * s30["prompt_len"] + PROMPTS_PER_STEP * G * MAX_NEW_TOKENS  # packed, no EOS
    s30["update"]["product_kernels_cold"] = update_product_kernels(big, update_rows)
    print(f"31M update products, cache-cold: {json.dumps(s30['update']['product_kernels_cold'])}", flush=True)
    decode = {name: decode_profile(SIZES[name]) for name in ("1m", "30m")}
    print(f"decode: {json.dumps(decode)}", flush=True)
    memory = logprob_memory()
    info = {
        "commit": _commit(),
        "versions": versions(), "hardware": hardware() | {"torch_threads": THREADS},
        "gemm_gflops": peak, "gemm_gflops_samples": samples, "gemm_shapes": gemm, "gemm_kernels": kernels,
        "sizes": sizes,
        "decode_profile": decode, "scaling": scaling,
        "logprob_memory": memory,
        "seconds": time.perf_counter() - t0,
    }  # fmt: skip
    info["targets"] = targets(info)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "roofline.json").write_text(json.dumps(info, indent=1) + "\n")
    (RESULTS / "roofline.md").write_text(markdown(info))
    print(markdown(info))


def targets(info: dict) -> list[dict]:
    """Issue 12's targets that this benchmark measures: the value, whether it is met and, for a missed one, the
    measured bounds (the value if everything but the weight products took no time: with the products as they ran,
    and with each on its fastest kernel) and whether the second, the generous one, rules the target out."""
    s1, s30, sc = info["sizes"]["1m"], info["sizes"]["30m"], info["scaling"]

    def row(name: str, value: float, op: str, threshold: float, phase: dict | None = None, key: str = "") -> dict:
        met = value >= threshold if op == ">=" else value <= threshold
        as_run = None if phase is None else phase[f"max_{key}_if_only_gemms"]
        fastest = None if phase is None else phase[f"max_{key}_fastest_kernels"]
        ruled_out = None if met or fastest is None else fastest < threshold
        return {"target": name, "value": value, "op": op, "threshold": threshold, "met": met,
                "bound_if_only_gemms": as_run, "bound_fastest_kernels": fastest, "ruled_out": ruled_out}  # fmt: skip

    gen1, gen30, upd30 = s1["generation"], s30["generation"], s30["update"]

    def compiled(s: dict, size: str, threshold: float) -> list[dict]:
        if "generation_compiled" not in s:
            return []
        return [row(f"generation speed-up over the transformers path, {size}, decode='compiled' (opt-in)",
                    s["generation_compiled"]["speedup_vs_transformers"], ">=", threshold)]  # fmt: skip

    return [
        row("generation speed-up over the transformers path, 0.8M, decode='auto' (static)",
            gen1["speedup_vs_transformers"], ">=", 2.0, gen1, "speedup"),
        *compiled(s1, "0.8M", 2.0),
        row("generation speed-up over the transformers path, 31M, decode='auto' (static)",
            gen30["speedup_vs_transformers"], ">=", 1.5, gen30, "speedup"),
        *compiled(s30, "31M", 1.5),
        row("generation, fraction of the GEMM rate, 31M", gen30["fraction_of_peak"], ">=", 0.40, gen30, "fraction"),
        row("update, fraction of the GEMM rate, 31M", upd30["fraction_of_peak"], ">=", 0.75, upd30, "fraction"),
        row("log-prob memory, ratio to naive", info["logprob_memory"]["ratio_to_naive"], "<=", 0.25),
        row("step time when G doubles", sc["G_x2"], "<=", 2.1),
        row("step time when the response length doubles", sc["T_x2"], "<=", 2.1),
    ]  # fmt: skip


def _commit() -> str:
    git = ["git", "-C", str(Path(__file__).resolve().parents[1])]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "src"], capture_output=True, text=True).stdout.strip()
    return commit + (" (src modified)" if dirty else "")


def _targets_markdown(info: dict) -> list[str]:
    """The targets table, after a line on the bounds and each phase's product share."""
    shares = "; ".join(f"{n} {ph} {s[ph]['products']['share']:.0%} ({s[ph]['products']['share_fastest_kernels']:.0%})"
                       for n, s in info["sizes"].items() for ph in ("generation", "update"))  # fmt: skip
    lines = ["", "Targets (issue 12). Bounds: the value if everything but the weight products took no time, from "
              "each phase's products replayed alone (`product_share`): as they ran, back to back, and each alone, "
              "cache-hot, on the faster of its kernel and oneDNN with a weight reordered for free (generous). A "
              "missed target is ruled out when even the generous bound misses it. The products' share of each "
              f"phase, as run (fastest kernels): {shares}.", "",
              "| target | measured | met | bound, products as run | bound, fastest kernels | ruled out |",
              "|---|---:|---|---:|---:|---|"]  # fmt: skip

    def num(x):
        return "-" if x is None else f"{x:.3g}"

    for t in info["targets"]:
        verdict = "-" if t["ruled_out"] is None else ("yes" if t["ruled_out"] else "no")
        met, bounds = (
            "yes" if t["met"] else "no",
            f"{num(t['bound_if_only_gemms'])} | {num(t['bound_fastest_kernels'])}",
        )
        lines.append(
            f"| {t['target']} {t['op']} {t['threshold']:g} | {t['value']:.3g} | {met} | {bounds} | {verdict} |"
        )
    return lines


def markdown(info: dict) -> str:
    v, hw = info["versions"], info["hardware"]
    lines = [
        "# Roofline: each phase against this machine's float32 GEMM rate",
        "",
        f"commit {info['commit']}; torch {v['torch']}, transformers {v['transformers']}, python {v['python']}; "
        f"{hw['cpu']}, {hw['torch_threads']} threads of {hw['logical_cpus']} logical CPUs. "
        "Written by `benchmarks/bench_roofline.py` (its docstring says what is counted).",
        "",
        f"Measured GEMM rate (float32, 2048^3, the faster of torch.mm and oneDNN, the best of "
        f"{', '.join(f'{g:.0f}' for g in info['gemm_gflops_samples'])} measured before and after each "
        f"configuration): **{info['gemm_gflops']:.1f} GFLOP/s**; at the 31M model's shapes: "
        + ", ".join(f"{k} {g:.1f}" for k, g in info["gemm_shapes"].items() if k != "square 2048")
        + ". Per kernel (GFLOP/s, blas = torch.mm, onednn = a weight reordered once): "
        + "; ".join(f"{k}: " + ", ".join(f"{n} {g:.1f}" for n, g in v.items()) for k, v in info["gemm_kernels"].items())
        + ".",
        "",
        "| config | params | step shape | phase | tokens/s | GFLOP/s | fraction of GEMM rate |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    for name, s in info["sizes"].items():
        shape = f"{s['prompts']}x{s['group_size']}x{s['new_tokens']} (prompt {s['prompt_len']})"
        for phase in ("generation_transformers", "generation", "generation_compiled", "update_transformers", "update"):
            if phase not in s:
                continue
            p = s[phase]
            label = {"generation": "generation (static cache)", "generation_transformers": "generation (transformers)",
                     "generation_compiled": "generation (decode='compiled', opt-in)", "update": "update (packed)",
                     "update_transformers": "update (transformers)"}[phase]  # fmt: skip
            lines.append(f"| {name} | {s['params'] / 1e6:.2f}M | {shape} | {label} | {p['tokens_per_s']:.0f} | "
                         f"{p['gflops']:.2f} | {p['fraction_of_peak']:.1%} |")  # fmt: skip
    lines += ["", "Generation speed-up of the static-cache decode over the transformers path: "
              + ", ".join(f"{n} x{s['generation']['speedup_vs_transformers']:.2f}" for n, s in info["sizes"].items())
              + "; of decode='compiled' (opt-in: its first call compiles; from scratch, with that call): "
              + ", ".join(f"{n} x{s['generation_compiled']['speedup_vs_transformers']:.2f} "
                          f"({s['generation_compiled']['first_call_s']:.0f} s)"
                          for n, s in info["sizes"].items() if "generation_compiled" in s)
              + "; of the packed update over the transformers forward: "
              + ", ".join(f"{n} x{s['update']['speedup_vs_transformers']:.2f}" for n, s in info["sizes"].items())
              + "."]  # fmt: skip
    decode = [
        f"{n}: weight products {d['products']['share']:.0%} of the loop's time (build and prefill included), so "
        "at most "
        f"x{d['max_speedup_at_these_gemm_rates']:.2f} from everything else; eager {d['eager_ms_per_step']:.2f} "
        f"ms/step, compiled as decode='compiled' runs it (static shapes, C++ wrapper, the eager step's oneDNN "
        "products as custom ops) "
        f"{d['compiled_ms_per_step']:.2f} ms/step after a {d['compile_first_loop_s']:.0f} s first loop"
        for n, d in info["decode_profile"].items()
    ]
    lines += ["", "Decode step (static cache, 32 rows; products replayed alone): " + "; ".join(decode) + "."]
    cold = info["sizes"]["30m"]["update"].get("product_kernels_cold")
    if cold:
        rates = "; ".join(f"{kernel}: " + ", ".join(f"{k.replace('_', ' ')} {v:.0f}" for k, v in r.items())
                          for kernel, r in cold.items())  # fmt: skip
        lines += ["", "31M update's weight products in sequence over every layer's own tensors (cache-cold, as the "
                  f"update runs them; GFLOP/s, oneDNN with its reorder): {rates}."]  # fmt: skip
    lines += _targets_markdown(info)
    sc, m = info["scaling"], info["logprob_memory"]
    lines += [
        "",
        f"Linear cost (0.8M model, step = generation + update, base {sc['base_s']:.3f} s): doubling G costs "
        f"x{sc['G_x2']:.2f}, doubling the response length x{sc['T_x2']:.2f} (target <= 2.1).",
        "",
        f"Log-prob memory at V = {m['vocab']:,}, hidden {m['hidden']}, T = {m['positions']} (log-probs + entropy + "
        f"backward, peak RSS above the inputs): chunked {m['chunked']['peak_above_inputs_mb']:.0f} MB in "
        f"{m['chunked']['seconds']:.1f} s, naive {m['naive']['peak_above_inputs_mb']:.0f} MB in "
        f"{m['naive']['seconds']:.1f} s: ratio **{m['ratio_to_naive']:.3f}** (target <= 0.25); same values: "
        f"{m['same_values']}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
