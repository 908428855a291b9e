"""Padding after EOS: what the packed training forward saves by leaving it out of every layer.

Run (heavy: take the shared lock):  flock /tmp/rpgrl-heavy.lock .venv/bin/python benchmarks/bench_padding.py
Writes benchmarks/results/padding.json and padding.md.

In one process, 2 torch threads, bench_trl's models (0.8M and 31M), 4 prompts x G=8 responses of at most T tokens
whose lengths have a long tail, as math reasoning's do: T x Beta(1.2, 2), at least 2, one row at T (mean ~0.38 T).
One update (token_logprobs + rpg_loss + backward + clipping + the trainer's fused AdamW step) on that rollout,
against the same rollout with every response position marked valid: the same tensors, the same (B, T) shape,
the work the packed forward did before it left the padding out (every layer ran all B x T positions; the output
head and the loss then also run on every position, a negligible part at these models' 25-token vocabulary). The
two run interleaved, `--reps` times each, and `ratio` is the median of the first over the median of the second.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from bench_roofline import THREADS, _commit, _setup, trainer_optimizer, update_step
from bench_trl import RESULTS, SIZES, G, hardware, versions

PROMPTS = 4


def long_tail_rollout(tok, prompt_ids, T: int, seed: int = 0):
    """4 x G rows of random response tokens (no EOS) with lengths T x Beta(1.2, 2): (rollout, mean length)."""
    import torch

    from rpgrl.rollout import make_rollout

    g = torch.Generator().manual_seed(seed)
    beta = torch.distributions.Beta(torch.tensor(1.2), torch.tensor(2.0))
    torch.manual_seed(seed)
    lens = (beta.sample((PROMPTS * G,)) * T).long().clamp(min=2).tolist()
    lens[0] = T
    responses = [torch.randint(3, len(tok), (n,), generator=g).tolist() for n in lens]
    prompts = [p for p in prompt_ids[:PROMPTS] for _ in range(G)]
    groups = [i // G for i in range(PROMPTS * G)]
    return make_rollout(tok, prompts, responses, group=groups, eos_token_ids=[tok.eos_token_id]), sum(lens) / len(lens)


def all_valid(r):
    """The same rollout with every response position valid (the padding computed, as before it was left out)."""
    import torch

    P = r.prompt_len
    mask = torch.ones_like(r.response_mask)
    att = torch.cat([r.attention_mask[:, :P], mask.long()], 1)
    return dataclasses.replace(r, response_mask=mask, attention_mask=att)


def measure(name: str, T: int, reps: int) -> dict:
    tok, model, prompt_ids = _setup(SIZES[name], PROMPTS)
    rollout, mean_len = long_tail_rollout(tok, prompt_ids, T)
    opt = trainer_optimizer(model)

    def update(r):
        update_step(model, opt, r)

    variants = {"padding_left_out": rollout, "padding_computed": all_valid(rollout)}
    for r in variants.values():
        update(r)  # AdamW state and first-call costs outside the timing
    times = {k: [] for k in variants}
    for i in range(reps):
        for k in variants if i % 2 == 0 else reversed(variants):
            t = time.perf_counter()
            update(variants[k])
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"T": T, "rows": PROMPTS * G, "mean_length": mean_len, "valid_fraction": mean_len / T, "seconds": times,
           "ratio": med["padding_left_out"] / med["padding_computed"]}  # fmt: skip
    print(f"{name}: T={T}, {out['valid_fraction']:.0%} valid, {med['padding_left_out']:.3f} s against "
          f"{med['padding_computed']:.3f} s: x{out['ratio']:.2f}", flush=True)  # fmt: skip
    return out


def markdown(info: dict) -> str:
    v = info["versions"]
    rows = [f"| {n} | {s['T']} | {s['valid_fraction']:.0%} | {statistics.median(s['seconds']['padding_left_out']):.3f}"
            f" | {statistics.median(s['seconds']['padding_computed']):.3f} | x{s['ratio']:.2f} |"
            for n, s in info["sizes"].items()]  # fmt: skip
    return "\n".join([
        "# Padding after EOS: one update with it left out of every layer, against it computed",
        "",
        f"commit {info['commit']}; torch {v['torch']}, transformers {v['transformers']}, python {v['python']}; "
        f"{info['hardware']['cpu']}, {info['threads']} threads. Written by `benchmarks/bench_padding.py` (its "
        "docstring says what runs).",
        "",
        "| model | T | positions valid | left out (s) | computed (s) | ratio |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ])  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--sizes", default="1m:256,30m:128", help="model:T pairs")
    ap.add_argument("--markdown-only", action="store_true", help="rewrite padding.md from padding.json")
    a = ap.parse_args()
    if a.markdown_only:
        info = json.loads((Path(RESULTS) / "padding.json").read_text())
        (Path(RESULTS) / "padding.md").write_text(markdown(info))
        return
    import torch

    torch.set_num_threads(THREADS)
    sizes = {}
    for item in a.sizes.split(","):
        name, T = item.split(":")
        sizes[name] = measure(name, int(T), a.reps)
    info = {"commit": _commit(), "versions": versions(), "hardware": hardware(), "threads": THREADS, "sizes": sizes}
    Path(RESULTS).mkdir(parents=True, exist_ok=True)
    (Path(RESULTS) / "padding.json").write_text(json.dumps(info, indent=1) + "\n")
    (Path(RESULTS) / "padding.md").write_text(markdown(info))


if __name__ == "__main__":
    main()
