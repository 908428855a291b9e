"""Run the suite's training runs, each once: cached by its resolved config and seed, two at a time.

Layout under the suite directory `out`:
    warmstart/<key>-s<seed>/    the seed's supervised warm start (`rpgrl train --train.max_steps 0`); every arm of
                                that seed starts RL from its model/, so arms are paired by seed
    runs/<key>-s<seed>/         one RL run: config.json, metrics.jsonl, eval.jsonl, summary.json, log.txt and
                                record.json (what the report reads), written last: a directory without it is an
                                unfinished run and is started again
The key hashes the resolved config (with the warm start's key in place of its path) and `SUITE_VERSION`, so arms of
different claims that resolve to the same config share runs, a changed arm reruns, and an interrupted suite
continues where it stopped. Checkpoints and the exported model are deleted once a record is written.

Runs execute in worker processes (`jobs` at a time, one torch thread each: on 2 cores two single-threaded runs do
~1.5x the work of one two-threaded run) by calling `rpgrl.trainer.train` directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import shutil
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rpgrl import metrics as M
from rpgrl.config import Config, config_from_dict, config_to_dict

SUITE_VERSION = 1
"""bumped when a change to the trainer changes what a cached run would compute"""

WARM_START_PATH = "<warm start>"

ADDED_FIELDS = {("loss", "max_log_w"): None, ("rollout", "decode"): "auto"}
"""config fields added after SUITE_VERSION's runs: left out of the key at these (their default) values, so a new
field that changes nothing does not invalidate the cache. rollout.decode 'auto' samples through the static-cache
decode, which computes the same distribution as the transformers path the cached runs used (tests/test_decode.py:
the same tokens under a fixed seed, log-probs equal to float rounding)."""


@dataclass(frozen=True)
class Job:
    """One run: `config` with model.path = the seed's warm start, `seed`, and where it goes."""

    config: Config
    seed: int
    warm_key: str

    @property
    def key(self) -> str:
        return config_key(self.config, self.seed, self.warm_key)


def config_key(cfg: Config, seed: int, warm_key: str = "") -> str:
    """12 hex digits identifying what a run computes: config (model.path abstracted to the warm start), seed."""
    d = config_to_dict(cfg)
    d["model"]["path"] = f"{WARM_START_PATH} {warm_key}" if warm_key else d["model"]["path"]
    d["train"]["seed"] = seed
    for (sec, name), default in ADDED_FIELDS.items():
        if d[sec].get(name, default) == default:
            d[sec].pop(name, None)
    blob = json.dumps({"config": d, "suite": SUITE_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def warm_dir(out: Path, warm_cfg: Config, seed: int) -> Path:
    return out / "warmstart" / f"{config_key(warm_cfg, seed)}-s{seed}"


def run_dir(out: Path, job: Job) -> Path:
    return out / "runs" / f"{job.key}-s{job.seed}"


def cached_record(path: Path) -> dict | None:
    try:
        return json.loads((path / "record.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def run_all(
    out: Path,
    warm_cfg: Config,
    jobs: list[Job],
    workers: int = 2,
    commit: str = "",
    val_samples: int = 0,
    on_done: Callable[[Job, dict], None] | None = None,
) -> dict[str, dict]:
    """Make sure every job has a record (warm starts first); returns {run directory name: record}."""
    seeds = sorted({j.seed for j in jobs})
    todo_warm = [s for s in seeds if not (warm_dir(out, warm_cfg, s) / "summary.json").is_file()]
    todo = [j for j in _unique(jobs) if cached_record(run_dir(out, j)) is None]
    records = {run_dir(out, j).name: r for j in jobs if (r := cached_record(run_dir(out, j))) is not None}
    if not todo_warm and not todo:
        return records
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx) as pool:
        wcfg = config_to_dict(warm_cfg)
        warm = [pool.submit(_warm_start, wcfg, s, str(warm_dir(out, warm_cfg, s))) for s in todo_warm]
        for f in warm:
            f.result()  # a failed warm start is a bug or a broken install: stop with its error
        futures = {
            pool.submit(
                _run,
                config_to_dict(j.config),
                j.seed,
                str(run_dir(out, j)),
                str(_warm_model(out, warm_cfg, j)),
                commit,
                val_samples,
            ): j
            for j in todo
        }
        for f, j in futures.items():  # in submission order: the report's claims fill up seed by seed
            rec = f.result()
            records[run_dir(out, j).name] = rec
            if on_done is not None:
                on_done(j, rec)
    return records


def _unique(jobs: Iterable[Job]) -> list[Job]:
    seen, out = set(), []
    for j in jobs:
        if (j.key, j.seed) not in seen:
            seen.add((j.key, j.seed))
            out.append(j)
    return out


def _warm_model(out: Path, warm_cfg: Config, job: Job) -> Path:
    return warm_dir(out, warm_cfg, job.seed) / "model"


# ---------------------------------------------------------------------------------------------------------------
# Worker side (top-level functions: they are pickled by name into the worker processes)


def _fresh(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)  # an unfinished run of an earlier sitting: runs are short, start it again
    path.mkdir(parents=True)


@contextlib.contextmanager
def _logged(path: Path):
    """stdout and stderr into `path` (the runs' own printing and tracebacks)."""
    with open(path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        yield


def _warm_start(cfg_dict: dict, seed: int, path: str) -> None:
    from rpgrl.trainer.loop import train

    out = Path(path)
    _fresh(out)
    cfg = config_from_dict(cfg_dict)
    cfg = replace(cfg, train=replace(cfg.train, seed=seed))
    with _logged(out.parent / f"{out.name}.log"):
        train(cfg, out)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)


def _run(cfg_dict: dict, seed: int, path: str, warm_model: str, commit: str, val_samples: int) -> dict:
    from rpgrl.trainer.loop import train

    out = Path(path)
    _fresh(out)
    cfg = config_from_dict(cfg_dict)
    cfg = replace(cfg, model=replace(cfg.model, path=warm_model), train=replace(cfg.train, seed=seed))
    t = time.perf_counter()
    error = None
    with _logged(out / "log.txt"):
        try:
            train(cfg, out / "run")
        except FloatingPointError as e:  # a diverged run (non-finite metrics) is a result; other errors are bugs
            traceback.print_exc()
            error = f"{type(e).__name__}: {e}".splitlines()[0]
    record = summarize_run(out / "run", error)
    record.update(seed=seed, wall_seconds=time.perf_counter() - t, commit=commit)  # the run as `rpgrl train`
    if val_samples and error is None:
        record["sampled"] = final_sampled_accuracy(cfg, out / "run" / "model", val_samples)
    for sub in ("checkpoints", "model"):
        shutil.rmtree(out / "run" / sub, ignore_errors=True)
    tmp = out / "record.json.tmp"
    tmp.write_text(json.dumps(record) + "\n")
    tmp.replace(out / "record.json")
    return record


def final_sampled_accuracy(cfg: Config, model_dir: Path, k: int) -> float:
    """Held-out mean@k of the run's exported model, at the rollout temperature, seeded by the run's seed."""
    import torch

    from rpgrl.trainer.loop import build_model, load_task, sampled_accuracy

    cfg = replace(cfg, model=replace(cfg.model, path=str(model_dir)))
    model, tokenizer = build_model(cfg)
    task = load_task(cfg, tokenizer)
    n = cfg.eval.max_problems or len(task.val_prompts)
    with torch.no_grad():
        return sampled_accuracy(model, tokenizer, task.val_prompts[:n], task.val_answers[:n], cfg, k, cfg.train.seed)


COLLAPSE_POINTS = 10.0
"""a run collapsed when the collapse guard stopped it, it diverged, or its final greedy accuracy is this many points
below its start"""


def summarize_run(path: Path, error: str | None = None) -> dict[str, Any]:
    """What the report reads of one run directory: accuracies, curves and regime metrics."""
    evals = _jsonl(path / "eval.jsonl")
    rows = _jsonl(path / "metrics.jsonl")
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else {}
    start = evals[0][M.EVAL_ACCURACY] if evals else float("nan")
    during = [e for e in evals if e["step"] > 0]
    final = during[-1] if during else (evals[-1] if evals else {})
    n_tail = max(1, len(rows) // 4)
    tail = rows[-n_tail:]

    def curve(key: str) -> list[float | None]:
        return [r.get(key) for r in rows]

    def tail_mean(key: str) -> float | None:
        vals = [r[key] for r in tail if key in r]
        return sum(vals) / len(vals) if vals else None

    final_acc = final.get(M.EVAL_ACCURACY, float("nan"))
    stopped = summary.get("stopped")
    return {
        "start": start,
        "final": final_acc,
        "best": max((e[M.EVAL_ACCURACY] for e in during), default=float("nan")),
        "sampled": final.get(M.EVAL_SAMPLED),
        "steps": len(rows),
        "stopped": stopped,
        "error": error,
        "collapsed": bool(error or stopped or final_acc < start - COLLAPSE_POINTS / 100),
        "entropy": tail_mean(M.ENTROPY),
        "reward": tail_mean(M.REWARD_MEAN),
        "length": tail_mean(M.LENGTH_MEAN),
        "max_log_w": max((max(r[M.LOG_W_MAX], -r[M.LOG_W_MIN]) for r in rows if M.LOG_W_MAX in r), default=None),
        "curves": {
            "reward": curve(M.REWARD_MEAN),
            "entropy": curve(M.ENTROPY),
            "length": curve(M.LENGTH_MEAN),
        },
        "eval_curve": [[e["step"], e[M.EVAL_ACCURACY]] for e in evals],
        "rl_seconds": summary.get("rl_seconds"),
    }


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
