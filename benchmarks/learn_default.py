"""Does the embedded default learn? Run `rpgrl train` (no preset) for several seeds and record the numbers.

Each seed runs in a fresh process, exactly as a user types `rpgrl train --seed S`, so the wall time includes
imports, model building, the warm start, RL and the final evaluation. The bound the default is tuned for
(issue 3): at most 300 s per run on a 2-core CPU, and held-out greedy accuracy up by >= 30 points between the
start and the end of RL for at least 4 of 5 seeds.

    .venv/bin/python benchmarks/learn_default.py                     # seeds 0-4, writes results/learn_default.json
    .venv/bin/python benchmarks/learn_default.py --seeds 0 1 -- --optim.lr 2e-4   # extra args go to rpgrl train

Run it alone (`flock /tmp/rpgrl-heavy.lock ...` on a shared machine): two jobs on two cores halve throughput.
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
MAX_SECONDS, MIN_GAIN, MIN_SEEDS = 300.0, 30.0, 4


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


def run_seed(seed: int, runs_dir: Path, extra: list[str]) -> dict:
    out = runs_dir / f"seed{seed}"
    cmd = [sys.executable, "-m", "rpgrl.cli", "train", "--seed", str(seed), "--out", str(out), *extra]
    load = os.getloadavg()[0]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"seed {seed} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    s = json.loads((out / "summary.json").read_text())
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
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--results", type=Path, default=HERE / "results" / "learn_default.json")
    ap.add_argument("--runs-dir", type=Path, default=None, help="keep the run directories here (default: temporary)")
    ap.add_argument("extra", nargs="*", help="extra `rpgrl train` arguments (after --)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        runs_dir = args.runs_dir or Path(tmp)
        runs = []
        for seed in args.seeds:
            r = run_seed(seed, runs_dir, args.extra)
            runs.append(r)
            print(
                f"seed {seed}: greedy {100 * r['start_accuracy']:.1f}% -> {100 * r['end_accuracy']:.1f}% "
                f"({r['gain_points']:+.1f} points), {r['wall_seconds']:.0f} s "
                f"(warm start {r['sft_steps']} steps {r['sft_seconds']:.0f} s, RL {r['rl_steps']} steps "
                f"{r['rl_seconds']:.0f} s), load {r['load_average_at_start']:.1f}",
                flush=True,
            )
    passed = [r for r in runs if r["gain_points"] >= MIN_GAIN and r["wall_seconds"] <= MAX_SECONDS]
    result = {
        "benchmark": "embedded default: held-out greedy accuracy before vs after RL, and wall time per run",
        "command": "rpgrl train --seed S " + " ".join(args.extra),
        "criterion": f">= {MIN_GAIN:.0f} points gain and <= {MAX_SECONDS:.0f} s for >= {MIN_SEEDS} of 5 seeds",
        "seeds_passing": len(passed),
        "pass": len(passed) >= min(MIN_SEEDS, len(runs)),
        "mean_gain_points": sum(r["gain_points"] for r in runs) / len(runs),
        "max_wall_seconds": max(r["wall_seconds"] for r in runs),
        "runs": runs,
        "hardware": {"cpu": _cpu_model(), "cores": os.cpu_count(), "platform": platform.platform()},
        "versions": _versions(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{len(passed)}/{len(runs)} seeds pass; results in {args.results}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
