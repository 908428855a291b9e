"""Does the embedded default learn, off-policy? Run `rpgrl train` (no preset) for several seeds and record the numbers.

Each seed runs in a fresh process, exactly as a user types `rpgrl train --seed S`, so the wall time includes
imports, model building, the warm start, RL and the final evaluation. The bar (issue 9): held-out greedy accuracy
up by >= 30 points between the start and the end of RL, in at most 300 s per run on a 2-core CPU, for at least 8 of
10 seeds. Next to the accuracy it records what shows the off-policy regime at work, from each run's metrics.jsonl:
the share of training steps in which the dual clip acted, the mean clipped fraction of tokens, the largest |log w|,
the mean |log w| and the KL term's share of the gradient weight (`kl/grad_share`).

    .venv/bin/python benchmarks/learn_default.py                     # seeds 0-9, writes results/learn_default.json
    .venv/bin/python benchmarks/learn_default.py --seeds 0 1 -- --optim.lr 2e-4   # extra args go to rpgrl train
    .venv/bin/python benchmarks/learn_default.py --seeds 10 11 12 13 14 15 16 17 18 19 \
        --results benchmarks/results/learn_default_seeds_10_19.json   # held-out seeds, their own file
    .venv/bin/python benchmarks/learn_default.py --same-sitting 1d53140 --seeds 0 1 2  # wall time against a commit
    .venv/bin/python benchmarks/learn_default.py --results benchmarks/results/learn_default_curves.json \
        -- --eval.every 10     # held-out accuracy every 10 RL steps: would a shorter schedule pass the bar?

`--same-sitting` also writes issue 12's demo target (at most 0.6x of the baseline's wall time) with its bound: the
current runs' time if only the weight products of the warm start, update and generation took time (the default's
product shares in results/roofline.json), the rest as measured (`demo_target`).

Finished seeds are kept in the results file as they complete; a rerun with the same command and commit skips them
(`--fresh` reruns everything). Run it alone (`flock /tmp/rpgrl-heavy.lock ...`): two jobs on two cores halve
throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_SECONDS, MIN_GAIN, MIN_SEEDS, N_SEEDS = 300.0, 30.0, 8, 10
AB_FILE = "learn_default_same_sitting.json"
RESULTS_DIR = HERE / "results"
TARGET_RATIO = 0.6  # issue 12: the demo's wall time at most 0.6x the baseline commit's, same machine and sitting
NOT_PHASES = {"perf/step_s", "perf/tokens_per_s", "perf/gen_tokens_per_s"}  # perf/*_s keys that are not seconds


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _versions() -> dict[str, str]:
    import torch
    import transformers

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=HERE, capture_output=True, text=True).stdout
    return {
        "commit": commit + ("+dirty" if dirty.strip() else ""),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def _train(seed: int, out: Path, extra: list[str], src: Path | None = None) -> tuple[dict, float]:
    """`rpgrl train --seed S` in a fresh process (with the package at `src` first on the path, if given): its
    summary.json and the wall time."""
    cmd = [sys.executable, "-m", "rpgrl.cli", "train", "--seed", str(seed), "--out", str(out), *extra]
    env = os.environ | {"PYTHONPATH": str(src)} if src is not None else None
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"seed {seed} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads((out / "summary.json").read_text()), wall


def run_seed(seed: int, runs_dir: Path, extra: list[str]) -> dict:
    out = runs_dir / f"seed{seed}"
    load = os.getloadavg()[0]
    s, wall = _train(seed, out, extra)
    regime = regime_metrics([json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()])
    return {
        "seed": seed,
        "start_accuracy": s["start_accuracy"],
        "end_accuracy": s["end_accuracy"],
        "gain_points": s["gain_points"],
        "wall_seconds": wall,
        "sft_steps": s["sft"]["steps"] if s["sft"] else 0,
        "sft_seconds": s["sft"]["seconds"] if s["sft"] else 0.0,
        "rl_steps": s["steps"],
        "rl_seconds": s["rl_seconds"],
        "stopped": s["stopped"],
        "load_average_at_start": load,
        "curve": _curve(out),
        **regime,
    }


def _curve(out: Path) -> list[list[float]]:
    """[step, held-out greedy accuracy] at the start of RL, at every evaluation during it (`--eval.every N`) and at
    the end, from the run's eval.jsonl. The learning rate after warm-up does not depend on train.max_steps and the
    greedy evaluation draws no random numbers, so the gain at step N is the gain of a run of N steps."""
    rows = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    return [[r["step"], r["eval/accuracy"]] for r in rows if "eval/accuracy" in r]


def regime_metrics(rows: list[dict]) -> dict:
    """What shows the off-policy regime over a run's training steps (metrics.jsonl rows)."""
    from rpgrl.trainer.log import clip_fraction

    clip = [clip_fraction(r) for r in rows]

    def mean(key):
        vals = [r[key] for r in rows if key in r]
        return sum(vals) / len(vals) if vals else None

    phases = sorted({k for r in rows for k in r if k.startswith("perf/") and k.endswith("_s")} - NOT_PHASES)
    return {
        "rl_phase_seconds": {k[5:-2]: sum(r.get(k, 0.0) for r in rows) for k in phases},
        "clip_active_steps": sum(c > 0 for c in clip) / max(len(clip), 1),
        "clip_token_frac_mean": sum(clip) / max(len(clip), 1),
        "max_abs_log_w": max((max(r.get("log_w/max", 0.0), -r.get("log_w/min", 0.0)) for r in rows), default=0.0),
        "log_w_abs_mean": mean("log_w/abs_mean"),
        "kl_grad_share_mean": mean("kl/grad_share"),
        "kl_urkl_mean": mean("kl/urkl"),
        "optimizer_steps_per_batch": mean("optim/steps"),
    }


def same_sitting(rev: str, seeds: list[int], extra: list[str], path: Path) -> dict:
    """Wall time of this checkout against the code at commit `rev`, seed by seed in one sitting: each seed runs
    both, alternating which goes first, so a drifting machine weighs on both alike. Written to `path` after every
    run pair."""
    versions = _versions()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        wt = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", str(wt), rev], check=True,
                       capture_output=True)  # fmt: skip
        try:
            for name, src in (("baseline", wt / "src"), ("current", HERE.parent / "src")):  # untimed: cold caches
                _train(seeds[0], Path(tmp) / "warm-up" / name, ["--train.max_steps", "1", "--sft.max_steps", "0"], src)
            for i, seed in enumerate(seeds):
                row = {"seed": seed}
                for name, src in (("baseline", wt / "src"), ("current", HERE.parent / "src"))[:: 1 - 2 * (i % 2)]:
                    out = Path(tmp) / name / f"seed{seed}"
                    summary, wall = _train(seed, out, extra, src)
                    row[name] = {"wall_seconds": wall, "gain_points": summary["gain_points"]}
                    if name == "current":
                        row[name] |= _phases(summary, out, wall)
                rows.append(row)
                print(f"seed {seed}: baseline {row['baseline']['wall_seconds']:.0f} s, current "
                      f"{row['current']['wall_seconds']:.0f} s", flush=True)  # fmt: skip
                mean = {k: sum(r[k]["wall_seconds"] for r in rows) / len(rows) for k in ("baseline", "current")}
                result = {"baseline_commit": subprocess.run(["git", "-C", str(wt), "rev-parse", "HEAD"],
                                                            capture_output=True, text=True).stdout.strip(),
                          "command": "rpgrl train --seed S " + " ".join(extra), "versions": versions,
                          "hardware": {"cpu": _cpu_model(), "cores": os.cpu_count()}, "runs": rows,
                          "mean_wall_seconds": mean, "ratio": mean["current"] / mean["baseline"],
                          "target": demo_target(rows, mean["baseline"], RESULTS_DIR / "roofline.json"),
                          "date": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(result, indent=2) + "\n")
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(wt)], capture_output=True)
    return result


def _phases(summary: dict, out: Path, wall: float) -> dict:
    """A run's wall time split: the warm start, RL's update and generation (metrics.jsonl), and the rest."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rl = regime_metrics(rows)["rl_phase_seconds"]
    phases = {"warm_start": summary["sft"]["seconds"] if summary["sft"] else 0.0, "update": rl.get("update", 0.0),
              "generation": rl.get("generation", 0.0)}  # fmt: skip
    return {"phase_seconds": phases | {"rest": wall - sum(phases.values())}}


def demo_target(rows: list[dict], baseline_seconds: float, roofline: Path) -> dict:
    """Issue 12's demo target (at most TARGET_RATIO of the baseline's wall time) and its bound: the current runs'
    mean time if everything but the weight products took no time in the warm start and the update (both train
    through token_logprobs) and in generation, from the default's product shares in `roofline` (`product_share`:
    as run, and each product on its fastest kernel), the rest (imports, evaluation, scoring, logging) as measured."""
    mean = {k: sum(r["current"]["phase_seconds"][k] for r in rows) / len(rows)
            for k in ("warm_start", "update", "generation", "rest")}  # fmt: skip
    ratio = sum(mean.values()) / baseline_seconds
    out = {"ratio": TARGET_RATIO, "measured": ratio, "met": ratio <= TARGET_RATIO, "mean_phase_seconds": mean}
    if not roofline.exists():
        return out
    info = json.loads(roofline.read_text())
    default = info["sizes"]["default"]
    for key, share in (("bound_if_only_gemms", "share"), ("bound_fastest_kernels", "share_fastest_kernels")):
        u, g = default["update"]["products"][share], default["generation"]["products"][share]
        seconds = u * (mean["warm_start"] + mean["update"]) + g * mean["generation"] + mean["rest"]
        out[key] = {"seconds": seconds, "ratio": seconds / baseline_seconds}
    out["ruled_out"] = not out["met"] and out["bound_fastest_kernels"]["ratio"] > TARGET_RATIO
    out["roofline_commit"] = info["commit"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(N_SEEDS)))
    ap.add_argument("--results", type=Path, default=HERE / "results" / "learn_default.json")
    ap.add_argument("--runs-dir", type=Path, default=None, help="keep the run directories here (default: temporary)")
    ap.add_argument("--fresh", action="store_true", help="rerun seeds already in the results file")
    ap.add_argument("extra", nargs="*", help="extra `rpgrl train` arguments (after --)")
    ap.add_argument("--same-sitting", metavar="REV", help="instead: wall time against the code at commit REV, both "
                    "run per seed in this sitting (writes results/learn_default_same_sitting.json)")  # fmt: skip
    args = ap.parse_args()
    if args.same_sitting:
        r = same_sitting(args.same_sitting, args.seeds, args.extra, args.results.with_name(AB_FILE))
        t = r["target"]
        bound = f"; bound {t['bound_if_only_gemms']['ratio']:.2f}x" if "bound_if_only_gemms" in t else ""
        print(f"mean wall time: current {r['mean_wall_seconds']['current']:.0f} s, baseline "
              f"{r['mean_wall_seconds']['baseline']:.0f} s: {r['ratio']:.2f}x "
              f"(target {TARGET_RATIO}x{bound})")  # fmt: skip
        return 0

    command = "rpgrl train --seed S " + " ".join(args.extra)
    versions = _versions()
    previous = _previous(args.results, command, versions["commit"])
    done = {} if args.fresh else _finished_runs(args.results, command, versions["commit"])
    with tempfile.TemporaryDirectory() as tmp:
        runs_dir = args.runs_dir or Path(tmp)
        runs = []
        for seed in args.seeds:
            r = done.get(seed) or run_seed(seed, runs_dir, args.extra)
            runs.append(r)
            print(
                f"seed {seed}: greedy {100 * r['start_accuracy']:.1f}% -> {100 * r['end_accuracy']:.1f}% "
                f"({r['gain_points']:+.1f} points), {r['wall_seconds']:.0f} s "
                f"(warm start {r['sft_steps']} steps {r['sft_seconds']:.0f} s, RL {r['rl_steps']} steps "
                f"{r['rl_seconds']:.0f} s), clip active in {100 * r['clip_active_steps']:.0f}% of steps, "
                f"max |log w| {r['max_abs_log_w']:.2f}{' (cached)' if seed in done else ''}",
                flush=True,
            )
            result = _result(runs, command, versions, complete=len(runs) == len(args.seeds))
            result["previous"] = previous
            args.results.parent.mkdir(parents=True, exist_ok=True)
            args.results.write_text(json.dumps(result, indent=2) + "\n")  # after every seed: nothing is lost
            args.results.with_suffix(".md").write_text(markdown(result))
    print(f"{result['seeds_passing']}/{len(runs)} seeds pass; results in {args.results}")
    return 0 if result["pass"] else 1


def markdown(result: dict) -> str:
    """The per-seed table (generated from the results, for the README)."""
    lines = [
        f"`{result['command'].strip()}`: {result['criterion']}; {result['seeds_passing']} of {len(result['runs'])} "
        f"seeds pass, mean gain {result['mean_gain_points']:+.1f} points ({result['hardware']['cpu']}, "
        f"commit {result['versions']['commit'][:7]}).",
        "",
        "| seed | greedy before RL | after RL | gain | wall time | optimizer steps per batch | steps with clip active "
        "| clipped tokens | max abs log w | KL share of gradient |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    mean_wall = sum(r["wall_seconds"] for r in result["runs"]) / len(result["runs"])
    prev = result.get("previous")
    if prev:
        ratio = mean_wall / prev["mean_wall_seconds"]
        other = (prev.get("hardware") or {}).get("cpu") != result["hardware"]["cpu"]
        lines[0] += (f" Mean wall time {mean_wall:.0f} s against {prev['mean_wall_seconds']:.0f} s at commit "
                     f"{prev['commit'][:7]} ({prev['hardware']['cpu']}): {ratio:.2f}x"
                     + (" (another machine: this compares machines, not code; `--same-sitting` compares code)."
                        if other else " (an earlier sitting: the machine's speed moves between sittings; "
                        "`--same-sitting` compares code)."))  # fmt: skip
    phases = {k for r in result["runs"] for k in r.get("rl_phase_seconds", {})}
    if phases:
        per = {k: sum(r["rl_phase_seconds"].get(k, 0.0) for r in result["runs"]) / len(result["runs"]) for k in phases}
        sft = sum(r["sft_seconds"] for r in result["runs"]) / len(result["runs"])
        lines[0] += " Mean seconds per run: warm start " + f"{sft:.0f}, " + ", ".join(
            f"{k} {v:.0f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])) + "."  # fmt: skip
    for r in result["runs"]:
        share = r.get("kl_grad_share_mean")
        lines.append(
            f"| {r['seed']} | {100 * r['start_accuracy']:.1f}% | {100 * r['end_accuracy']:.1f}% | "
            f"{r['gain_points']:+.1f} | {r['wall_seconds']:.0f} s | {r.get('optimizer_steps_per_batch') or 1:.1f} | "
            f"{100 * r['clip_active_steps']:.0f}% | {100 * r['clip_token_frac_mean']:.2f}% | "
            f"{r['max_abs_log_w']:.2f} | {'-' if share is None else f'{share:.1e}'} |"
        )
    return "\n".join(lines + _curve_lines(result)) + "\n"


def _curve_lines(result: dict) -> list[str]:
    """With evaluations during RL: the seeds that would pass the bar's gain, and the mean gain, had RL stopped at
    each evaluated step (the schedule's length against the bar's margin)."""
    curves = [{step: acc for step, acc in r.get("curve", [])} for r in result["runs"]]
    steps = sorted(set.intersection(*(set(c) for c in curves)) - {0}) if curves else []
    if len(steps) < 2:
        return []
    title = f"Had RL stopped at step N (held-out greedy accuracy evaluated during RL; gain >= {MIN_GAIN:.0f}):"
    lines = ["", title, "", "| N | " + " | ".join(str(s) for s in steps) + " |", "|---|" + "---:|" * len(steps)]
    gains = [[100 * (c[s] - c[0]) for c in curves] for s in steps]
    lines.append("| seeds passing | " + " | ".join(f"{sum(g >= MIN_GAIN for g in gs)}" for gs in gains) + " |")
    lines.append("| mean gain | " + " | ".join(f"{sum(gs) / len(gs):+.1f}" for gs in gains) + " |")
    return lines


def _previous(path: Path, command: str, commit: str) -> dict | None:
    """The results file's earlier run of the same command at another commit (kept as the baseline of wall time), or
    its own baseline when it is a rerun at this commit."""
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if old.get("command") != command:
        return None
    if old.get("versions", {}).get("commit") == commit:
        return old.get("previous")
    walls = [r["wall_seconds"] for r in old.get("runs", [])]
    return {"commit": old["versions"]["commit"], "date": old.get("date"), "hardware": old.get("hardware"),
            "seeds": [r["seed"] for r in old["runs"]], "mean_wall_seconds": sum(walls) / len(walls),
            "mean_gain_points": old.get("mean_gain_points"), "seeds_passing": old.get("seeds_passing")}  # fmt: skip


def _finished_runs(path: Path, command: str, commit: str) -> dict[int, dict]:
    """Runs already in the results file for the same command and commit, by seed."""
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    if old.get("command") != command or old.get("versions", {}).get("commit") != commit or "+dirty" in commit:
        return {}
    return {r["seed"]: r for r in old.get("runs", [])}


def _result(runs: list[dict], command: str, versions: dict, complete: bool) -> dict:
    passed = [r for r in runs if r["gain_points"] >= MIN_GAIN and r["wall_seconds"] <= MAX_SECONDS]
    need = -(-MIN_SEEDS * len(runs) // N_SEEDS)  # the same fraction (8 of 10) of the seeds run
    return {
        "benchmark": "embedded default: held-out greedy accuracy before vs after RL, wall time and regime per run",
        "command": command,
        "criterion": f">= {MIN_GAIN:.0f} points gain and <= {MAX_SECONDS:.0f} s for >= {need} of {len(runs)} seeds",
        "complete": complete,
        "seeds_passing": len(passed),
        "pass": len(passed) >= need,
        "mean_gain_points": sum(r["gain_points"] for r in runs) / len(runs),
        "max_wall_seconds": max(r["wall_seconds"] for r in runs),
        "runs": runs,
        "hardware": {"cpu": _cpu_model(), "cores": os.cpu_count(), "platform": platform.platform()},
        "versions": versions,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


if __name__ == "__main__":
    raise SystemExit(main())
