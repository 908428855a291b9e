"""Evaluation: pass@k / mean@k / bootstrap best@k against independent references, the evaluation path with
stand-in samplers on the shared files (section-9 item 26), the tracker, and the `rpgrl eval` CLI on a tiny model."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shutil
import signal
import time
from fractions import Fraction

import numpy as np
import pytest
from shared_data import DATA, EVAL_FILES, needs_data

from rpgrl.data import Benchmark, Problem, load_benchmark
from rpgrl.errors import UsageError
from rpgrl.evaluation import (
    EvalTracker,
    benchmark_metrics,
    bootstrap_best_worst,
    bootstrap_ks,
    encode_messages,
    evaluate,
    judged_vote,
    majority_correct,
    pass_at_k,
    pass_maj_curves,
    plot_pass_maj,
    run_benchmarks,
    vote_answer,
)
from rpgrl.rewards.math import math_score

# ---------- metrics against brute force ----------


def pass_at_k_brute(outcomes: list[bool], k: int) -> Fraction:
    """Fraction of the k-subsets of the samples that contain at least one correct sample."""
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    return Fraction(sum(any(outcomes[i] for i in s) for s in subsets), len(subsets))


def test_pass_at_k_matches_subset_enumeration():
    for n in range(1, 9):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            random.Random(n * 10 + c).shuffle(outcomes)  # the order of samples does not matter
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == float(pass_at_k_brute(outcomes, k)), (n, c, k)


def test_pass_at_k_edge_cases_and_stability():
    assert pass_at_k(32, 0, 32) == 0.0 and pass_at_k(32, 32, 1) == 1.0
    assert pass_at_k(32, 1, 32) == 1.0  # any correct sample: pass@n = 1
    assert math.isclose(pass_at_k(32, 16, 2), 1 - (16 * 15) / (32 * 31))  # closed form for k = 2
    for c in range(33):
        assert pass_at_k(32, c, 1) == c / 32  # pass@1 is the accuracy
    # large n: exact, monotone in k, no cancellation (1 - C(n-c,k)/C(n,k) with c = 1 is k/n exactly)
    assert pass_at_k(10_000, 1, 37) == 37 / 10_000
    vals = [pass_at_k(1000, 3, k) for k in range(1, 1001)]
    assert all(a <= b for a, b in zip(vals[:-1], vals[1:], strict=True)) and vals[-1] == 1.0
    with pytest.raises(ValueError, match="need integers 0 <= c <= n"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="k=2.5"):  # a TypeError inside math.comb before
        pass_at_k(4, 1, 2.5)


def test_evaluate_refuses_what_rpgrl_eval_refuses(tmp_path):
    """The Python API took a path string as a list of one-character paths ("data file not found: g"), took
    limit_problems=True as 1, and let bad counts and seeds fail inside range(), torch or the sampler (a probe's)."""
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")

    def sampler(problems, k):
        return [["Answer: 2"] * k for _ in problems]

    assert evaluate(None, None, str(path), k=2, sampler=sampler)["eval/b/mean@2"] == 1.0  # one path alone
    for kwargs, match in [
        ({"max_new_tokens": None}, "max_new_tokens must be an integer >= 1, got None"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be an integer >= 1"),
        ({"batch_size": -1}, "batch_size must be an integer >= 1 or None, got -1"),
        ({"batch_size": 1.5}, "batch_size must be an integer >= 1 or None"),
        ({"limit_problems": True}, "limit_problems must be an integer >= 1"),
        ({"max_prompt_length": 0}, "max_prompt_length must be an integer >= 1 or None, got 0"),
        ({"seed": "a"}, "seed must be an integer in"),
        ({"seed": 2**64}, "seed must be an integer in"),
    ]:
        with pytest.raises(ValueError, match=match):
            evaluate(None, None, [path], k=2, sampler=sampler, **kwargs)
    with pytest.raises(ValueError, match="a benchmark is a Benchmark or a parquet/JSONL path, got int"):
        evaluate(None, None, [5], k=2, sampler=sampler)


def authors_bootstrap(values: list[float], subset_size: int) -> tuple[float, float]:
    """verl's bootstrap_metric loop as the authors run it: global seed 42, 1000 np.random.choice draws."""
    np.random.seed(42)
    best, worst = [], []
    for _ in range(1000):
        draw = [values[i] for i in np.random.choice(len(values), size=subset_size, replace=True)]
        best.append(np.max(draw))
        worst.append(np.min(draw))
    return float(np.mean(best)), float(np.mean(worst))


def test_bootstrap_matches_the_authors_loop():
    rng = random.Random(0)
    for n, p in [(32, 0.1), (32, 0.5), (5, 0.4), (3, 0.7), (1, 1.0)]:
        values = [rng.random() < p for _ in range(n)]
        for k in bootstrap_ks(n):
            assert bootstrap_best_worst(values, k) == pytest.approx(authors_bootstrap(values, k), abs=1e-12)


def test_bootstrap_best_is_not_any_of_k():
    # one correct sample of 32: "any of 32 correct" is 1, the bootstrap best@32 is about 1 - (31/32)^32 = 0.64
    best, worst = bootstrap_best_worst([True] + [False] * 31, 32)
    assert abs(best - (1 - (31 / 32) ** 32)) < 0.05 and worst == 0.0
    assert bootstrap_ks(32) == [2, 4, 8, 16, 32] and bootstrap_ks(5) == [2, 4, 5] and bootstrap_ks(1) == [1]


def test_benchmark_metrics_by_hand():
    correct = [[True, False, False, False], [True, True, False, True], [False] * 4]
    m = benchmark_metrics(correct)
    assert set(m) == {"mean@4", "pass@1", "pass@2", "pass@4", "best@2", "best@4", "worst@2", "worst@4"}
    assert m["mean@4"] == pytest.approx((1 / 4 + 3 / 4 + 0) / 3, abs=1e-15)
    assert m["pass@1"] == pytest.approx(m["mean@4"], abs=1e-15)
    assert m["pass@2"] == pytest.approx((1 / 2 + 1 + 0) / 3, abs=1e-15)  # 1 - C(3,2)/C(4,2) = 1/2; 1 - 0 = 1
    assert m["pass@4"] == pytest.approx(2 / 3, abs=1e-15)
    ref = [authors_bootstrap([float(x) for x in row], 2) for row in correct]
    assert m["best@2"] == pytest.approx(sum(b for b, _ in ref) / 3, abs=1e-12)
    assert set(benchmark_metrics([[True] * 32])) >= {f"pass@{k}" for k in (1, 2, 4, 8, 16, 32)} | {"mean@32"}
    with pytest.raises(ValueError, match="same number"):
        benchmark_metrics([[True], [True, False]])


# ---------- the evaluation path with stand-in samplers ----------


def oracle(problems, n):  # always the ground truth, in the paper's format
    return [[f"Let me think.\nAnswer: {p.answer}"] * n for p in problems]


def garbage(problems, n):  # never an answer, or a wrong one
    return [[("I do not know.", f"Answer: {p.answer}0", "\\boxed{}")[j % 3] for j in range(n)] for p in problems]


@needs_data
@pytest.mark.parametrize("mode", ["equiv", "strict"])
def test_oracle_scores_one_and_garbage_scores_zero(mode):
    files = [DATA / f"{name}.parquet" for name in EVAL_FILES]
    t0 = time.monotonic()
    good = evaluate(None, None, files, k=32, mode=mode, sampler=oracle)
    assert {key.split("/")[1] for key in good} == set(EVAL_FILES)
    assert all(value == 1.0 for value in good.values()), good
    for name in EVAL_FILES:
        assert {f"eval/{name}/mean@32", f"eval/{name}/pass@32", f"eval/{name}/best@32"} <= set(good)
    bad = evaluate(None, None, files, k=6, mode=mode, sampler=garbage)
    assert all(value == 0.0 for value in bad.values()), bad
    assert time.monotonic() - t0 < 30


@needs_data
def test_grouping_samples_each_problem_once_with_n_copies():
    calls = []

    def spy(problems, n):
        calls.append((len(problems), n, len({p.text for p in problems})))
        return oracle(problems, n)

    results = run_benchmarks([DATA / f"{name}.parquet" for name in EVAL_FILES], spy, k=32)
    assert calls == [(30, 32, 30), (30, 32, 30), (40, 32, 40)]
    assert [len(r.problems) for r in results] == [30, 30, 40]


def test_worst_at_j_is_the_worst_of_j_not_the_best():
    from rpgrl.evaluation import benchmark_metrics, bootstrap_best_worst

    rows = [[True, False, False, True], [False, False, True, False]]
    m = benchmark_metrics(rows)
    for j in (2, 4):
        best, worst = zip(*(bootstrap_best_worst(r, j) for r in rows), strict=True)
        assert m[f"worst@{j}"] == pytest.approx(sum(worst) / 2) and m[f"best@{j}"] == pytest.approx(sum(best) / 2)
        assert m[f"worst@{j}"] < m["mean@4"] < m[f"best@{j}"]


def test_partially_right_sampler_gives_the_expected_metrics():
    problems = [Problem("toy", [{"role": "user", "content": f"q{i}"}], str(i), 1) for i in range(5)]
    n_right = [0, 1, 3, 7, 8]

    def sampler(ps, n):
        return [
            [f"Answer: {p.answer}" if j < c else "Answer: x" for j in range(n)]
            for p, c in zip(ps, n_right, strict=True)
        ]

    m = evaluate(None, None, [Benchmark("toy", "-", tuple(problems))], k=8, mode="strict", sampler=sampler)
    assert m["eval/toy/mean@8"] == pytest.approx(sum(c / 8 for c in n_right) / 5, abs=1e-15)
    for k in (1, 2, 4, 8):
        assert m[f"eval/toy/pass@{k}"] == pytest.approx(sum(pass_at_k(8, c, k) for c in n_right) / 5, abs=1e-15)


def test_bad_sampler_shape_and_bad_k():
    bench = Benchmark("toy", "-", (Problem("toy", [{"role": "user", "content": "q"}], "1", 1),))
    with pytest.raises(ValueError, match="wrong shape"):
        run_benchmarks([bench], lambda ps, n: [["Answer: 1"]], k=2)
    for k in (0, 2.0, True):
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            run_benchmarks([bench], oracle, k=k)
    for limit in (0, -1, 1.5):  # a negative limit sliced [:-1]: every problem but the last
        with pytest.raises(ValueError, match="limit_problems must be an integer >= 1"):
            run_benchmarks([bench], oracle, k=1, limit_problems=limit)


def test_benchmark_metrics_takes_numpy_rows_as_lists():
    rng = np.random.default_rng(0)
    correct = rng.random((5, 8)) < 0.4
    assert benchmark_metrics(correct) == benchmark_metrics(correct.tolist())
    with pytest.raises(ValueError, match="one sequence of booleans per problem"):
        benchmark_metrics(["1010", "0101"])


def test_tracker_last_and_best():
    t = EvalTracker(metric="mean@32")
    t.update(0, {"eval/aime/mean@32": 0.5, "eval/aime/pass@1": 0.5, "eval/amc/mean@32": 0.1})
    t.update(10, {"eval/aime/mean@32": 0.4, "eval/amc/mean@32": 0.3})
    logged = t.update(20, {"eval/aime/mean@32": 0.45, "eval/amc/mean@32": 0.2})
    assert logged == {"eval/aime/best_mean@32": 0.5, "eval/amc/best_mean@32": 0.3}
    assert t.summary()["aime"] == {"last": 0.45, "last_step": 20, "best": 0.5, "best_step": 0}
    t.update(30, {"eval/aime/mean@32": 0.5})  # a tie: "Best" keeps the step that reached it first
    assert t.summary()["aime"] == {"last": 0.5, "last_step": 30, "best": 0.5, "best_step": 0}
    t0 = EvalTracker(metric="mean@32", include_step0=False)
    t0.update(0, {"eval/aime/mean@32": 0.5})
    t0.update(10, {"eval/aime/mean@32": 0.4})
    assert t0.summary()["aime"]["best"] == 0.4  # the pre-training evaluation is not a candidate for "Best"
    t1 = EvalTracker(metric="mean@32")
    with pytest.raises(ValueError, match="eval/aime/mean@32 is nan, not a finite number"):
        t1.update(0, {"eval/aime/mean@32": float("nan")})  # it would stay Best: nothing compares above a NaN


# ---------- prompts and the real model path ----------


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from rpgrl.models import build_byte_tokenizer, build_tiny_model

    torch.set_num_threads(2)
    tok = build_byte_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64, max_positions=1024)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_encode_messages_uses_the_chat_template_when_present():
    pytest.importorskip("transformers")
    from rpgrl.models import build_byte_tokenizer

    tok = build_byte_tokenizer()
    messages = [{"role": "user", "content": "What is 1+1?"}]
    assert tok.decode(encode_messages(tok, messages)) == "<|user|>\nWhat is 1+1?\n<|assistant|>\n"
    tok.chat_template = None
    raw = encode_messages(tok, messages)
    assert raw[0] == tok.bos_token_id and tok.decode(raw, skip_special_tokens=True) == "What is 1+1?"
    assert encode_messages(tok, messages, max_length=5) == raw[-5:]  # left truncation keeps the end (as verl)
    tok.chat_template = "{{ raise_exception('unknown role ' + messages[0]['role']) }}"
    with pytest.raises(UsageError, match="chat template fails on the prompt .*: unknown role user"):
        encode_messages(tok, messages)
    tok.chat_template = "{% if %}"
    with pytest.raises(UsageError, match="chat template fails on the prompt"):
        encode_messages(tok, messages)


@needs_data
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_rpgrl_eval_in_one_line(tiny_model_dir, tmp_path, capsys, monkeypatch, signum):
    """SIGINT printed a 30-line KeyboardInterrupt traceback; SIGTERM stopped with no word and left --out holding
    only its lock. Both: one line, exit 128 + the signal, the --out folder taken back."""
    import rpgrl.evaluation as ev
    from rpgrl.cli import main

    def stopped(*args, **kwargs):
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the signal's handler raises before this returns
        raise AssertionError("the signal did not stop the evaluation")

    monkeypatch.setattr(ev, "run_benchmarks", stopped)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "out"
    argv = ["eval", "--model", str(tiny_model_dir), "--data", str(DATA / "amc-23.parquet"), "--k", "2",
            "--limit-problems", "1", "--max-new-tokens", "4", "--out", str(out)]  # fmt: skip
    sigint = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even in a background job
    try:
        assert main(argv) == 128 + signum
    finally:
        signal.signal(signal.SIGINT, sigint)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"stopped by {signal.Signals(signum).name}" in err, err
    assert not out.exists()
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is put back


@needs_data
def test_a_signal_while_the_report_is_written_leaves_no_metrics_json(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """The stop line says "before the report was written": metrics.json, the report, is written last and whole (it
    was written first, so a stop while the samples or the plot were written left it beside a cut samples.jsonl)."""
    import rpgrl.evaluation as ev
    from rpgrl.cli import main

    def stopped(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("the signal did not stop the evaluation")

    monkeypatch.setattr(ev, "plot_pass_maj", stopped)
    out = tmp_path / "out"
    argv = ["eval", "--model", str(tiny_model_dir), "--data", str(DATA / "amc-23.parquet"), "--k", "2",
            "--limit-problems", "2", "--max-new-tokens", "4", "--out", str(out)]  # fmt: skip
    assert main(argv) == 143
    err = capsys.readouterr().err
    last = err.splitlines()[-1]  # after the progress bar's own line
    assert "Traceback" not in err and f"stopped by SIGTERM; 1 sampled chunk kept in {out / 'partial.jsonl'}" in last
    assert not (out / "metrics.json").exists()
    assert len((out / "samples.jsonl").read_text().splitlines()) == 2  # whole
    monkeypatch.undo()  # the same command again finishes the report (the folder was refused: it held samples.jsonl)
    assert main(argv) == 0 and (out / "metrics.json").is_file() and not (out / "partial.jsonl").exists()


@needs_data
def test_rpgrl_eval_cli_on_a_tiny_model(tiny_model_dir, tmp_path, capsys):
    from rpgrl.cli import main

    out = tmp_path / "out"
    t0 = time.monotonic()
    code = main(
        ["eval", "--model", str(tiny_model_dir), "--data", str(DATA / "amc-23.parquet"), "--k", "4",
         "--limit-problems", "3", "--max-new-tokens", "8", "--batch-size", "2", "--out", str(out), "--seed", "1"]
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert code == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "amc-23" in printed and "mean@4" in printed
    assert "problem" in captured.err  # the progress bar counts problems
    report = json.loads((out / "metrics.json").read_text())
    assert report["k"] == 4 and report["benchmarks"]["amc-23"]["problems"] == 3
    settings = {"batch_size": 2, "limit_problems": 3, "max_prompt_length": 2048, "temperature": 1.0, "top_p": 1.0}
    assert {key: report[key] for key in settings} == settings  # what the draws depend on, besides model and seed
    assert set(report["metrics"]) >= {"eval/amc-23/mean@4", "eval/amc-23/pass@4", "eval/amc-23/best@4"}
    assert all(0.0 <= v <= 1.0 for v in report["metrics"].values())
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    expected = load_benchmark(DATA / "amc-23.parquet").problems[:3]
    assert [s["answer"] for s in samples] == [p.answer for p in expected]
    assert all(len(s["responses"]) == 4 and len(s["correct"]) == 4 for s in samples)
    assert all(s["votes"] == [judged_vote(r, s["answer"]) for r in s["responses"]] for s in samples)
    assert "eval/amc-23/maj@4" in report["metrics"]
    assert (out / "passk_majk.png").read_bytes()[:4] == b"\x89PNG"
    assert elapsed < 30, elapsed
    # a second evaluation into the same folder would overwrite the first: refused, the first report untouched
    first = {n: (out / n).read_bytes() for n in ("metrics.json", "samples.jsonl", "passk_majk.png")}
    again = ["eval", "--model", str(tiny_model_dir), "--data", str(DATA / "amc-23.parquet"), "--out", str(out)]
    assert main(again) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds metrics.json, samples.jsonl, passk_majk.png" in err, err
    assert {n: (out / n).read_bytes() for n in first} == first
    run = tmp_path / "run"  # a training run's directory (its metrics.jsonl); a model folder's config.json is fine
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    assert main([*again[:-1], str(run)]) == 2
    assert "already holds metrics.jsonl" in capsys.readouterr().err
    assert [q.name for q in run.iterdir()] == ["metrics.jsonl"]


def test_rpgrl_eval_says_how_many_prompts_max_prompt_length_cuts(tiny_model_dir, capsys):
    """`--max-prompt-length 1` cut every prompt to its last token without a word (a question lost, silently)."""
    from rpgrl.cli import main

    base = ["eval", "--model", str(tiny_model_dir), "--data", str(DATA / "amc-23.parquet"), "--k", "1",
            "--limit-problems", "3", "--max-new-tokens", "2", "--batch-size", "3"]  # fmt: skip
    assert main([*base, "--max-prompt-length", "1"]) == 0
    err = capsys.readouterr().err
    assert "3 of 3 prompts are longer than --max-prompt-length 1 tokens and are cut to their last 1" in err
    assert main(base) == 0  # the default 2048 cuts none of them: no such line
    assert "--max-prompt-length" not in capsys.readouterr().err


def test_out_inside_a_training_runs_managed_folders_is_refused(tiny_model_dir, tmp_path, capsys):
    """A report in RUN/checkpoints/step-N was deleted with the checkpoint by a --resume's pruning, and one in
    RUN/model sat beside weights a later export rewrote (a probe's): refused; RUN/eval is the run's to keep."""
    from rpgrl.cli import main
    from rpgrl.evaluation import _check_unused

    data = tmp_path / "b.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    run = tmp_path / "run"
    (run / "checkpoints" / "step-000002").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"train": {}, "loss": {}}))  # as `rpgrl train` writes it
    for inside in ("checkpoints/step-000002", "model", "model/eval"):
        argv = ["eval", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(run / inside)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"lies inside the training run {run.resolve()}" in err, err
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == ["checkpoints", "checkpoints/step-000002",
                                                                     "config.json"]  # fmt: skip
    _check_unused(run / "eval")  # the run's own folder for reports
    _check_unused(tmp_path / "model" / "x")  # a folder named model outside any run


def test_progress_bar_does_not_change_the_draws(tiny_model_dir, capsys):
    from rpgrl.evaluation import model_sampler
    from rpgrl.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    problems = [Problem("toy", [{"role": "user", "content": f"{i}+1?"}], "1", 1) for i in range(5)]
    draws = {}
    for progress in (False, True):
        sampler = model_sampler(model, tok, max_new_tokens=6, batch_size=2, seed=3, progress=progress)
        draws[progress] = sampler(problems, 3)
    assert draws[True] == draws[False] and len(draws[True]) == 5 and all(len(d) == 3 for d in draws[True])
    assert "5/5" in capsys.readouterr().err  # one bar over the five problems


def test_a_stop_while_sampling_closes_the_progress_bar(tiny_model_dir, capsys, monkeypatch):
    """The stop line of `rpgrl eval` was printed at the end of the bar's line: the bar is closed (its line ended)
    when sampling is stopped, as when it finishes."""
    import rpgrl.rollout
    from rpgrl.evaluation import model_sampler
    from rpgrl.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    real, calls = rpgrl.rollout.sample, []

    def stopped_at_the_second_chunk(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(rpgrl.rollout, "sample", stopped_at_the_second_chunk)
    problems = [Problem("toy", [{"role": "user", "content": f"{i}+1?"}], "1", 1) for i in range(5)]
    with pytest.raises(KeyboardInterrupt) as stop:  # kept: its traceback holds the sampler's frame, as main()'s does
        model_sampler(model, tok, max_new_tokens=4, batch_size=2, progress=True)(problems, 2)
    err = capsys.readouterr().err
    del stop
    assert "2/5" in err and err.endswith("\n"), repr(err[-80:])


def test_model_sampler_gives_each_problem_its_own_samples(tiny_model_dir, monkeypatch):
    """`rollout.sample` returns a chunk's rows prompt by prompt (rows i*n .. i*n+n-1 for prompt i): each problem
    gets its own n samples, whatever the batching (a review's mutant handed problems each other's responses)."""
    import rpgrl.rollout
    from rpgrl.evaluation import model_sampler
    from rpgrl.models import load_model

    def fake_sample(model, tokenizer, prompts, *, n, **kw):
        return type("R", (), {"texts": [f"{tokenizer.decode(p)}#{j}" for p in prompts for j in range(n)]})

    monkeypatch.setattr(rpgrl.rollout, "sample", fake_sample)
    model, tok = load_model(str(tiny_model_dir))
    problems = [Problem("toy", [{"role": "user", "content": f"q{i}"}], "1", 1) for i in range(5)]
    draws = model_sampler(model, tok, max_new_tokens=8, batch_size=2)(problems, 3)
    prompts = [tok.decode(encode_messages(tok, p.prompt)) for p in problems]
    assert draws == [[f"{q}#{j}" for j in range(3)] for q in prompts]


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--model", "m", "--data", "nope.parquet"], "data file not found"),
        (["--model", "m", "--data", "x.parquet", "--k", "0"], "--k must be >= 1"),
        (["--model", "m", "--data", "x.parquet", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    ],
)
def test_rpgrl_eval_cli_user_errors(argv, match, capsys):
    from rpgrl.cli import main

    assert main(["eval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err


def test_rpgrl_eval_on_comma_joined_files_says_to_pass_them_apart(tmp_path, capsys, monkeypatch):
    """`--data aime25.parquet,amc-23.parquet` was told "one file per option: join several into one" (the training
    file's advice: joined, two benchmarks would be scored as one), and with absolute paths nothing at all (the comma
    was looked for in the last component only). Now: pass them as separate files, in both cases."""
    from rpgrl.cli import main

    monkeypatch.chdir(tmp_path)
    for data in ("aime25.parquet,amc-23.parquet", f"{tmp_path}/aime25.parquet,{tmp_path}/amc-23.parquet"):
        assert main(["eval", "--model", str(tmp_path / "none"), "--data", data]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "one benchmark per file: pass each file separately" in err, err
        assert "join several" not in err


@needs_data
def test_rpgrl_eval_cli_missing_model(tmp_path, capsys):
    from rpgrl.cli import main

    assert main(["eval", "--model", str(tmp_path / "none"), "--data", str(DATA / "amc-23.parquet")]) == 2
    assert "model folder not found" in capsys.readouterr().err


def test_usage_error_for_duplicate_benchmark_names(tmp_path):
    bench = Benchmark("toy", "-", (Problem("toy", [{"role": "user", "content": "q"}], "1", 1),))
    with pytest.raises(UsageError, match="share a name"):
        run_benchmarks([bench, bench], oracle, k=1)


@needs_data
def test_rpgrl_eval_cli_checks_names_and_out_before_loading_the_model(tmp_path, capsys):
    """No model exists at --model: each error must come from the earlier check, before any loading or sampling."""
    from rpgrl.cli import main

    amc, model = str(DATA / "amc-23.parquet"), str(tmp_path / "none")
    assert main(["eval", "--model", model, "--data", amc, amc]) == 2
    assert "two benchmark files share a name" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["eval", "--model", model, "--data", amc, "--out", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot create the --out folder" in err and "\n" not in err
    assert main(["eval", "--model", model, "--data", amc, "--out", str(tmp_path / "new")]) == 2
    assert "model folder not found" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # a refused evaluation leaves no folder behind
    assert main(["eval", "--model", model, "--data", amc, "--seed", str(2**64)]) == 2
    assert "seed must be in [0, 2**63 - 1]" in capsys.readouterr().err


def test_rpgrl_eval_on_a_saved_char_tokenizer_model(tmp_path, capsys):
    """The run directory's `model/` of the embedded demo (character tokenizer) evaluates; a prompt it cannot
    spell is one line."""
    from rpgrl.cli import main
    from rpgrl.models import build_char_tokenizer, build_tiny_model
    from rpgrl.rewards.synthetic import CHARS

    tok = build_char_tokenizer(CHARS)
    build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    data = tmp_path / "synthetic.jsonl"
    data.write_text(json.dumps({"prompt": "Q:123+456\n", "answer": "579"}) + "\n")
    argv = ["eval", "--model", str(tmp_path / "model"), "--k", "2", "--max-new-tokens", "4", "--mode", "strict"]
    assert main([*argv, "--data", str(data)]) == 0
    assert "synthetic" in capsys.readouterr().out
    data.write_text(json.dumps({"prompt": "What is 1+1?", "answer": "2"}) + "\n")
    assert main([*argv, "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot encode the prompt 'What is 1+1?'" in err and "'Whati?'" in err
    # a generation the machine cannot hold is refused once the model has loaded, before --out is created
    data.write_text(json.dumps({"prompt": "Q:1+2\n", "answer": "3"}) + "\n")
    big = [*argv[:4], str(10**11), *argv[5:], "--data", str(data), "--out", str(tmp_path / "out")]
    assert main(big) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "generating 100000000000 rows of" in err and "lower --max-new-tokens, --k" in err
    assert not (tmp_path / "out").exists()
    # weights that do not fill the model config.json describes
    cfg = json.loads((tmp_path / "model" / "config.json").read_text())
    cfg.pop("layer_types", None)
    (tmp_path / "model" / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": 2}))
    assert main([*argv, "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "do not match its config.json: 12 missing" in err


@pytest.mark.parametrize(
    "argv, match",
    [
        ([], "the following arguments are required: --model, --data"),
        (["--model", "m", "--data", "x.jsonl", "--k", "many"], "argument --k: invalid int value: 'many'"),
        (["--model", "m", "--data", "x.jsonl", "--mode", "loose"], "argument --mode: invalid choice: 'loose'"),
        (
            ["--model", "m", "--data", "x.jsonl", "--seeed", "1"],
            "unrecognized arguments: --seeed 1; did you mean --seed?",
        ),
        # abbreviations were taken (`--limit 5` ran as --limit-problems 5) where `rpgrl train` refuses them
        (["--model", "m", "--data", "x.jsonl", "--limit", "5"], "--limit 5; did you mean --limit-problems?"),
        (["--mod", "m", "--data", "x.jsonl"], "unrecognized arguments: --mod; did you mean --mode or --model?"),
        (["--data", "x.jsonl", "--mod=m"], "unrecognized arguments: --mod; did you mean --mode or --model?"),
    ],
)
def test_rpgrl_eval_argparse_errors_are_one_line(argv, match, capsys):
    from rpgrl.cli import main

    assert main(["eval", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and match in captured.err and captured.out == ""


# ---------- maj@k: majority vote, by hand ----------


@pytest.mark.parametrize(
    "response,mode,vote",
    [
        ("so x = 7\nAnswer: 7", "strict", "7"),
        ("Answer: $7$.", "equiv", "7"),  # delimiters and the period cleaned away
        ("Answer: \\frac12", "strict", "\\frac{1}{2}"),  # the authors' normalisation
        ("\\boxed{12}", "equiv", "12"),  # equiv reads a box without an Answer line
        ("\\boxed{12}", "strict", None),  # strict does not: no vote
        ("I do not know.", "equiv", None),
        ("Answer: \\boxed{}", "equiv", None),  # an empty answer does not vote
        # Unicode and repeating decimals vote with their LaTeX forms
        ("Answer: \u00bd", "equiv", "\\frac{1}{2}"),
        ("Answer: \u221a2", "equiv", "\\sqrt{2}"),
        ("Answer: 0.\\overline{3}", "equiv", "\\frac{1}{3}"),
    ],
)
def test_vote_answer(response, mode, vote):
    assert vote_answer(response, mode) == vote


def test_majority_correct_ties_and_abstentions():
    assert majority_correct(["5", "7", "7"], [False, True, True])  # 7 has two votes
    assert not majority_correct(["5", "7", "7", "5"], [False, True, True, False])  # 2-2: 5 was sampled first
    assert majority_correct([None, "7", "5", None], [False, True, False, False])  # 1-1 among voters: 7 first
    assert not majority_correct([None, None], [False, False])  # nobody votes: unsolved
    assert majority_correct(["7", "7", "5", "5", "5"], [True, False, False, False, False]) is False  # 3 beat 2
    # the verdict is the first winning sample's, even if a later sample with the same vote was judged differently
    assert majority_correct(["7", "7"], [True, False])


def test_maj_at_k_hand_worked():
    """Two problems, answer 7, six samples each (strict scoring):
    p0: 5 7 7 5 - 3     maj@1: 5 wrong; maj@2: 5,7 tie -> 5 wrong; maj@4: 5,7 2-2 -> 5 wrong; maj@6: 5,7 2-2 -> 5 wrong
    p1: - - 7 3 7 7     maj@1, maj@2: no votes, wrong; maj@4: 7,3 1-1 -> 7 right; maj@6: 7 three votes, right
    so maj@1 = maj@2 = 0, maj@4 = maj@6 = 1/2; pass@j counts p0's two and p1's three correct samples."""
    samples = [["5", "7", "7", "5", None, "3"], [None, None, "7", "3", "7", "7"]]
    problems = [Problem("toy", [{"role": "user", "content": f"q{i}"}], "7", 1) for i in range(2)]

    def sampler(ps, n):
        return [[f"Answer: {a}" if a else "no idea" for a in row[:n]] for row in samples]

    m = evaluate(None, None, [Benchmark("toy", "-", tuple(problems))], k=6, mode="strict", sampler=sampler)
    assert {k: v for k, v in m.items() if "/maj@" in k} == {
        "eval/toy/maj@1": 0.0,
        "eval/toy/maj@2": 0.0,
        "eval/toy/maj@4": 0.5,
        "eval/toy/maj@6": 0.5,
    }
    assert m["eval/toy/pass@1"] == pytest.approx((2 / 6 + 3 / 6) / 2, abs=1e-15)
    assert m["eval/toy/pass@4"] == pytest.approx((pass_at_k(6, 2, 4) + pass_at_k(6, 3, 4)) / 2, abs=1e-15)


def test_pass_maj_plot_shows_the_metrics(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    bench = Benchmark("toy", "-", tuple(Problem("toy", [{"role": "user", "content": "q"}], "1", 1) for _ in range(1)))
    results = run_benchmarks([bench, Benchmark("toy2", "-", bench.problems)], oracle, k=3, mode="strict")
    curves = pass_maj_curves(results)
    assert curves["toy"] == {"pass": [(1, 1.0), (2, 1.0)], "maj": [(1, 1.0), (2, 1.0), (3, 1.0)]}
    png = plot_pass_maj(results, tmp_path / "p.png")
    image = imread(png)
    assert image.shape[:2] == (340, 840)  # two panels of 4.2 x 3.4 inches at 100 dpi
    assert image[..., :3].std() > 0.05  # something is drawn


def test_a_benchmark_named_with_dollar_signs_gets_its_plot(tmp_path):
    """A benchmark file named `p$^$q.jsonl` sampled every problem, then failed drawing passk_majk.png: matplotlib read
    the title as mathtext and raised ParseSyntaxException (a traceback, exit 1, no metrics.json, the same on every
    rerun). The title is the name as written."""
    pytest.importorskip("matplotlib")
    problem = Problem("toy", [{"role": "user", "content": "q"}], "1", 1)
    results = run_benchmarks([Benchmark(name, "-", (problem,)) for name in ("p$^$q", "$\\nope$")], oracle, k=2,
                             mode="strict")  # fmt: skip
    assert plot_pass_maj(results, tmp_path / "p.png").stat().st_size > 1000


def test_a_benchmark_file_named_in_another_encoding_gets_its_report(tiny_model_dir, tmp_path, capsys):
    """A benchmark whose file name is not UTF-8 (Latin-1 `é`, a surrogate escape in Python) sampled every problem,
    then failed printing its table (a UTF-8 stdout, as in the locale en_US.UTF-8) or drawing passk_majk.png
    (matplotlib refuses the title): a traceback, exit 1, no metrics.json, the same on every rerun (a review's probe).
    The report is written; its table and plot title show the byte escaped."""
    from rpgrl.cli import main

    data = tmp_path / os.fsdecode(b"bench\xe9.jsonl")
    data.write_text("".join(json.dumps({"prompt": f"What is {i}+1?", "answer": str(i + 1)}) + "\n" for i in range(2)))
    out = tmp_path / "out"
    assert main(_eval_argv(tiny_model_dir, data, out)) == 0, capsys.readouterr().err
    metrics, samples = _report(out)
    rows = [json.loads(line) for line in samples.splitlines()]
    name = os.fsdecode(b"bench\xe9")
    assert [r["benchmark"] for r in rows] == [name, name] and (out / "passk_majk.png").stat().st_size > 1000
    mean = sum(sum(r["correct"]) for r in rows) / (3 * len(rows))  # k = 3 samples per problem
    assert metrics[f"eval/{name}/mean@3"] == mean and not (out / "partial.jsonl").exists()
    assert "\nbench\\udce9  " in capsys.readouterr().out


def test_rpgrl_eval_with_a_tokenizer_larger_than_the_model_is_one_line(tmp_path, capsys):
    """A byte tokenizer (259 ids) next to a model of 50 embeddings: refused from config.json, before the weights
    load (was a traceback at the first sampling); `--out` is not created."""
    from rpgrl.cli import main
    from rpgrl.models import build_byte_tokenizer, build_tiny_model, config_vocab

    tok = build_byte_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    model.resize_token_embeddings(50)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    assert config_vocab(tmp_path / "model") == 50 and config_vocab(tmp_path / "none") is None
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "What is 1+1?", "answer": "2"}) + "\n")
    capsys.readouterr()
    argv = ["eval", "--model", str(tmp_path / "model"), "--data", str(data), "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "benchmark prompt 0 encodes to token id" in err and "vocabulary of 50" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


# ---------- review fixes: scorer present, repeated flags, consistent votes, templates, one eval per folder ----------


def test_remarks_a_grader_reads_past_do_not_split_the_vote():
    """Correctness reads past remarks (`540 (the remainder)`, `The answer is 540.`); the vote kept them, so three
    correct samples voted three ways and two wrong ones won maj@5 (a review's)."""
    responses = ["Answer: 541", "Answer: 541", "Answer: 540", "Answer: 540 (the remainder)",
                 "Answer: The answer is 540."]  # fmt: skip
    assert [math_score(r, "540") for r in responses] == [False, False, True, True, True]
    assert [judged_vote(r, "540") for r in responses] == ["541", "541", "540", "540", "540"]
    res = run_benchmarks([Benchmark("t", "-", (Problem("t", "q", "540", 0),))], lambda ps, n: [responses], k=5)
    assert res[0].metrics["maj@5"] == 1.0
    # wrong answers keep their own votes: stripping what looks like a remark merged 3(a-b) with 3(b-a), and
    # 2\sin(x) with 2\sin(y) (a review of the first fix)
    wrong = ["Answer: $3(a-b)$", "Answer: $3(b-a)$", "Answer: $2\\sin(x)$", "Answer: $2\\sin(y)$", "Answer: (B)"]
    assert len({judged_vote(r, "3(a+b)") for r in wrong}) == 5
    votes = [judged_vote(r, "3(a+b)") for r in ["Answer: $3(a+b)$", "Answer: $3(a-b)$", "Answer: $3(b-a)$"]]
    assert votes == ["3(a+b)", "3(a-b)", "3(b-a)"] and majority_correct(votes, [True, False, False])
    assert judged_vote("Answer: 1080/2", "540", correct=True) == "540"  # the correctness given is the one voted
    # a hedge is wrong, but the authors' normalisation reads it as its last value: it abstains (it voted for the
    # truth and, sampled first, made the majority "wrong": a review's)
    # strict mode keys votes by the authors' normalisation alone: 50 (wrong for 50\\%) votes apart
    strict = ["Answer: 50", "Answer: 50\\%", "Answer: 50\\%"]
    oks = [math_score(r, "50\\%", "strict") for r in strict]
    votes = [judged_vote(r, "50\\%", "strict") for r in strict]
    assert oks == [False, True, True] and votes == ["50", "50\\%", "50\\%"] and majority_correct(votes, oks)
    hedge = "Answer: x = 4 or x = 5"
    assert not math_score(hedge, "5") and judged_vote(hedge, "5") is None
    res = run_benchmarks([Benchmark("t", "-", (Problem("t", "q", "5", 0),))], lambda ps, n: [[hedge, "Answer: 5"]], k=2)
    assert res[0].metrics["maj@2"] == 1.0


def test_maj_votes_read_the_answer_the_verdict_read():
    """A response whose `Answer: 42` the authors' rule reads and whose final answer is another (a later
    `**Answer**: 41` label) was right for both 42 and 41 in equiv mode (a review's): equiv judges its final answer
    only, and the vote is that answer, so the majority's verdict does not depend on sample order."""
    a, b = "Answer: 42\n...\n**Answer**: 41", "Answer: 41"
    assert not math_score(a, "42") and math_score(a, "41") and not math_score(b, "42")
    assert judged_vote(a, "42") == vote_answer(a) == "41" and judged_vote(b, "42") == "41"
    assert judged_vote(a, "42", "strict") == vote_answer(a, "strict") == "42"

    def maj(texts):
        return run_benchmarks([Benchmark("t", "-", (Problem("t", "q", "42", 0),))], lambda ps, n: [texts], k=3,
                              mode="equiv")[0].metrics["maj@3"]  # fmt: skip

    assert maj([a, b, b]) == 0.0 and maj([b, a, a]) == 0.0 and maj([a, "Answer: 42", "\\boxed{42}"]) == 1.0
    rng = random.Random(0)  # maj@1 is mean@1 on any mix of such responses
    pool = [a, b, "\\boxed{42}", "Answer: 42", "**Answer**: 42", "no answer", "Answer: 40\n\\boxed{42}"]
    for _ in range(20):
        texts = [rng.choice(pool) for _ in range(3)]
        m = run_benchmarks([Benchmark("t", "-", (Problem("t", "q", "42", 0),))], lambda ps, n, t=texts: [t[:n]],
                           k=1)[0].metrics  # fmt: skip
        assert m["maj@1"] == m["mean@1"]


def test_equiv_scoring_without_math_verify_is_one_line_before_any_model_loads(monkeypatch, tmp_path, capsys):
    import importlib.util

    from rpgrl.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "math_verify" else real(name, *a))
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    model = str(tmp_path / "no-model")  # never reached: the scorer is checked first
    assert main(["eval", "--model", model, "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--mode equiv (the default) scores answers with math-verify" in err, err
    assert main(["eval", "--model", model, "--data", str(data), "--mode", "strict"]) == 2
    assert "model folder not found" in capsys.readouterr().err  # strict mode needs no math-verify

    from rpgrl.config import Config, DataConfig, EvalConfig
    from rpgrl.trainer.setup import resolve_components

    with pytest.raises(UsageError, match="data.reward 'math' scores answers with math-verify"):
        resolve_components(Config(data=DataConfig(reward="math")))
    resolve_components(Config(data=DataConfig(reward="math_strict")))
    with pytest.raises(UsageError, match="eval.scoring 'equiv' .* scores answers with math-verify"):
        resolve_components(Config(data=DataConfig(reward="math_strict"), eval=EvalConfig(benchmarks="x.parquet")))


def test_repeated_data_flags_evaluate_every_file():
    from rpgrl.evaluation import _parser

    args = _parser().parse_args(["--model", "m", "--data", "a.parquet", "--data", "b.parquet", "c.parquet"])
    assert args.data == ["a.parquet", "b.parquet", "c.parquet"]


def test_chat_templates_that_raise_or_render_nothing_are_one_line():
    pytest.importorskip("transformers")
    from rpgrl.models import build_byte_tokenizer

    tok = build_byte_tokenizer()
    messages = [{"role": "user", "content": "What is 1+1?"}]
    for template, what in [("{{ messages[0]['content'] + 1 }}", "TypeError"), ("{{ 1 // 0 }}", "ZeroDivisionError"),
                           ("{% for m in messages %}{% endfor %}", "as no tokens")]:  # fmt: skip
        tok.chat_template = template
        with pytest.raises(UsageError, match="chat template") as e:
            encode_messages(tok, messages)
        assert what in str(e.value) and "\n" not in str(e.value)


def test_one_evaluation_per_out_folder(tiny_model_dir, tmp_path, capsys):
    """An evaluation holds --out's lock while it runs: a second one into the same folder is refused at once (it used
    to pass the check and overwrite the report of whichever finished first)."""
    from rpgrl.cli import main
    from rpgrl.trainer.rundir import RunLock

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    out = tmp_path / "out"
    argv = ["eval", "--model", str(tiny_model_dir), "--data", str(data), "--k", "1", "--max-new-tokens", "2",
            "--mode", "strict", "--out", str(out)]  # fmt: skip
    with RunLock(out):  # another process's evaluation, still sampling
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "in use by another rpgrl process" in err, err
    assert main(argv) == 0 and (out / "metrics.json").is_file()


def _eval_argv(model, data, out, *extra):
    return ["eval", "--model", str(model), "--data", str(data), "--k", "3", "--max-new-tokens", "6",
            "--batch-size", "1", "--mode", "strict", "--seed", "5", "--out", str(out), *extra]  # fmt: skip


def _report(out):
    metrics = json.loads((out / "metrics.json").read_text())
    return metrics["metrics"], (out / "samples.jsonl").read_text()


def test_a_stopped_evaluation_continues_where_it_stopped(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """A stop mid-evaluation threw the sampled chunks away (hours at k = 32, 2048 tokens; a review's): they are
    kept in --out/partial.jsonl, and the same command replays them and the generator's state, so the report equals
    an uninterrupted run's, draw for draw. A kill's cut line is dropped; other settings are refused in one line."""
    from rpgrl import journal
    from rpgrl.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}?", "answer": str(2 * i)}) + "\n" for i in range(4)))
    assert main(_eval_argv(tiny_model_dir, data, tmp_path / "whole")) == 0
    whole = _report(tmp_path / "whole")
    record, calls = journal.Journal.record, []

    def stop_after_two(self, *args):
        record(self, *args)
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)

    monkeypatch.setattr(journal.Journal, "record", stop_after_two)
    out = tmp_path / "out"
    assert main(_eval_argv(tiny_model_dir, data, out)) == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err and "stopped by SIGTERM; 2 sampled chunks kept in" in err.splitlines()[-1], err
    assert len((out / "partial.jsonl").read_text().splitlines()) == 3 and not (out / "metrics.json").exists()
    with open(out / "partial.jsonl", "a") as f:  # a kill while the third chunk was appended
        f.write('{"digest": "abc", "texts": ["cut')
    calls.clear()
    assert main(_eval_argv(tiny_model_dir, data, out, "--k", "4")) == 2  # another k: other draws
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds an unfinished evaluation with other settings (k 3 there, 4 here)" in err
    model = tmp_path / "model"  # the same weights, rewritten (a training run's re-export): refused, named
    shutil.copytree(tiny_model_dir, model)
    from rpgrl.journal import files_fingerprint

    settings = json.loads((out / "partial.jsonl").read_text().splitlines()[0])
    settings["settings"] |= {"model": str(model.resolve()), "model_files": files_fingerprint(model)}
    lines = (out / "partial.jsonl").read_text().splitlines(keepends=True)
    (out / "partial.jsonl").write_text(json.dumps(settings) + "\n" + "".join(lines[1:]))
    (model / "config.json").write_text((model / "config.json").read_text() + " ")
    assert main(_eval_argv(model, data, out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(the model folder's files were rewritten since)" in err, err
    (out / "partial.jsonl").write_text("".join(lines))
    monkeypatch.undo()
    assert main(_eval_argv(tiny_model_dir, data, out)) == 0
    assert "continuing the evaluation in" in capsys.readouterr().err
    assert _report(out) == whole and not (out / "partial.jsonl").exists()


def test_a_full_disk_while_evaluating_is_one_line_and_keeps_the_samples(tiny_model_dir, tmp_path, capsys,
                                                                        monkeypatch):  # fmt: skip
    """ENOSPC while the report was written: a traceback, exit 1, and the --out folder with every sample gone (a
    review's). One line naming the folder and what it keeps; the same command then writes the report."""
    import errno

    import rpgrl.evaluation as ev
    from rpgrl.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}*3?", "answer": str(3 * i)}) + "\n" for i in range(2)))

    def full(out, *args):
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "samples.jsonl"))

    monkeypatch.setattr(ev, "write_report", full)
    out = tmp_path / "out"
    assert main(_eval_argv(tiny_model_dir, data, out)) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"rpgrl eval: error: cannot write in {out}: No space left on device") and (
        "2 sampled chunks kept in" in last
    ), last
    monkeypatch.undo()
    assert main(_eval_argv(tiny_model_dir, data, out)) == 0 and (out / "metrics.json").is_file()
    assert sorted(p.name for p in out.iterdir()) == [".lock", "metrics.json", "passk_majk.png", "samples.jsonl"]


def test_a_prompt_the_tokenizer_cannot_spell_leaves_no_lock_in_an_existing_folder(tmp_path, capsys):
    """The prompts were checked under --out's lock, which stays in a folder holding other files (a review's)."""
    from rpgrl.cli import main
    from rpgrl.models import build_char_tokenizer, build_tiny_model
    from rpgrl.rewards.synthetic import CHARS

    tok = build_char_tokenizer(CHARS)
    build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "What is 1+1?", "answer": "2"}) + "\n")
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("hi")
    assert main(_eval_argv(tmp_path / "model", data, keep)) == 2
    assert "cannot encode the prompt" in capsys.readouterr().err
    assert [p.name for p in keep.iterdir()] == ["notes.txt"]


def test_a_journal_cut_in_its_first_line_is_empty_and_the_model_folder_may_be_the_out_folder(tiny_model_dir, tmp_path,
                                                                                            capsys):  # fmt: skip
    """A review's: a full disk at the first chunk left an empty partial.jsonl the same command then refused as no
    journal; with --out the model folder, the journal and lock counted as rewritten model files."""
    from rpgrl.cli import main
    from rpgrl.journal import Journal, files_fingerprint

    for cut in ("", '{"settings": {"k": 3'):
        path = tmp_path / f"j{len(cut)}" / "partial.jsonl"
        path.parent.mkdir()
        path.write_text(cut)
        journal = Journal(path, {"k": 3})
        assert journal.chunks == [] and not path.exists()
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    before = files_fingerprint(model)
    for name in (".lock", "partial.jsonl", "metrics.json", "samples.jsonl", "passk_majk.png"):
        (model / name).write_text("x")
    assert files_fingerprint(model) == before
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    assert main(_eval_argv(model, data, model)) == 2  # an earlier report's metrics.json: refused, as any folder
    for name in ("metrics.json", "samples.jsonl", "passk_majk.png", "partial.jsonl", ".lock"):
        (model / name).unlink()
    capsys.readouterr()
    assert main(_eval_argv(model, data, model)) == 0 and (model / "metrics.json").is_file()


def test_a_journal_line_that_is_no_chunk_is_one_line(tmp_path):
    """A partial.jsonl whose settings are not an object, or with a line that is not a chunk `record` wrote (a list,
    a number, a chunk without texts, a generator state that is not base64), was a traceback when replayed (a
    review's probe: AttributeError, TypeError): it is refused in one line, naming the line. Chunks `record` wrote
    read back as written."""
    import base64

    from rpgrl.journal import Journal

    settings = {"k": 3}
    good = Journal(tmp_path / "good" / "partial.jsonl", settings)
    good.path.parent.mkdir()
    good.record("abc", ["x", "y", "z"], b"\x00\x01state")
    assert Journal(good.path, settings).replay("abc") == (["x", "y", "z"], b"\x00\x01state")
    chunk = {"digest": "abc", "texts": ["x", "y", "z"], "rng": base64.b64encode(b"s").decode()}
    for i, bad in enumerate([[1], 5, {"digest": "abc"}, chunk | {"texts": "xyz"}, chunk | {"texts": [1, 2, 3]},
                             chunk | {"rng": "!!"}, chunk | {"digest": 7}]):  # fmt: skip
        path = tmp_path / f"j{i}" / "partial.jsonl"
        path.parent.mkdir()
        path.write_text("".join(json.dumps(x) + "\n" for x in ({"settings": settings}, chunk, bad, chunk)))
        with pytest.raises(UsageError, match=r"partial.jsonl: line 3 is not a chunk an evaluation wrote") as e:
            Journal(path, settings)
        assert "\n" not in str(e.value)
    path = tmp_path / "s" / "partial.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps({"settings": 5}) + "\n")
    with pytest.raises(UsageError, match="is not an rpgrl eval journal"):
        Journal(path, settings)


def test_a_journal_chunk_with_other_responses_or_state_is_one_line(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """A chunk whose responses are not its problems' (one dropped by an edit) or whose generator state this
    generator does not take (an edit, another device's) was replayed: a traceback after the model loaded ("sampler
    returned the wrong shape", "Expected a CPUGeneratorImplState of size 5056"), or, had the counts summed right,
    responses shifted to other problems. Refused in one line naming the line; the chunks as written continue."""
    from rpgrl import evaluation
    from rpgrl.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}?", "answer": str(2 * i)}) + "\n" for i in range(3)))

    def stop(*args):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(evaluation, "write_report", stop)  # every chunk sampled and kept, no report
        assert main(_eval_argv(tiny_model_dir, data, tmp_path / "out")) == 130
    lines = (tmp_path / "out" / "partial.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 4
    chunk = json.loads(lines[2])
    edits = {
        "texts": chunk | {"texts": chunk["texts"][:2]},
        "rng": chunk | {"rng": "AAAA"},
        "empty": chunk | {"rng": ""},
    }
    for name, bad in edits.items():
        out = tmp_path / name
        shutil.copytree(tmp_path / "out", out)
        (out / "partial.jsonl").write_text("".join([*lines[:2], json.dumps(bad) + "\n", *lines[3:]]))
        capsys.readouterr()
        assert main(_eval_argv(tiny_model_dir, data, out)) == 2, name
        err = capsys.readouterr().err
        last = err.splitlines()[-1]  # after "continuing the evaluation in ..." and the sampling bar
        assert "Traceback" not in err and last.startswith("rpgrl eval: error: "), (name, err)
        assert "partial.jsonl: line 3 cannot be continued from" in last, (name, err)
    capsys.readouterr()
    assert main(_eval_argv(tiny_model_dir, data, tmp_path / "out")) == 0
    assert "continuing the evaluation in" in capsys.readouterr().err


def test_benchmarks_named_apart_by_a_byte_outside_utf8_are_shown_apart():
    """`b"bench\\xe9"` and `b"bench\\xe8"` were both "bench?" in the table and the plot titles: escaped as stderr
    shows their paths, they stay two names."""
    from rpgrl.evaluation import BenchmarkResult, format_table

    names = [os.fsdecode(b"bench\xe9"), os.fsdecode(b"bench\xe8")]
    rows = format_table([BenchmarkResult(n, [], [], [], {"mean@1": 0.5}) for n in names]).splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["bench\\udce9", "bench\\udce8"]
    "\n".join(rows).encode("utf-8")  # what a UTF-8 stdout takes


def test_a_benchmark_prompt_the_tokenizer_cannot_encode_is_named_by_its_index(tiny_model_dir, tmp_path, capsys):
    """A prompt the model's tokenizer cannot encode was quoted only, inside the chat template's rendering: among
    a benchmark's problems it could not be found. Named by benchmark and index, in one line, before the weights
    load."""
    from rpgrl.cli import main

    data = tmp_path / "mybench.jsonl"
    prompts = [f"What is {i}+1?" for i in range(4)]
    prompts[2] = "What is \udce9?"
    data.write_text("".join(json.dumps({"prompt": p, "answer": "1"}) + "\n" for p in prompts))
    assert main(_eval_argv(tiny_model_dir, data, tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: mybench prompt 2: the model's tokenizer cannot encode" in err, err
    assert not (tmp_path / "out").exists()
