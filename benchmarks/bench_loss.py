"""Forward + backward time and peak memory of `rpg_loss` at (B=256, T=4096) float32 on CPU, next to a straightforward
re-implementation of the authors' per-token loss (spec 4.3 iv: verl's PPO dual clip on A + a separate per-token KL
loss clamped to [-10, 10], both token-mean).

Run (heavy: take the shared lock):  flock /tmp/rpgrl-heavy.lock .venv/bin/python benchmarks/bench_loss.py
Writes benchmarks/results/bench_loss.json and bench_loss.md. Time: median of `--repeat` runs after one warm-up.
Peak memory: each variant runs once more in a fresh subprocess with glibc's mmap threshold at 128 KiB (so every
tensor's pages go back to the OS when freed and RSS follows live memory); the figure is the peak RSS (VmHWM, reset
through /proc/self/clear_refs just before) during one forward + backward minus the RSS before it (inputs excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from rpgrl.objectives.rpg import rpg_loss

B, T = 256, 4096
BETA, EPS_LOW, EPS_HIGH, C = 1e-4, 0.2, 0.28, 10.0


# ---- the authors' per-token formulas, written from the spec (verl compute_policy_loss + kl_penalty + agg_loss) ----
def authors_loss(logp, old_logp, adv, mask, kind="rkl"):
    """Released differentiable RPG (spec 4.3 iv) with verl's metrics; adv: (B, T), mask: float (B, T)."""
    n = mask.sum()
    neg_kl = logp - old_logp
    ratio = torch.exp(neg_kl)
    ppo_kl = (-neg_kl * mask).sum() / n
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1 - EPS_LOW, 1 + EPS_HIGH)
    clip1 = torch.maximum(pg1, pg2)
    clipfrac = (torch.gt(pg2, pg1).float() * mask).sum() / n
    pg3 = -adv * C
    clip2 = torch.min(pg3, clip1)
    clipfrac_lower = (torch.gt(clip1, pg3).float() * (adv < 0).float() * mask).sum() / n
    pg = torch.where(adv < 0, clip2, clip1)
    pg_loss = (pg * mask).sum() / n
    lr = logp - old_logp  # kl_penalty recomputes from the log-probs
    w = torch.exp(lr)
    if kind == "fkl":
        kld = -lr
    elif kind == "rkl":
        kld = torch.clamp(w * lr, -10, 10)
    elif kind == "ufkl":
        kld = torch.clamp(w - lr - 1, -10, 10)
    else:
        kld = torch.clamp(w * (lr - 1) + 1, -10, 10)
    kl_loss = (kld * mask).sum() / n
    metrics = {"ppo_kl": ppo_kl.detach(), "clipfrac": clipfrac.detach(), "clipfrac_lower": clipfrac_lower.detach()}
    return pg_loss + BETA * kl_loss, metrics


def variants() -> dict[str, callable]:
    common = dict(beta=BETA, eps_low=EPS_LOW, eps_high=EPS_HIGH, c=C)

    def rpg(**kw):
        return lambda lp, old, adv, mask, adv_bt, mask_f: rpg_loss(lp, old, adv, mask, **common, **kw).loss

    return {
        "authors (PPO dual clip + clamped per-token RKL)": lambda lp, old, adv, mask, adv_bt, mask_f: authors_loss(
            lp, old, adv_bt, mask_f
        )[0],
        "rpg token, code-faithful (kl_in_clip=False, clamp 10, raw)": rpg(
            divergence="rkl",
            style="differentiable",
            clip="dual",
            kl_in_clip=False,
            kl_value_clamp=10.0,
            branch="raw",
        ),
        "rpg token, differentiable, dual (Alg. 1, exact A_hat), urkl": rpg(
            divergence="urkl", style="differentiable", clip="dual"
        ),
        "rpg token, reinforce, dual (Alg. 2), urkl": rpg(divergence="urkl", style="reinforce", clip="dual"),
        "rpg token, differentiable, no clip, urkl": rpg(divergence="urkl", style="differentiable"),
        "rpg sequence, differentiable, dual, urkl": rpg(
            divergence="urkl", style="differentiable", clip="dual", level="sequence"
        ),
        "rpg sequence, reinforce, dual, urkl": rpg(divergence="urkl", style="reinforce", clip="dual", level="sequence"),
    }


def make_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 4
    lp = old + 0.05 * torch.randn(B, T, generator=g)
    lens = torch.randint(T // 8, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lens[:, None]  # (B, T) bool
    adv = torch.randn(B, generator=g)
    return lp, old, adv, mask, adv[:, None].expand(B, T), mask.float()


def run_once(fn, inputs) -> float:
    lp, *rest = inputs
    lp = lp.detach().requires_grad_(True)
    t0 = time.perf_counter()
    loss = fn(lp, *rest)
    loss.backward()
    return time.perf_counter() - t0


def peak_memory_mb(name: str) -> float:
    """Peak RSS growth of one forward + backward, in a fresh process (called as `--memory NAME`)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    cmd = [sys.executable, __file__, "--memory", name]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _memory_child(name: str) -> None:
    torch.set_num_threads(2)
    fn = variants()[name]
    small = tuple(x[:2, :64] if x.dim() == 2 else x[:2] for x in make_inputs())
    run_once(fn, small)  # one-time allocations (thread pools, dispatch caches) happen here
    inputs = make_inputs()
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    before = _status_kib("VmHWM")
    run_once(fn, inputs)
    print((_status_kib("VmHWM") - before) / 1024)  # KiB -> MiB


def check_same_math(inputs) -> float:
    """The code-faithful rpg variant must equal the authors' formula (loss and gradient)."""
    lp, old, adv, mask, adv_bt, mask_f = (x.double() if x.is_floating_point() else x for x in inputs)
    lp1, lp2 = lp.clone().requires_grad_(True), lp.clone().requires_grad_(True)
    ref, _ = authors_loss(lp1, old, adv_bt, mask_f)
    out = rpg_loss(lp2, old, adv, mask, divergence="rkl", style="differentiable", clip="dual", kl_in_clip=False,
                   kl_value_clamp=10.0, branch="raw", beta=BETA, eps_low=EPS_LOW, eps_high=EPS_HIGH, c=C)  # fmt: skip
    ref.backward()
    out.loss.backward()
    assert torch.allclose(out.loss, ref, rtol=1e-12), (out.loss, ref)
    return ((lp1.grad - lp2.grad).abs().max() / lp1.grad.abs().max()).item()


def hardware() -> dict:
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "logical_cpus": torch.get_num_threads(), "machine": platform.machine()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--memory", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory:
        _memory_child(args.memory)
        return
    torch.set_num_threads(2)
    inputs = make_inputs()
    grad_diff = check_same_math(inputs)
    fns = variants()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        run_once(fn, inputs)  # warm-up
    for _ in range(args.repeat):  # interleaved, so load from other processes hits every variant alike
        for name, fn in fns.items():
            times[name].append(run_once(fn, inputs))
    ref_med, ref_min = (f(times[next(iter(fns))]) for f in (statistics.median, min))
    results = []
    for name, ts in times.items():
        med, mn = statistics.median(ts), min(ts)
        results.append({"variant": name, "median_s": med, "min_s": mn, "ratio_median": med / ref_med,
                        "ratio_min": mn / ref_min, "peak_rss_growth_mb": peak_memory_mb(name)})  # fmt: skip
        r = results[-1]
        print(f"{name:<62} {med * 1e3:7.1f} ms (min {mn * 1e3:6.1f})  x{r['ratio_median']:5.2f} "
              f"(min x{r['ratio_min']:4.2f})  {r['peak_rss_growth_mb']:6.0f} MB")  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "src/rpgrl/objectives"], capture_output=True,
                           text=True).stdout.strip() != ""  # fmt: skip
    info = {
        "shape": [B, T], "dtype": "float32", "threads": 2, "repeat": args.repeat, "commit": commit,
        "objectives_dirty": dirty, "torch": torch.__version__, "python": platform.python_version(),
        "hardware": hardware(), "code_faithful_max_rel_grad_diff_vs_authors_float64": grad_diff, "results": results,
    }  # fmt: skip
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "bench_loss.json").write_text(json.dumps(info, indent=2) + "\n")
    md = [
        "# bench_loss: rpg_loss forward + backward, (B, T) = (256, 4096) float32, CPU",
        "",
        f"commit {commit}{' (objectives modified)' if dirty else ''}, torch {torch.__version__}, "
        f"{info['hardware']['cpu']}, 2 threads, median of {args.repeat}.",
        "Reference: the authors' per-token formulas (verl PPO dual clip on A + clamped per-token KL loss,",
        "spec 4.3 iv), re-implemented in the script; the code-faithful rpg variant matches it",
        f"(float64 max rel grad diff {grad_diff:.1e}). Variants run interleaved; ratios are to the authors' row.",
        "Peak memory: growth of peak RSS during one forward + backward in a fresh process (inputs excluded).",
        "",
        "| variant | median ms | min ms | x authors (median) | x authors (min) | peak MB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    md += [f"| {r['variant']} | {r['median_s'] * 1e3:.1f} | {r['min_s'] * 1e3:.1f} | {r['ratio_median']:.2f} | "
           f"{r['ratio_min']:.2f} | {r['peak_rss_growth_mb']:.0f} |" for r in results]  # fmt: skip
    (out_dir / "bench_loss.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
