"""rpgrl's trainer next to TRL's GRPOTrainer: completion tokens per second and peak RSS on the same tiny model.

Run (heavy: take the shared lock):  flock /tmp/rpgrl-heavy.lock .venv/bin/python benchmarks/bench_trl.py
Writes benchmarks/results/bench_trl.json and bench_trl.md.

Both sides train the same randomly initialised Qwen2-style model (rpgrl.models.build_tiny_model, char tokenizer of
the synthetic task, float32) at two sizes, on the same synthetic-task prompts (3-digit additions), with
G = 8 responses per prompt, 4 prompts = 32 completions x at most 16 new tokens per step, temperature 1, top-p 1,
no top-k, AdamW at a constant lr, one optimizer step per training step (one micro-batch of 32), 2 torch threads,
beta = 1e-4, and the same reward function (rpgrl's `synthetic`). Each side does what it does with beta > 0:

    rpgrl   RPG-REINFORCE-URKL with RPG-Style Clip (the default preset's loss); the KL anchor is pi_old and the
            update is strictly on-policy (one epoch, one mini-batch), so the old log-probs are the update's own
            forward, detached: no extra forward and no second model. Its update forwards each prompt once per group
            (`token_logprobs(share_prompts=True)`, the default), fused AdamW.
    TRL     GRPOTrainer with its default loss (dapo aggregation, clip 0.2/0.28) and beta = 1e-4: TRL loads a frozen
            reference model (from the saved folder, as it must for beta > 0) and runs one extra no-grad forward
            through it; old log-probs are skipped (on-policy, one iteration). Otherwise TRL's defaults, recorded in
            the results: gradient checkpointing on, fused AdamW. bf16 autocast is off (TRL's CPU default would be
            bf16 autocast where supported; float32 keeps the numerics equal on both sides).

Each (trainer, size) runs in its own subprocess so peak RSS (ru_maxrss) is clean; the first `--warmup` steps are
excluded from the throughput. The machine is shared, so `--rounds` interleaved repetitions are run and the fastest
run of each trainer and size is reported (all rounds are kept in the JSON), together with tokens per CPU-second of
the process (less sensitive to other jobs than wall time) and the 1-minute load average around each run.
Throughput = completion tokens generated (EOS included) / wall time of the measured
steps (generation + scoring + old/ref log-probs + update). Where the time goes is recorded per phase:
generation, scoring, logprobs (rpgrl: old log-probs; TRL: everything in `_generate_and_score_completions` besides
generation and scoring, i.e. the reference forward and batch preparation), update (forward + backward + optimizer
step), other (the rest of the step).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = {
    "1m": dict(hidden=128, layers=4, heads=4, kv_heads=2, ffn=384),
    "30m": dict(hidden=512, layers=10, heads=8, kv_heads=4, ffn=1536),
}
PROMPTS_PER_STEP, G, MAX_NEW_TOKENS = 4, 8, 16
BETA, LR, SEED, THREADS = 1e-4, 1e-5, 0, 2
PHASES = ("generation", "scoring", "logprobs", "update", "other")
SPEED_TARGET = 2.0  # rpgrl / TRL tokens/s, median of the interleaved rounds (issue 12)
RESULTS = Path(__file__).resolve().parent / "results"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# ---------------------------------------------------------------------------------------------------------------
# rpgrl side: the trainer as `rpgrl train` runs it


def run_rpgrl(size: str, steps: int, warmup: int) -> dict:
    import torch
    from transformers import Qwen2ForCausalLM  # noqa: F401  (the trainer imports it; in the baseline, as for TRL)

    from rpgrl.presets import get_preset
    from rpgrl.trainer.log import read_metrics
    from rpgrl.trainer.loop import train

    torch.set_num_threads(THREADS)
    base_rss = rss_mb()
    arch = SIZES[size]
    cfg = get_preset("default")
    cfg = dataclasses.replace(
        cfg,
        model=dataclasses.replace(
            cfg.model,
            hidden_size=arch["hidden"],
            num_layers=arch["layers"],
            num_heads=arch["heads"],
            num_kv_heads=arch["kv_heads"],
            intermediate_size=arch["ffn"],
        ),  # fmt: skip
        data=dataclasses.replace(cfg.data, num_val=8),
        rollout=dataclasses.replace(
            cfg.rollout,
            prompts_per_step=PROMPTS_PER_STEP,
            group_size=G,
            max_new_tokens=MAX_NEW_TOKENS,
            temperature=1.0,
            top_p=1.0,
            group_filter="off",
            overlong_buffer=0,
        ),  # fmt: skip
        loss=dataclasses.replace(cfg.loss, beta=BETA),
        optim=dataclasses.replace(cfg.optim, name="adamw", lr=LR, warmup_steps=0, grad_clip=1.0),
        sft=dataclasses.replace(cfg.sft, max_steps=0),
        eval=dataclasses.replace(cfg.eval, every=0, max_problems=8),
        train=dataclasses.replace(
            cfg.train,
            max_steps=steps,
            seed=SEED,
            epochs=1,
            mini_batch_prompts=None,
            micro_batch_size=G * PROMPTS_PER_STEP,
            checkpoint_every=10**6,
            collapse_patience=0,
            threads=THREADS,
            progress=False,
        ),  # fmt: skip
    )
    cpu_marks = [time.process_time()]  # CPU seconds of this process at the end of each step (step 0: before)

    def on_step(step, state):
        cpu_marks.append(time.process_time())

    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, Path(tmp) / "run", on_step=on_step)
        rows = read_metrics(Path(tmp) / "run" / "metrics.jsonl")
    per_step = []
    for k, r in enumerate(rows):
        phases = {
            "generation": r["perf/generation_s"],
            "scoring": r["perf/scoring_s"],
            "logprobs": r.get("perf/old_logp_s", 0.0),
            "update": r.get("perf/update_s", 0.0),
        }
        phases["other"] = r["perf/step_s"] - sum(phases.values())
        cpu = cpu_marks[k + 1] - cpu_marks[k] if k > 0 else float("nan")  # step 1 includes set-up
        per_step.append(
            {
                "seconds": r["perf/step_s"],
                "cpu_seconds": cpu,
                "tokens": r["perf/tokens_per_s"] * r["perf/step_s"],
                **phases,
            }
        )
    n_params = _count_params(arch)
    return summarize("rpgrl", size, per_step, warmup, base_rss, n_params)


# ---------------------------------------------------------------------------------------------------------------
# TRL side: GRPOTrainer, instrumented (subclass timers only, no behaviour change)


def run_trl(size: str, steps: int, warmup: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rpgrl.models import build_char_tokenizer, build_tiny_model
    from rpgrl.rewards import get_reward
    from rpgrl.rewards.synthetic import CHARS, make_problems

    torch.set_num_threads(THREADS)
    base_rss = rss_mb()
    arch = SIZES[size]
    timers = {"generation": 0.0, "scoring": 0.0, "prepare": 0.0, "tokens": 0}
    reward_fn = get_reward("synthetic")

    def synthetic_reward(completions, answer, completion_ids, **kwargs):
        timers["tokens"] += sum(len(ids) for ids in completion_ids)  # generated tokens, EOS included
        return [reward_fn(c, a).value for c, a in zip(completions, answer, strict=True)]

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate(self, prompts):
            t = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                timers["generation"] += time.perf_counter() - t

        def _calculate_rewards(self, *args, **kwargs):
            t = time.perf_counter()
            try:
                return super()._calculate_rewards(*args, **kwargs)
            finally:
                timers["scoring"] += time.perf_counter() - t

        def _generate_and_score_completions(self, inputs):
            t = time.perf_counter()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                timers["prepare"] += time.perf_counter() - t

    per_step: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.t0, self.c0, self.snap = time.perf_counter(), time.process_time(), dict(timers)

        def on_step_end(self, args, state, control, **kwargs):
            d = {k: timers[k] - self.snap[k] for k in timers}
            seconds = time.perf_counter() - self.t0
            phases = {
                "generation": d["generation"],
                "scoring": d["scoring"],
                "logprobs": d["prepare"] - d["generation"] - d["scoring"],
                "update": seconds - d["prepare"],
            }
            phases["other"] = 0.0  # the optimizer step and logging are inside `update` here
            cpu = time.process_time() - self.c0
            per_step.append({"seconds": seconds, "cpu_seconds": cpu, "tokens": d["tokens"], **phases})

    tokenizer = build_char_tokenizer(CHARS)
    model = build_tiny_model(
        tokenizer, hidden=arch["hidden"], layers=arch["layers"], heads=arch["heads"], kv_heads=arch["kv_heads"],
        ffn=arch["ffn"], seed=SEED,
    )  # fmt: skip
    problems = make_problems(PROMPTS_PER_STEP * (steps + 1), seed=SEED, split="train")
    dataset = Dataset.from_dict({"prompt": [p.prompt for p in problems], "answer": [p.answer for p in problems]})
    with tempfile.TemporaryDirectory() as tmp:
        # beta > 0: TRL builds its reference model from the policy's folder, so the policy is loaded from one too
        model.save_pretrained(Path(tmp) / "model")
        del model
        args = GRPOConfig(
            output_dir=str(Path(tmp) / "out"), per_device_train_batch_size=PROMPTS_PER_STEP * G, num_generations=G,
            gradient_accumulation_steps=1, max_completion_length=MAX_NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=0,
            beta=BETA, learning_rate=LR, lr_scheduler_type="constant", max_grad_norm=1.0, max_steps=steps,
            logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, bf16=False, seed=SEED,
            disable_tqdm=True, model_init_kwargs={"dtype": "float32"}, shuffle_dataset=False,
        )  # fmt: skip
        trainer = TimedGRPOTrainer(
            str(Path(tmp) / "model"), synthetic_reward, args=args, train_dataset=dataset, processing_class=tokenizer,
            callbacks=[StepTimer()],
        )  # fmt: skip
        assert trainer.ref_model is not None  # beta > 0 with TRL means a second, frozen model
        trainer.train()
    result = summarize("trl", size, per_step, warmup, base_rss, _count_params(arch))
    result["trl_defaults"] = {"gradient_checkpointing": args.gradient_checkpointing, "optim": str(args.optim)}
    return result


# ---------------------------------------------------------------------------------------------------------------


def _count_params(arch: dict) -> int:
    from rpgrl.models import build_char_tokenizer, build_tiny_model
    from rpgrl.rewards.synthetic import CHARS

    tok = build_char_tokenizer(CHARS)
    m = build_tiny_model(tok, hidden=arch["hidden"], layers=arch["layers"], heads=arch["heads"],
                         kv_heads=arch["kv_heads"], ffn=arch["ffn"])  # fmt: skip
    return sum(p.numel() for p in m.parameters())


def summarize(trainer: str, size: str, per_step: list[dict], warmup: int, base_rss: float, n_params: int) -> dict:
    measured = per_step[warmup:]
    if not measured:
        raise SystemExit(f"{trainer}/{size}: no measured steps ({len(per_step)} steps, warmup {warmup})")
    seconds = sum(s["seconds"] for s in measured)
    cpu = sum(s["cpu_seconds"] for s in measured)
    tokens = sum(s["tokens"] for s in measured)
    return {
        "trainer": trainer,
        "size": size,
        "params": n_params,
        "measured_steps": len(measured),
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "tokens_per_cpu_s": tokens / cpu,
        "phase_s_per_step": {p: sum(s[p] for s in measured) / len(measured) for p in PHASES},
        "peak_rss_mb": rss_mb(),
        "rss_after_imports_mb": base_rss,
        "per_step": per_step,
    }


def child(trainer: str, size: str, steps: int, warmup: int) -> None:
    load_before = os.getloadavg()[0]
    result = (run_rpgrl if trainer == "rpgrl" else run_trl)(size, steps, warmup)
    result["peak_rss_mb"] = rss_mb()  # after everything, including teardown of the run directory
    result["load_avg_1min"] = [load_before, os.getloadavg()[0]]
    print("RESULT " + json.dumps(result))


def hardware() -> dict:
    cpu = platform.processor()
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "torch_threads": THREADS, "machine": platform.machine()}


def versions() -> dict:
    from importlib.metadata import version

    return {p: version(p) for p in ("rpgrl", "torch", "transformers", "trl", "accelerate", "datasets")} | {
        "python": platform.python_version()
    }


def run_child(trainer: str, size: str, steps: int, warmup: int) -> dict:
    cmd = [sys.executable, __file__, "--child", trainer, size, "--steps", str(steps), "--warmup", str(warmup)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{trainer}/{size} failed:\n{done.stderr[-4000:]}")
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=8, help="training steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the throughput")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved repetitions; the fastest run of each counts")
    ap.add_argument("--sizes", default="1m,30m")
    ap.add_argument("--child", nargs=2, metavar=("TRAINER", "SIZE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child, args.steps, args.warmup)
        return

    sizes = args.sizes.split(",")
    all_runs: dict[tuple[str, str], list[dict]] = {}
    for k in range(args.rounds):  # interleaved, so a burst of load from other jobs hits both trainers alike
        for size in sizes:
            for trainer in ("rpgrl", "trl") if k % 2 == 0 else ("trl", "rpgrl"):
                r = run_child(trainer, size, args.steps, args.warmup)
                all_runs.setdefault((trainer, size), []).append(r)
                print(f"round {k + 1} {trainer}/{size}: {r['tokens_per_s']:.0f} tokens/s, "
                      f"{r['tokens_per_cpu_s']:.0f} tokens/CPU-s, peak RSS {r['peak_rss_mb']:.0f} MB, "
                      f"load {r['load_avg_1min'][0]:.1f}->{r['load_avg_1min'][1]:.1f}", flush=True)  # fmt: skip

    best = {key: max(runs, key=lambda r: r["tokens_per_s"]) for key, runs in all_runs.items()}
    for key, r in best.items():
        r["all_rounds_tokens_per_s"] = [x["tokens_per_s"] for x in all_runs[key]]
        r["all_rounds_peak_rss_mb"] = [x["peak_rss_mb"] for x in all_runs[key]]
    comparison = {}
    for size in sizes:
        ours, theirs = best[("rpgrl", size)], best[("trl", size)]
        speed = ours["tokens_per_s"] / theirs["tokens_per_s"]
        rss = ours["peak_rss_mb"] / theirs["peak_rss_mb"]
        per_round = [a["tokens_per_s"] / b["tokens_per_s"]
                     for a, b in zip(all_runs[("rpgrl", size)], all_runs[("trl", size)], strict=True)]  # fmt: skip
        comparison[size] = {
            "params": ours["params"],
            "speedup": speed,
            "speedup_per_round": per_round,
            "speedup_median": statistics.median(per_round),
            "speedup_cpu_time": ours["tokens_per_cpu_s"] / theirs["tokens_per_cpu_s"],
            "rss_ratio": rss,
            "speed_target_met": statistics.median(per_round) >= SPEED_TARGET,
            "phase_ratio_trl_over_rpgrl": {
                p: theirs["phase_s_per_step"][p] / ours["phase_s_per_step"][p]
                for p in PHASES
                if ours["phase_s_per_step"][p] > 1e-3  # rpgrl's on-policy update has no old-logprob phase
            },
        }

    repo = Path(__file__).resolve().parents[1]
    git = ["git", "-C", str(repo)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run([*git, "status", "--porcelain", "src"], capture_output=True, text=True).stdout.strip())
    info = {
        "benchmark": "bench_trl",
        "setup": {
            "prompts_per_step": PROMPTS_PER_STEP,
            "group_size": G,
            "completions_per_step": PROMPTS_PER_STEP * G,
            "max_new_tokens": MAX_NEW_TOKENS,
            "beta": BETA,
            "lr": LR,
            "threads": THREADS,
            "dtype": "float32",
            "steps": args.steps,
            "warmup_steps_excluded": args.warmup,
            "rounds": args.rounds,
            "sizes": {s: SIZES[s] for s in sizes},
        },  # fmt: skip
        "commit": commit,
        "src_dirty": dirty,
        "versions": versions(),
        "hardware": hardware(),
        "comparison": comparison,
        "runs": [best[(t, s)] for s in sizes for t in ("rpgrl", "trl")],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_trl.json").write_text(json.dumps(info, indent=2) + "\n")
    (RESULTS / "bench_trl.md").write_text(markdown(info))
    print(markdown(info))


def markdown(info: dict) -> str:
    v, h, s = info["versions"], info["hardware"], info["setup"]
    lines = [
        "# bench_trl: rpgrl trainer vs TRL GRPOTrainer (CPU)",
        "",
        f"commit {info['commit']}{' (src modified)' if info['src_dirty'] else ''}; torch {v['torch']}, "
        f"transformers {v['transformers']}, trl {v['trl']}, python {v['python']}; {h['cpu']}, "
        f"{h['torch_threads']} threads of {h['logical_cpus']} logical CPUs.",
        f"Per step: {s['prompts_per_step']} prompts x G={s['group_size']} = {s['completions_per_step']} completions x "
        f"<= {s['max_new_tokens']} new tokens, beta {s['beta']}, float32, one optimizer step. "
        f"{s['steps']} steps per run, the first {s['warmup_steps_excluded']} excluded; {s['rounds']} interleaved "
        "rounds; the table shows the fastest run of each trainer and size, the target is on the median of the "
        "per-round ratios (the machine is shared). rpgrl samples with its static-cache decode. "
        "rpgrl: RPG-REINFORCE-URKL + RPG-Style Clip, anchor pi_old (no second model), on-policy update with the "
        "old log-probs from its own forward, each prompt forwarded once per group. "
        "TRL: GRPOTrainer default loss with beta > 0 "
        "(frozen reference model loaded), its defaults otherwise (gradient checkpointing on, fused AdamW). "
        "Separate process per run; peak RSS = ru_maxrss of that process. "
        "Phases: logprobs = rpgrl's old log-probs (none: on-policy) / TRL's reference forward and batch preparation; "
        "update = forward, backward and optimizer step.",
        "",
        "| size | params | trainer | tokens/s | tokens/CPU-s | peak RSS MB | RSS after imports MB | "
        + " | ".join(f"{p} s/step" for p in PHASES)
        + " |",
        "|---|---:|---|---:|---:|---:|---:|" + "---:|" * len(PHASES),
    ]
    for r in info["runs"]:
        ph = r["phase_s_per_step"]
        lines.append(
            f"| {r['size']} | {r['params'] / 1e6:.2f}M | {r['trainer']} | {r['tokens_per_s']:.0f} | "
            f"{r['tokens_per_cpu_s']:.0f} | {r['peak_rss_mb']:.0f} | {r['rss_after_imports_mb']:.0f} | "
            + " | ".join(f"{ph[p]:.3f}" for p in PHASES)
            + " |"
        )
    lines += ["", f"| size | rpgrl / TRL tokens/s, median of rounds (target >= {SPEED_TARGET:g}) | per round | "
              "fastest / fastest | per CPU-s | rpgrl / TRL peak RSS |", "|---|---:|---|---:|---:|---:|"]  # fmt: skip
    for size, c in info["comparison"].items():
        rounds = ", ".join(f"{x:.2f}" for x in c["speedup_per_round"])
        lines.append(
            f"| {size} | {c['speedup_median']:.2f} ({'met' if c['speed_target_met'] else 'MISSED'}) | {rounds} | "
            f"{c['speedup']:.2f} | {c['speedup_cpu_time']:.2f} | {c['rss_ratio']:.2f} |"
        )
    lines += ["", "Where the time and memory go (computed from the rows above):", ""]
    for size, c in info["comparison"].items():
        ours, theirs = (
            next(r for r in info["runs"] if r["trainer"] == t and r["size"] == size) for t in ("rpgrl", "trl")
        )
        step = {r["trainer"]: sum(r["phase_s_per_step"].values()) for r in (ours, theirs)}
        pct = {
            r["trainer"]: {p: 100 * v / step[r["trainer"]] for p, v in r["phase_s_per_step"].items()}
            for r in (ours, theirs)
        }
        shares = ", ".join(
            f"{p} {pct['rpgrl'][p]:.0f}% / {pct['trl'][p]:.0f}%" for p in ("generation", "logprobs", "update")
        )
        ratios = ", ".join(f"{p} {r:.2f}x" for p, r in c["phase_ratio_trl_over_rpgrl"].items() if p != "other")
        states_mb = 16 * ours["params"] / 2**20  # fp32 weights + gradients + AdamW's two moments
        gen_share = 100 * ours["phase_s_per_step"]["generation"] / step["trl"]
        upd_share = 100 * ours["phase_s_per_step"]["update"] / step["trl"]
        floor_mb = ours["rss_after_imports_mb"] + states_mb
        lines.append(
            f"- {size}: bounds. rpgrl's generation takes {gen_share:.0f}% and its update {upd_share:.0f}% of TRL's "
            f"whole step; a {SPEED_TARGET:g}x speed-up needs rpgrl's whole step within {100 / SPEED_TARGET:.0f}%. "
            f"Peak RSS cannot go below the post-import RSS plus fp32 weights, gradients and AdamW states, "
            f"{floor_mb:.0f} MB."
        )
        lines.append(
            f"- {size}: share of the step (rpgrl / TRL): {shares}. TRL time / rpgrl time per phase: {ratios}. "
            f"Peak RSS above the post-import baseline: rpgrl {ours['peak_rss_mb'] - ours['rss_after_imports_mb']:.0f} "
            f"MB, TRL {theirs['peak_rss_mb'] - theirs['rss_after_imports_mb']:.0f} MB (weights + gradients + AdamW "
            f"states alone: {states_mb:.0f} MB; TRL's reference model: {4 * ours['params'] / 2**20:.0f} MB)."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
