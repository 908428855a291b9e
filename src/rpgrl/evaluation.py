"""Math benchmark evaluation: mean@k, unbiased pass@k and the authors' bootstrap best@k (spec 7.7).

    rpgrl eval --model PATH --data aime-2024.parquet aime25.parquet amc-23.parquet --k 32 --out DIR

Each file is one benchmark (named by its stem). Its rows are grouped into problems by (data_source, prompt text)
(`rpgrl.data.load_benchmark`); each problem is prompted once and sampled `k` times (temperature 1, top-p 1), which
is what the authors get from 32 stored copies with one sample each. Responses are scored with
`rpgrl.rewards.math.math_score` (`--mode strict` = the paper's rule, `equiv` = math-verify equivalence).

Metrics per benchmark, each averaged over problems:
* `mean@k`: fraction of the k samples that are correct (the paper's headline metric);
* `pass@j` for j in {1, 2, 4, 8, 16, 32}, j <= k: Chen et al. (2021)'s unbiased estimator 1 - C(k-c, j)/C(k, j),
  computed exactly; `pass@1 == mean@k`;
* `best@j` / `worst@j` for j = 2, 4, ... < k and j = k: verl's bootstrap as the authors log it (1000 resamples of
  size j with replacement, numpy legacy seed 42 re-seeded for every problem and j), the max / min of each resample.
  Not the empirical "any of k correct": for accuracy p it approaches 1 - (1 - p)^j.
* `maj@j` for the same j as pass@j, plus j = k: majority vote over the problem's first j samples (samples are
  i.i.d., so the first j are a random j-subset). A correct sample votes for the ground truth (all correct answers
  are one answer, however written); a wrong one for its extracted answer (`vote_answer`: the answer the scoring
  mode judges, normalised with the authors' rules; wrong answers vote together only when those strings are equal,
  no symbolic equivalence: `judged_vote`); samples without an answer do not vote. The most-voted answer wins;
  a tie goes to the tied answer sampled first. The problem counts as solved when the first sample carrying the
  winning answer is correct; with no votes at all it counts as unsolved.

`rpgrl eval --out DIR` writes metrics.json, samples.jsonl (with each sample's vote) and passk_majk.png (pass@j
and maj@j against j, one panel per benchmark); while it samples, DIR/partial.jsonl keeps each finished chunk, so the
same command continues a stopped evaluation (`rpgrl.journal`).

Left out: per-sample overlong penalties, data-parallel generation.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from rpgrl.data import Benchmark, Messages, Problem, load_benchmark, prompt_text
from rpgrl.errors import (
    ArgumentParser,
    TermAsInterrupt,
    UsageError,
    check_token_ids,
    dir_problem,
    first_line,
    interrupt_signal,
    seed_arg,
    utf8_text,
)
from rpgrl.journal import NAME as JOURNAL
from rpgrl.journal import Journal, digest, files_fingerprint, kept
from rpgrl.rewards.math import (
    INVALID,
    MODES,
    Mode,
    clean_answer,
    extract_final_answer,
    extract_strict,
    math_score,
    normalize_answer,
)

PASS_KS = (1, 2, 4, 8, 16, 32)
BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED = 1000, 42  # verl's bootstrap_metric defaults, used by the authors

# (problems, n) -> n decoded responses per problem, in problem order: the generation seam
Sampler = Callable[[Sequence[Problem], int], list[list[str]]]

# ---------------------------------------------------------------------------------------------------------------
# metrics: pure functions of correctness counts
# ---------------------------------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. (2021) for `c` correct out of `n` samples: 1 - C(n-c, k) / C(n, k).

    Exact integer arithmetic, rounded once to float (no cancellation, no overflow).

    >>> pass_at_k(4, 1, 2)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    0.5
    """
    if any(isinstance(x, bool) or not isinstance(x, int) for x in (n, c, k)) or not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k: need integers 0 <= c <= n and 1 <= k <= n, got n={n!r}, c={c!r}, k={k!r}")
    total = math.comb(n, k)
    return float(Fraction(total - math.comb(n - c, k), total))


def bootstrap_best_worst(correct: Sequence[bool | float], k: int) -> tuple[float, float]:
    """The authors' bootstrap best@k and worst@k of one problem: mean over 1000 resamples (size k, with
    replacement, `np.random.seed(42)`) of the resample's max / min. Same draws as verl's `bootstrap_metric`."""
    import numpy as np

    values = np.asarray(correct, dtype=np.float64)  # (n,)
    idx = np.random.RandomState(BOOTSTRAP_SEED).randint(0, len(values), size=(BOOTSTRAP_RESAMPLES, k))  # (R, k)
    draws = values[idx]
    return float(draws.max(axis=1).mean()), float(draws.min(axis=1).mean())


def bootstrap_ks(n: int) -> list[int]:
    """verl's sizes for best@/worst@: 2, 4, 8, ... below n, then n itself."""
    ks, j = [], 2
    while j < n:
        ks.append(j)
        j *= 2
    return ks + [n]


def vote_answer(response: str, mode: Mode = "equiv") -> str | None:
    """The answer a response votes for in maj@k, or None (no answer: it does not vote).

    strict: the authors' normalised last `Answer:` in the last 300 characters; equiv: the normalised, cleaned final
    answer (`Answer:` line, else the last `\\boxed{}`).

    >>> vote_answer("so 2+2 = 4.\\nAnswer: $4$"), vote_answer("no idea")
    ('4', None)
    """
    if mode == "strict":
        raw = extract_strict(response)
        raw = None if raw == INVALID else raw
    else:
        raw = extract_final_answer(response)
        raw = None if raw is None else clean_answer(raw)
    key = None if raw is None else normalize_answer(raw)
    return key or None


def judged_vote(response: str, ground_truth: str, mode: Mode = "equiv", correct: bool | None = None) -> str | None:
    """The answer a sample votes for in maj@k, given its correctness under `mode` (`math_score`, computed when
    `correct` is None): a correct response votes for the ground truth, since every correct answer is the truth
    however it is written (`540`, `540 (the remainder)`, `The answer is 540.`); a wrong one for its own answer
    (`vote_answer`), or none when that reads as the truth (a hedge the authors' normalisation reads as its last
    value). So a sample's vote and its correctness always concern the same answer.

    >>> judged_vote("Answer: 41\\n**Answer**: 42", "42"), judged_vote("Answer: 42\\n**Answer**: 41", "42")
    ('42', '41')
    """
    if correct is None:
        correct = math_score(response, ground_truth, mode)
    truth = str(ground_truth)
    key = normalize_answer(truth if mode == "strict" else clean_answer(truth)) or truth
    if correct:
        return key
    own = vote_answer(response, mode)
    return None if own == key else own  # a wrong answer that reads as the truth (`x = 4 or x = 5`: a hedge) abstains


def majority_correct(votes: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """Whether the majority answer of one problem's samples is correct.

    `votes[i]` is sample i's answer (None: no vote), `correct[i]` its correctness. Most votes win; a tie goes to the
    tied answer sampled first; the verdict is that of the first sample carrying the winner; no votes: False.

    >>> majority_correct(["5", "7", "7", "5", None], [False, True, True, False, False])  # 2-2 tie: "5" came first
    False
    """
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, v in enumerate(votes):
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
            first.setdefault(v, i)
    if not counts:
        return False
    winner = max(counts, key=lambda v: (counts[v], -first[v]))
    return bool(correct[first[winner]])


def maj_ks(n: int) -> list[int]:
    """Sizes for maj@: those of pass@ (1, 2, 4, ... <= n), then n itself."""
    ks = [j for j in PASS_KS if j <= n]
    return ks if n in ks else ks + [n]


def benchmark_metrics(
    correct: Sequence[Sequence[bool]], votes: Sequence[Sequence[str | None]] | None = None
) -> dict[str, float]:
    """mean@n, pass@j, best@j, worst@j (and maj@j when `votes` is given) of a benchmark, averaged over problems.

    correct: one row per problem, n booleans each (every problem has the same n).
    votes: the same shape, each sample's `vote_answer` (None = no answer).
    """
    if len(correct) == 0:
        raise ValueError("benchmark_metrics: no problems")
    if any(isinstance(row, (str, bytes)) or not hasattr(row, "__len__") for row in correct):
        raise ValueError("benchmark_metrics: correct must be one sequence of booleans per problem")
    n = len(correct[0])
    if n == 0 or any(len(row) != n for row in correct):
        raise ValueError("benchmark_metrics: every problem needs the same number (>= 1) of samples")
    counts = [sum(bool(x) for x in row) for row in correct]
    out = {f"mean@{n}": sum(c / n for c in counts) / len(counts)}
    for j in (j for j in PASS_KS if j <= n):
        out[f"pass@{j}"] = sum(pass_at_k(n, c, j) for c in counts) / len(counts)
    for j in bootstrap_ks(n):
        best_worst = [bootstrap_best_worst(row, j) for row in correct]
        out[f"best@{j}"] = sum(b for b, _ in best_worst) / len(best_worst)
        out[f"worst@{j}"] = sum(w for _, w in best_worst) / len(best_worst)
    if votes is not None:
        if len(votes) != len(correct) or any(len(v) != n for v in votes):
            raise ValueError("benchmark_metrics: votes must have the shape of correct")
        for j in maj_ks(n):
            solved = [majority_correct(v[:j], c[:j]) for v, c in zip(votes, correct, strict=True)]
            out[f"maj@{j}"] = sum(solved) / len(solved)
    return out


# ---------------------------------------------------------------------------------------------------------------
# generation seam
# ---------------------------------------------------------------------------------------------------------------


def encode_messages(tokenizer, messages: Messages, *, max_length: int | None = None) -> list[int]:
    """Prompt token ids: the chat template with the generation prompt when the tokenizer has one (spec 7.5), else
    the raw content with the tokenizer's own special tokens. Left-truncated to `max_length` as verl does."""
    if getattr(tokenizer, "chat_template", None):
        try:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as e:  # a template that does not parse, raises, or fails on these messages (1 + "a")
            raise UsageError(f"the tokenizer's chat template fails on the prompt {str(messages)[:60]!r}: "
                             f"{type(e).__name__}: {first_line(e)}") from None  # fmt: skip
        ids = encode_text(tokenizer, text, add_special_tokens=False)
        if not ids:
            raise UsageError(f"the tokenizer's chat template renders the prompt {str(messages)[:60]!r} as no tokens")
    else:
        ids = encode_text(tokenizer, prompt_text(messages))
    return ids[-max_length:] if max_length else ids


def encode_named(tokenizer, messages: Messages, what: str) -> list[int]:
    """`encode_messages`, a prompt it cannot encode named as `what` ("aime prompt 5: ..."): its quote alone, inside
    the chat template's rendering, does not locate it among a benchmark's problems."""
    try:
        return encode_messages(tokenizer, messages)
    except UsageError as e:
        raise UsageError(f"{what}: {e}") from None


def encode_text(tokenizer, text: str, *, add_special_tokens: bool = True) -> list[int]:
    """`tokenizer(text)["input_ids"]`; a text the tokenizer cannot encode (a character outside the alphabet of
    `rpgrl.models.build_char_tokenizer`) is a `UsageError` quoting the text."""
    try:
        return list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    except Exception as e:  # the `tokenizers` library raises plain Exception
        bad = [c for c in dict.fromkeys(text) if not _encodes(tokenizer, c)]
        what = f"characters outside its vocabulary: {''.join(bad[:10])!r}" if bad else str(e).strip()
        raise UsageError(f"the model's tokenizer cannot encode the prompt {text[:60]!r} ({what})") from None


def _encodes(tokenizer, text: str) -> bool:
    try:
        tokenizer(text, add_special_tokens=False)
    except Exception:
        return False
    return True


def model_sampler(
    model,
    tokenizer,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    batch_size: int | None = None,
    seed: int = 0,
    max_prompt_length: int | None = None,
    progress: bool = False,
    journal: Journal | None = None,
) -> Sampler:
    """A `Sampler` drawing from `model` with `rpgrl.rollout.sample`: each problem encoded once, n samples of it.
    `journal`: chunks sampled before are replayed from it (with the generator's state after them), new ones
    recorded in it (`rpgrl.journal`)."""
    import torch

    from rpgrl.rollout import sample

    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)

    def draw(problems: Sequence[Problem], n: int) -> list[list[str]]:
        prompts = [encode_messages(tokenizer, p.prompt, max_length=max_prompt_length) for p in problems]
        step = batch_size or len(prompts)
        bar = None
        if progress:  # one bar over problems; chunking as `sample` does it, so the draws are the same
            from tqdm.auto import tqdm

            bar = tqdm(total=len(prompts), desc="sampling", unit="problem", dynamic_ncols=True)
        texts = []
        try:
            for s in range(0, len(prompts), step):
                chunk = prompts[s : s + step]
                key = digest(chunk, n)
                done = journal.replay(key, len(chunk) * n) if journal is not None else None
                if done is not None:
                    texts += done[0]
                    try:
                        generator.set_state(torch.frombuffer(bytearray(done[1]), dtype=torch.uint8))
                    except (RuntimeError, ValueError):  # another size (ValueError: none), not this generator's
                        journal.not_written(journal.position - 1, "its generator state is not this device's")
                else:
                    drawn = sample(
                        model,
                        tokenizer,
                        chunk,
                        n=n,
                        max_new_tokens=max_new_tokens,
                        temperature=temperature,
                        top_p=top_p,
                        generator=generator,
                    ).texts
                    if journal is not None:
                        journal.record(key, drawn, generator.get_state().numpy().tobytes())
                    texts += drawn
                if bar is not None:
                    bar.update(len(chunk))
        finally:  # also on a stop, so what is printed next starts on a line of its own
            if bar is not None:
                bar.close()
        return [texts[i * n : (i + 1) * n] for i in range(len(problems))]  # rows i*n .. i*n+n-1: problem i

    return draw


# ---------------------------------------------------------------------------------------------------------------
# orchestration
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class BenchmarkResult:
    """One benchmark's metrics plus every response and its correctness (problem-major)."""

    name: str
    problems: list[Problem]
    responses: list[list[str]]
    correct: list[list[bool]]
    metrics: dict[str, float] = field(default_factory=dict)
    votes: list[list[str | None]] = field(default_factory=list)


def _is_count(value: object) -> bool:
    """An int >= 1 (a bool is not a count): what k, the token and batch sizes and limit_problems must be."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _as_benchmark(b: Benchmark | str | Path, limit: int | None) -> Benchmark:
    if limit is not None and not _is_count(limit):
        raise ValueError(f"limit_problems must be an integer >= 1 (or None for all), got {limit!r}")
    if not isinstance(b, Benchmark | str | Path):
        raise ValueError(f"a benchmark is a Benchmark or a parquet/JSONL path, got {type(b).__name__}")
    bench = b if isinstance(b, Benchmark) else load_benchmark(b)
    if limit is not None:
        bench = Benchmark(bench.name, bench.path, bench.problems[:limit])
    return bench


def _check_names(benches: list[Benchmark]) -> list[Benchmark]:
    """UsageError when two benchmarks share a name (their metrics would share keys); else `benches`."""
    names = [b.name for b in benches]
    if len(set(names)) != len(names):
        raise UsageError(f"two benchmark files share a name: {names}")
    return benches


def run_benchmarks(
    benchmarks: Sequence[Benchmark | str | Path],
    sampler: Sampler,
    *,
    k: int,
    mode: Mode = "equiv",
    limit_problems: int | None = None,
    timeout: float = 1.0,
) -> list[BenchmarkResult]:
    """Sample `k` responses per problem through `sampler`, score them with `math_score`, compute the metrics."""
    if not _is_count(k):
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if mode not in MODES:
        raise ValueError(f"unknown math scoring mode {mode!r}; valid: {', '.join(MODES)}")
    benches = _check_names([_as_benchmark(b, limit_problems) for b in benchmarks])
    if mode == "equiv":
        from rpgrl.rewards import _mathverify

        _mathverify.start()  # the verifier imports sympy while the model generates
    results = []
    for bench in benches:
        problems = list(bench.problems)
        if not problems:
            raise UsageError(f"{bench.path}: no problems")
        responses = sampler(problems, k)
        if len(responses) != len(problems) or any(len(r) != k for r in responses):
            raise ValueError(f"sampler returned the wrong shape for {bench.name}: need {len(problems)} x {k}")
        correct = [
            [bool(math_score(text, p.answer, mode, timeout=timeout)) for text in texts]
            for p, texts in zip(problems, responses, strict=True)
        ]
        votes = [
            [judged_vote(text, p.answer, mode, ok) for text, ok in zip(texts, oks, strict=True)]
            for p, texts, oks in zip(problems, responses, correct, strict=True)
        ]
        metrics = benchmark_metrics(correct, votes)
        results.append(BenchmarkResult(bench.name, problems, responses, correct, metrics, votes))
    return results


def flat_metrics(results: Sequence[BenchmarkResult]) -> dict[str, float]:
    """`eval/<benchmark>/<metric>` for every benchmark and metric (the trainer's log format)."""
    return {f"eval/{r.name}/{key}": value for r in results for key, value in r.metrics.items()}


def evaluate(
    model,
    tokenizer,
    benchmarks: Sequence[Benchmark | str | Path],
    *,
    k: int = 32,
    max_new_tokens: int = 2048,
    mode: Mode = "equiv",
    batch_size: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    limit_problems: int | None = None,
    max_prompt_length: int | None = None,
    progress: bool = False,
    sampler: Sampler | None = None,
) -> dict[str, float]:
    """Flat metrics (`eval/<benchmark>/mean@k`, `.../pass@j`, `.../best@j`, `.../worst@j`) of `model` on the
    benchmark files or `Benchmark`s (one alone is taken as a list of one); `sampler` replaces the model's generation
    (tests, other engines). A value `rpgrl eval` would refuse is a one-line ValueError here too."""
    if isinstance(benchmarks, str | Path | Benchmark):  # a path string would be read one character at a time
        benchmarks = [benchmarks]
    counts = {"max_new_tokens": max_new_tokens, "batch_size": batch_size, "limit_problems": limit_problems,
              "max_prompt_length": max_prompt_length}  # fmt: skip
    for name, value in counts.items():
        optional = name != "max_new_tokens"
        if not (_is_count(value) or (optional and value is None)):
            raise ValueError(f"{name} must be an integer >= 1{' or None' if optional else ''}, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63 - 1], got {seed!r}")
    if sampler is None:
        sampler = model_sampler(
            model,
            tokenizer,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            batch_size=batch_size,
            seed=seed,
            max_prompt_length=max_prompt_length,
            progress=progress,
        )
    results = run_benchmarks(benchmarks, sampler, k=k, mode=mode, limit_problems=limit_problems)
    return flat_metrics(results)


@dataclass
class EvalTracker:
    """The paper's "Last" and "Best" (spec 7.7) of one metric per benchmark across a run's evaluations.

    `update(step, metrics)` takes the flat dict of `evaluate`; "Best" is the maximum over the evaluations seen
    (including step 0 unless `include_step0=False`; the paper does not say), "Last" the latest.
    """

    metric: str = "mean@32"
    include_step0: bool = True
    last: dict[str, tuple[int, float]] = field(default_factory=dict)
    best: dict[str, tuple[int, float]] = field(default_factory=dict)

    def update(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        """Record one evaluation; returns `eval/<benchmark>/best_<metric>` for logging."""
        for key, value in metrics.items():
            parts = key.split("/")
            if len(parts) != 3 or parts[0] != "eval" or parts[2] != self.metric:
                continue
            bench, value = parts[1], float(value)
            if not math.isfinite(value):  # a NaN would stick as Best (nothing compares above it)
                raise ValueError(f"EvalTracker: {key} is {value}, not a finite number")
            self.last[bench] = (step, value)
            if (step > 0 or self.include_step0) and (bench not in self.best or value > self.best[bench][1]):
                self.best[bench] = (step, value)
        return {f"eval/{b}/best_{self.metric}": v for b, (_, v) in self.best.items()}

    def summary(self) -> dict[str, dict[str, float]]:
        """{benchmark: {"last", "last_step", "best", "best_step"}}."""
        out = {}
        for bench, (step, value) in self.last.items():
            row = {"last": value, "last_step": step}
            if bench in self.best:
                row |= {"best": self.best[bench][1], "best_step": self.best[bench][0]}
            out[bench] = row
        return out


# ---------------------------------------------------------------------------------------------------------------
# the `rpgrl eval` command
# ---------------------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="rpgrl eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="local Hugging Face model folder")
    p.add_argument("--data", required=True, nargs="+", action="extend",
                   help="evaluation parquet/JSONL files, one benchmark each (the flag may be repeated)")  # fmt: skip
    p.add_argument("--k", type=int, default=32, help="samples per problem (default 32, as the paper)")
    p.add_argument("--out", default=None,
                   help="folder for metrics.json, samples.jsonl and passk_majk.png (default: print only)")  # fmt: skip
    p.add_argument("--max-new-tokens", type=int, default=2048,
                   help="response length limit (default 2048, as the paper)")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=8,
                   help="problems per generation chunk (default 8, each k rows; the draws depend on it)")  # fmt: skip
    p.add_argument("--mode", choices=MODES, default="equiv",
                   help="answer check (default equiv: math-verify equivalence; strict = the paper's rule)")  # fmt: skip
    p.add_argument("--limit-problems", type=int, default=None, help="first N problems of each benchmark")
    p.add_argument("--max-prompt-length", type=int, default=2048,
                   help="left-truncate prompts to this many tokens (default 2048)")  # fmt: skip
    p.add_argument("--seed", type=seed_arg, default=0, help="sampling seed (default 0)")
    return p


def format_table(results: Sequence[BenchmarkResult]) -> str:
    keys = list(results[0].metrics)
    keys = [k for k in keys if not k.startswith("worst@")]
    header = f"{'benchmark':<16}{'problems':>9}" + "".join(f"{k:>10}" for k in keys)
    rows = [
        f"{utf8_text(r.name):<16}{len(r.problems):>9}"
        + "".join(f"{r.metrics.get(k, float('nan')):>10.4f}" for k in keys)
        for r in results
    ]
    return "\n".join([header, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `rpgrl eval`. SIGINT / SIGTERM stop it with one line and exit code 128 + the signal, the
    --out folder taken back when nothing was written to it (SIGINT printed a traceback; SIGTERM left the folder
    holding only its lock)."""
    try:
        with TermAsInterrupt():
            return _main(argv)
    except KeyboardInterrupt as e:
        sig = interrupt_signal(e)
        keeps = getattr(e, "kept", None)  # set by _main: the chunks an --out folder keeps
        print(f"rpgrl eval: stopped by {sig.name}{f'; {keeps}' if keeps else ' before the report was written'}",
              file=sys.stderr)  # fmt: skip
        return 128 + sig


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    for name in ("k", "max_new_tokens", "batch_size", "limit_problems", "max_prompt_length"):
        value = getattr(args, name)
        if value is not None and not _is_count(value):
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    # scorer, data and output-folder errors before the model is loaded and sampled from
    if args.mode == "equiv":
        from rpgrl.rewards import _mathverify

        _mathverify.require("--mode equiv (the default)")
    benches = _check_names([_as_benchmark(path, args.limit_problems) for path in args.data])
    if args.out is None:
        return _evaluate_and_report(args, benches, None)
    if not args.out.strip():
        raise UsageError("--out needs a folder, got an empty value (leave it out to print only)")
    out = Path(args.out)
    why = dir_problem(out)
    if why is not None:
        raise UsageError(f"cannot create the --out folder {out}: {why}")
    from rpgrl.trainer.rundir import RunLock

    _check_unused(out)
    prompts = _encode_prompts(args, benches)  # before the lock: a refused evaluation leaves nothing in --out
    with RunLock(out):  # one process per folder: a second eval into it stops here, not by overwriting the report
        _check_unused(out)  # again, now that no other process can write there
        try:
            return _evaluate_and_report(args, benches, out, prompts)
        except KeyboardInterrupt as e:
            e.kept = kept(out)
            raise
        except OSError as e:  # the folder's disk full or gone: what was sampled stays in the journal
            full = e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
            if not (full or (e.filename is not None and out.resolve() in Path(e.filename).resolve().parents)):
                raise
            where = f" ({e.filename})" if e.filename else ""
            raise UsageError(f"cannot write in {out}: {e.strerror}{where}; "
                             f"{kept(out) or 'nothing sampled was kept'}") from None  # fmt: skip


def _check_unused(out: Path) -> None:
    from rpgrl.trainer.rundir import is_run_config

    where = out.resolve()
    for run in where.parents:  # the folders a training run rewrites: pruned checkpoints, a re-exported model
        managed = where.relative_to(run).parts[0]
        if managed in ("checkpoints", "model") and is_run_config(run / "config.json"):
            raise UsageError(f"--out {out} lies inside the training run {run}, whose {managed}/ a --resume rewrites "
                             "or prunes: pass a folder outside it (e.g. the run's own eval/)")  # fmt: skip
    taken = [n for n in (*REPORT_FILES, "metrics.jsonl") if (out / n).exists()]
    if taken and not (out / "metrics.json").exists() and (out / JOURNAL).exists():
        return  # an evaluation stopped while sampling or writing its report: the same command continues it
    if taken:  # an earlier evaluation's report, or a training run's directory (its metrics.jsonl)
        raise UsageError(f"--out {out} already holds {', '.join(taken)} (an earlier evaluation or a training run): "
                         "pass a new folder")  # fmt: skip


def _encode_prompts(args: argparse.Namespace, benches: list[Benchmark]) -> list[list[int]]:
    """Every benchmark prompt encoded with the model's tokenizer: each must encode, and fit the model, before the
    weights load."""
    from rpgrl.models import config_vocab, load_tokenizer

    tokenizer = load_tokenizer(args.model)
    prompts = [encode_named(tokenizer, problem.prompt, f"{bench.name} prompt {i}")
               for bench in benches for i, problem in enumerate(bench.problems)]  # fmt: skip
    vocab = config_vocab(args.model)
    if vocab is not None:
        check_token_ids(prompts, vocab, "benchmark prompt")
    return prompts


def draw_settings(args: argparse.Namespace) -> dict:
    """What an evaluation's samples depend on (the scoring mode is not among them): a journal's key."""
    return {
        "model": str(Path(args.model).resolve()),
        "model_files": files_fingerprint(args.model),
        "data": [str(Path(d).resolve()) for d in args.data],
        **{
            k: getattr(args, k)
            for k in ("k", "max_new_tokens", "seed", "batch_size", "limit_problems", "max_prompt_length")
        },  # fmt: skip
        "temperature": 1.0,
        "top_p": 1.0,
    }


def _evaluate_and_report(
    args: argparse.Namespace, benches: list[Benchmark], out: Path | None, prompts: list[list[int]] | None = None
) -> int:
    from rpgrl.models import load_model
    from rpgrl.rollout import check_kv_cache

    prompts = _encode_prompts(args, benches) if prompts is None else prompts
    cut = sum(len(p) > args.max_prompt_length for p in prompts)
    if cut:  # asked for, so no error; but a prompt cut from the left may have lost its question
        print(f"rpgrl eval: {cut} of {len(prompts)} prompts are longer than --max-prompt-length "
              f"{args.max_prompt_length} tokens and are cut to their last {args.max_prompt_length} (as verl's "
              "truncation=left)", file=sys.stderr)  # fmt: skip
    log = Journal(out / JOURNAL, draw_settings(args)) if out is not None else None
    if log is not None and log.chunks:
        print(f"rpgrl eval: continuing the evaluation in {out}: {len(log.chunks)} chunks sampled before are reused",
              file=sys.stderr)  # fmt: skip
    model, tokenizer = load_model(args.model)
    longest = min(max(map(len, prompts)), args.max_prompt_length)  # prompts are left-truncated to it
    check_kv_cache(model, min(args.batch_size, max(len(b.problems) for b in benches)) * args.k,
                   longest + args.max_new_tokens, "lower --max-new-tokens, --k or --batch-size")  # fmt: skip
    sampler = model_sampler(
        model,
        tokenizer,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        seed=args.seed,
        max_prompt_length=args.max_prompt_length,
        progress=True,
        journal=log,
    )
    results = run_benchmarks(benches, sampler, k=args.k, mode=args.mode)
    print(format_table(results))
    if out is not None:
        write_report(out, args, results)
        log.remove()  # the report is whole: nothing left to continue
    return 0


REPORT_FILES = ("metrics.json", "samples.jsonl", "passk_majk.png")  # what `write_report` writes


def write_report(out: Path, args: argparse.Namespace, results: Sequence[BenchmarkResult]) -> None:
    """samples.jsonl (responses, correctness and votes), passk_majk.png and, last, metrics.json in `out`, each
    written whole or not at all."""
    report = {
        "model": args.model,
        "data": args.data,
        "k": args.k,
        "mode": args.mode,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
        "batch_size": args.batch_size,  # the sampler's chunks consume the seeded stream: the draws depend on it
        "limit_problems": args.limit_problems,
        "max_prompt_length": args.max_prompt_length,
        "temperature": 1.0,
        "top_p": 1.0,
        "metrics": flat_metrics(results),
        "benchmarks": {r.name: {"problems": len(r.problems), **r.metrics} for r in results},
    }
    from rpgrl.trainer.checkpoint import write_text_atomic

    lines = []
    for r in results:
        for p, texts, ok, votes in zip(r.problems, r.responses, r.correct, r.votes, strict=True):
            row = {"benchmark": r.name, "data_source": p.data_source, "prompt": p.text, "answer": p.answer}
            lines.append(json.dumps(row | {"responses": texts, "correct": ok, "votes": votes}) + "\n")
    write_text_atomic(out / "samples.jsonl", "".join(lines))
    plot = plot_pass_maj(results, out / "passk_majk.png")
    # last, whole or not at all: a metrics.json means the report is complete (a stop before it says so)
    write_text_atomic(out / "metrics.json", json.dumps(report, indent=2) + "\n")
    written = ", ".join(str(x) for x in (out / "metrics.json", out / "samples.jsonl", plot) if x is not None)
    print(f"wrote {written}", file=sys.stderr)


def pass_maj_curves(results: Sequence[BenchmarkResult]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """{benchmark: {"pass": [(j, pass@j)...], "maj": [(j, maj@j)...]}}, sorted by j: what the plot shows."""
    curves = {}
    for r in results:
        curves[r.name] = {
            kind: sorted((int(key.split("@")[1]), v) for key, v in r.metrics.items() if key.startswith(f"{kind}@"))
            for kind in ("pass", "maj")
        }
    return curves


def plot_pass_maj(results: Sequence[BenchmarkResult], path: Path) -> Path | None:
    """PNG of pass@j and maj@j against j (log2 axis), one panel per benchmark; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return None
    curves = pass_maj_curves(results)
    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.4), squeeze=False)
    for ax, (name, c) in zip(axes.flat, curves.items(), strict=True):
        for kind, marker in (("pass", "o"), ("maj", "s")):
            if c[kind]:
                ax.plot(*zip(*c[kind], strict=True), marker=marker, label=f"{kind}@k")
        ax.set_xscale("log", base=2)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("k (samples per problem)")
        ax.set_title(utf8_text(name), parse_math=False)  # a file name, not mathtext (`p$^$q` raised)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
