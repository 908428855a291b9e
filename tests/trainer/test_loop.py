"""End-to-end runs of the trainer on a tiny model: metrics, resume equivalence, anchors, one weight copy."""

import gc
import json
import math
import re
import warnings
from pathlib import Path

import pytest
import torch
from tiny_config import tiny

from rpgrl import metrics as M
from rpgrl.config import apply_overrides
from rpgrl.presets import PRESETS
from rpgrl.rewards import Reward
from rpgrl.trainer import loop
from rpgrl.trainer.checkpoint import latest_checkpoint
from rpgrl.trainer.log import read_metrics

REQUIRED = ("step", "reward/mean", "response/length_mean", "entropy/mean", "perf/generation_s", "perf/update_s",
            "perf/old_logp_s", "perf/scoring_s", "perf/tokens_per_s", "loss/policy", "optim/grad_norm")  # fmt: skip


def test_default_end_to_end_with_warm_start(tmp_path):
    cfg = tiny(("sft.max_steps", "2"), ("sft.eval_every", "1"), ("sft.batch_size", "8"))
    summary = loop.train(cfg, tmp_path / "run")
    run = tmp_path / "run"
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        for key in REQUIRED:
            assert key in r, key
        assert any(k.startswith("kl/") for k in r) and any(k.startswith("clip/") for k in r)
        assert all(math.isfinite(v) for v in r.values())
    assert rows[0]["optim/lr"] == 0.0 and rows[1]["optim/lr"] == pytest.approx(1e-2)  # verl warm-up, 1 step
    assert json.loads((run / "config.json").read_text())["rollout"]["group_size"] == 4
    assert (run / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (run / "checkpoints" / "latest").read_text() == "step-000003"
    assert (run / "checkpoints" / "step-000000").is_dir()  # after the warm start
    assert (run / "model" / "config.json").is_file()
    assert summary["steps"] == 3 and summary["sft"]["steps"] >= 1
    assert 0.0 <= summary["start_accuracy"] <= 1.0 and 0.0 <= summary["end_accuracy"] <= 1.0
    evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 3]
    assert json.loads((run / "summary.json").read_text())["end_accuracy"] == summary["end_accuracy"]


def _strip_perf(rows):
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


@pytest.mark.parametrize("optim", ["adamw", "schedulefree"])
def test_resume_gives_identical_metrics(tmp_path, optim):
    cfg4 = tiny(("train.max_steps", "4"), ("optim.name", optim), ("train.checkpoint_every", "100"))
    loop.train(cfg4, tmp_path / "straight")
    cfg2 = apply_overrides(cfg4, [("train.max_steps", "2")])
    loop.train(cfg2, tmp_path / "split")
    (tmp_path / "split" / "metrics.jsonl").open("a").write('{"step": 3, "reward/me')  # a kill mid-line
    loop.train(cfg4, tmp_path / "split", resume=True)
    straight = read_metrics(tmp_path / "straight" / "metrics.jsonl")
    split = read_metrics(tmp_path / "split" / "metrics.jsonl")
    assert [r["step"] for r in split] == [1, 2, 3, 4]  # each step exactly once
    assert _strip_perf(split) == _strip_perf(straight)  # exact, not approximate
    a = torch.load(tmp_path / "straight/checkpoints/step-000004/state.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "split/checkpoints/step-000004/state.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_resume_past_the_end_keeps_the_last_steps_evaluation(tmp_path):
    """Evaluated every step: a run of 2 steps resumed to 4 has the evaluations and metrics rows of a run of 4. Step
    2's evaluation is the periodic one, taken before its checkpoint, and the end-of-run evaluation reuses it; it was
    the end-of-run row alone, which the resume drops, so step 2 had no evaluation (and no Best) after the resume."""
    cfg4 = tiny(("train.max_steps", "4"), ("eval.every", "1"), ("eval.val_samples", "2"))
    loop.train(cfg4, tmp_path / "straight")
    loop.train(apply_overrides(cfg4, [("train.max_steps", "2")]), tmp_path / "split")
    loop.train(cfg4, tmp_path / "split", resume=True)

    def evals(run):
        return _strip_perf(json.loads(line) for line in (tmp_path / run / "eval.jsonl").read_text().splitlines())

    assert [e["step"] for e in evals("split")] == [0, 1, 2, 3, 4]  # each evaluation once, no end-of-run duplicate
    assert evals("split") == evals("straight")
    straight, split = (read_metrics(tmp_path / run / "metrics.jsonl") for run in ("straight", "split"))
    assert all(M.EVAL_ACCURACY in r and M.EVAL_SAMPLED in r for r in split)
    assert _strip_perf(split) == _strip_perf(straight)
    # a resume with nothing left to train (as after a kill between the last checkpoint and the end-of-run phase)
    # reuses the last step's evaluation: the step is not evaluated and written a second time
    summary = loop.train(cfg4, tmp_path / "split", resume=True)
    assert evals("split") == evals("straight")
    assert summary["end_accuracy"] == evals("straight")[-1][M.EVAL_ACCURACY]


@pytest.mark.parametrize(
    "overrides",
    [
        # GRPO with a frozen reference (second weight copy), mean/std advantages, k3 KL
        [("loss.name", "grpo"), ("loss.advantage", "grpo"), ("loss.kl", "k3"), ("ref.mode", "fixed")],
        # DAPO dynamic sampling: several generation batches of 2 prompts until 4 mixed groups; overlong penalty
        [
            ("loss.name", "dapo"),
            ("loss.advantage", "grpo"),
            ("rollout.group_filter", "fill"),
            ("rollout.gen_prompts", "2"),
            ("rollout.overlong_buffer", "4"),
        ],  # fmt: skip
        # RPG differentiable with an anchor refreshed every 2 steps, REINFORCE++ whitening, sequence level
        [
            ("loss.style", "differentiable"),
            ("ref.mode", "periodic"),
            ("ref.period", "2"),
            ("loss.advantage", "reinforce_pp"),
            ("loss.beta", "0.1"),
        ],  # fmt: skip
        [
            ("loss.level", "sequence"),
            ("loss.agg", "seq-mean-token-sum"),
            ("ref.mode", "adaptive"),
            ("ref.kappa", "1e-9"),
            ("train.epochs", "2"),
        ],  # fmt: skip
    ],
    ids=["grpo-fixed", "dapo-fill", "rpg-periodic", "rpg-seq-adaptive"],
)
def test_variants_run(tmp_path, overrides):
    seen = {}

    def on_step(step, st):
        seen[step] = (st["anchor"].refreshes, st["row"])

    loop.train(tiny(*overrides), tmp_path / "run", on_step=on_step)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert len(rows) == 3 and all(math.isfinite(v) for r in rows for v in r.values())
    mode = dict(overrides).get("ref.mode")
    if mode == "periodic":
        assert [seen[s][0] for s in (1, 2, 3)] == [0, 1, 1]
    if mode == "adaptive":  # kappa ~ 0: any KL to the anchor triggers a refresh
        assert seen[3][0] >= 1
    if dict(overrides).get("rollout.group_filter") == "fill":
        assert all(r["batch/trained"] == 16 for r in rows)  # exactly prompts_per_step groups of G = 4


def test_drop_filter_changes_nothing_but_the_cost(tmp_path):
    # With a group-mean advantage, all-right / all-wrong groups have A = 0; dropping them must leave the update as it
    # is without filtering (same normalizer), so the weights after a step agree to rounding.
    weights = {}
    for mode in ("off", "drop"):
        cfg = tiny(
            ("rollout.group_filter", mode),
            ("data.reward", "test_parity01"),
            ("optim.warmup_steps", "0"),
            ("train.max_steps", "1"),
            ("train.mini_batch_prompts", "none"),
            ("rollout.group_size", "3"),
        )

        def grab(step, st, mode=mode):
            weights[mode] = ({k: v.clone() for k, v in st["model"].state_dict().items()}, st["row"])

        loop.train(cfg, tmp_path / mode, on_step=grab)
    (w_off, row_off), (w_drop, row_drop) = weights["off"], weights["drop"]
    assert row_drop["batch/trained"] < row_off["batch/trained"]  # something was dropped ...
    for k in w_off:  # ... and the step is the same (to 1e-3 of lr: Adam's first step g / (|g| + eps) magnifies
        # the rounding of gradients near zero, which differs with the batch's composition)
        torch.testing.assert_close(w_drop[k], w_off[k], rtol=0, atol=1e-5)
    assert row_drop["loss/policy"] == pytest.approx(row_off["loss/policy"], abs=1e-7)
    assert row_drop["optim/grad_norm"] == pytest.approx(row_off["optim/grad_norm"], rel=1e-5)  # same normalizer


def _weight_copies(model):
    """How many live tensors hold each of the model's weights (the parameter itself or a same-valued copy)."""
    emb = model.get_input_embeddings().weight
    gc.collect()
    same = {
        o.data_ptr()
        for o in gc.get_objects()
        if isinstance(o, torch.Tensor) and o.shape == emb.shape and o.dtype == emb.dtype and torch.equal(o, emb)
    }
    return len(same)


@pytest.mark.parametrize("mode, copies", [("behaviour", 1), ("fixed", 2)])
def test_rpg_keeps_one_copy_of_the_weights(tmp_path, mode, copies):
    counts = {}

    def on_step(step, st):
        model = st["model"]
        gc.collect()  # an earlier test's model lives on in a reference cycle until a collection
        n_models = sum(isinstance(o, type(model)) for o in gc.get_objects())
        counts[step] = (n_models, _weight_copies(model))

    # lr 0: the anchor of `fixed` then equals the policy value for value, so copies are counted by value too
    cfg = tiny(("ref.mode", mode), ("optim.lr", "0"), ("train.max_steps", "1"))
    with warnings.catch_warnings():  # isinstance() on every live object touches deprecated torch attributes
        warnings.simplefilter("ignore")
        loop.train(cfg, tmp_path / "run", on_step=on_step)
    assert counts[1] == (copies, copies)


def test_every_preset_resolves_its_loss_options():
    for name, preset in PRESETS.items():
        cfg = apply_overrides(preset.config, [("model.path", "/m"), ("data.train", "/d.jsonl")])
        reward_fn, adv_fn, loss_fn, opts = loop.resolve_components(cfg)
        assert callable(loss_fn), name


def test_bad_loss_combination_is_a_usage_error():
    from rpgrl.errors import UsageError

    with pytest.raises(UsageError, match="loss 'dapo' with these loss.\\* options"):
        loop.resolve_components(tiny(("loss.name", "dapo"), ("loss.kl", "k1")))


def test_minibatches_are_whole_groups():
    group = torch.tensor([3, 3, 5, 5, 5, 9, 9, 2])
    mbs = loop.minibatches(group, 2)
    assert [m.tolist() for m in mbs] == [[0, 1, 2, 3, 4], [5, 6, 7]]
    assert [m.tolist() for m in loop.minibatches(group, None)] == [list(range(8))]


def test_lr_warmup_counts_training_steps_like_verl():
    assert [loop.lr_multiplier(k, 10) for k in (1, 2, 11, 12)] == [0.0, 0.1, 1.0, 1.0]
    assert loop.lr_multiplier(1, 0) == 1.0


def test_prompt_stream_order_and_state():
    s = loop.PromptStream(5, seed=1, shuffle=True)
    first = s.next(3)
    state = s.state_dict()
    rest = s.next(4)  # crosses into a new epoch with a new permutation
    assert sorted(first + rest[:2]) == list(range(5))
    s2 = loop.PromptStream(5, seed=1, shuffle=True)
    s2.load_state_dict(state)
    assert s2.next(4) == rest
    assert loop.PromptStream(4, seed=0, shuffle=False).next(6) == [0, 1, 2, 3, 0, 1]


def test_non_finite_reward_names_the_sample():
    from rpgrl.errors import UsageError

    def bad(text, answer):
        return Reward(value=float("nan") if text == "b" else 1.0, correct=False)

    with pytest.raises(UsageError, match=r"reward 'bad' on sample 1 \(response 'b'\) returned nan: rewards must"):
        loop.score(bad, "bad", ["a", "b"], ["1", "2"])


def _raises(text, answer):
    return Reward(value=float(int(text)), correct=False)  # int("b") raises


@pytest.mark.parametrize(
    "reward, needle",
    [
        # a custom reward's own error: a traceback from the loop before (a review's), now its line and where
        (_raises, "raised ValueError: invalid literal for int() with base 10: 'b' (" + __file__ + ":"),
        # wrong types: AttributeError / TypeError tracebacks from the loop before
        (lambda t, a: 1.0, "returned 1.0: a reward function returns rpgrl.rewards.Reward(value: float"),
        (lambda t, a: None, "returned None: a reward function returns"),
        (lambda t, a: Reward(value=None, correct=True), "returned Reward(value=None, correct=True, parts={})"),
        (lambda t, a: Reward(value="1", correct=True), "returned Reward(value='1'"),
        # a NaN part reached the step's metrics and was called a diverged run ("lower optim.lr")
        (lambda t, a: Reward(value=1.0, correct=True, parts={"fmt": float("nan")}), "returned part 'fmt' = nan"),
        (lambda t, a: Reward(value=1.0, correct=True, parts={"fmt": "x"}), "returned part 'fmt' = 'x'"),
        (lambda t, a: Reward(value=1.0, correct=torch.tensor([True, False])), "correct is one bool"),
        (lambda t, a: Reward(value=torch.tensor([1.0, 2.0]), correct=True), "returned Reward(value=tensor([1., 2.])"),
    ],
)
def test_a_reward_that_fails_is_named_in_one_line(reward, needle):
    from rpgrl.trainer.loop import RewardFailed

    with pytest.raises(RewardFailed) as e:
        loop.score(reward, "mine", ["1", "b"], ["1", "2"])
    assert e.value.args[0].startswith("reward 'mine' on sample ") and needle in e.value.args[0]
    assert "\n" not in e.value.args[0]


def test_reward_values_and_parts_as_numpy_and_torch_scalars_are_taken():
    import numpy as np

    def scalars(t, a):
        return Reward(value=np.float32(0.5) if t == "a" else torch.tensor(2.0), correct=t == "a",
                      parts={"p": np.int64(3)})  # fmt: skip

    rewards, correct, parts = loop.score(scalars, "s", ["a", "b"], ["1", "2"])
    assert rewards.tolist() == [0.5, 2.0] and correct.tolist() == [True, False]
    assert parts["p"].tolist() == [3.0, 3.0]


_FAIL = {"on": False}


def _fails_when_on(text, answer):
    ok = len(text) % 2 == 0
    return Reward(value=float("nan") if _FAIL["on"] else float(ok) + 0.01 * len(text), correct=ok)


def _keep_weights(weights: dict, name: str):
    """An `on_step` callback keeping the model's weights after each step as weights[name]."""
    return lambda step, st: weights.__setitem__(name, {k: v.clone() for k, v in st["model"].state_dict().items()})


def _eval_failing_at(fail_step: int):
    """`loop.run_eval` (as it is now) with `_fails_when_on`'s NaN in the evaluation of step `fail_step` only."""
    real = loop.run_eval

    def run_eval(model, tokenizer, task, benchmarks, cfg, step, *args, **kwargs):
        _FAIL["on"] = step == fail_step
        try:
            return real(model, tokenizer, task, benchmarks, cfg, step, *args, **kwargs)
        finally:
            _FAIL["on"] = False

    return run_eval


def test_a_reward_failing_mid_run_keeps_the_steps_before_and_the_resume_is_the_run_never_stopped(tmp_path):
    """A NaN reward at step 3 of a run checkpointed every 20 steps exited 2 with no checkpoint: the two finished
    steps were lost and --resume started over (a review's). The run is saved at step 2, with the data and random
    streams where step 3 began, so the resume's weights equal an uninterrupted run's, bit for bit."""
    from rpgrl.errors import UsageError
    from rpgrl.rewards import REWARDS, register_reward

    if "test_fails_when_on" not in REWARDS:
        register_reward("test_fails_when_on")(_fails_when_on)
    cfg = tiny(("data.reward", "test_fails_when_on"), ("train.max_steps", "4"), ("train.checkpoint_every", "20"))
    weights = {}

    _FAIL.update(on=False)
    loop.train(cfg, tmp_path / "whole", on_step=_keep_weights(weights, "whole"))
    out = tmp_path / "resumed"
    with pytest.raises(
        UsageError, match=r"returned nan: .*; the run is saved at step 2: fix the reward, then --resume"
    ):
        loop.train(cfg, out, on_step=lambda step, st: _FAIL.update(on=step == 2))  # NaN from step 3's first sample
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    assert latest_checkpoint(out / "checkpoints").name == "step-000002"
    _FAIL.update(on=False)
    loop.train(cfg, out, resume=True, on_step=_keep_weights(weights, "resumed"))
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3, 4]
    assert weights["whole"].keys() == weights["resumed"].keys()
    assert all(torch.equal(weights["whole"][k], weights["resumed"][k]) for k in weights["whole"])


def test_a_reward_failing_in_the_evaluation_before_rl_keeps_the_warm_start(tmp_path, monkeypatch):
    """The held-out evaluation before RL runs after the warm start and before its checkpoint: a reward failing
    there lost the warm start (the resume ran it again). It is saved at step 0; the resume evaluates again without
    a second warm start, and its weights equal those of a run whose evaluation never failed."""
    from rpgrl.errors import UsageError
    from rpgrl.rewards import REWARDS, register_reward

    if "test_fails_when_on" not in REWARDS:
        register_reward("test_fails_when_on")(_fails_when_on)
    cfg = tiny(("data.reward", "test_fails_when_on"), ("train.max_steps", "2"), ("sft.max_steps", "2"),
               ("sft.eval_every", "1"), ("sft.batch_size", "8"))  # fmt: skip
    weights, real_eval, real_warm = {}, loop.run_eval, loop._warm_start

    _FAIL.update(on=False)
    loop.train(cfg, tmp_path / "whole", on_step=_keep_weights(weights, "whole"))
    out = tmp_path / "resumed"
    monkeypatch.setattr(loop, "run_eval", _eval_failing_at(0))
    with pytest.raises(UsageError, match=r"returned nan: .*; in the evaluation before RL, after the warm start, "
                                         r"which is saved: fix the reward, then --resume"):  # fmt: skip
        loop.train(cfg, out)
    assert latest_checkpoint(out / "checkpoints").name == "step-000000"
    assert not (out / "metrics.jsonl").exists() or read_metrics(out / "metrics.jsonl") == []
    warm_starts = []
    monkeypatch.setattr(loop, "run_eval", real_eval)
    monkeypatch.setattr(loop, "_warm_start", lambda *a: warm_starts.append(1) or real_warm(*a))
    summary = loop.train(cfg, out, resume=True, on_step=_keep_weights(weights, "resumed"))
    assert warm_starts == [] and summary["sft"]["steps"] == 2  # the saved warm start, not a second one
    assert [r["step"] for r in read_metrics(out / "eval.jsonl")] == [0, 2]
    assert all(torch.equal(weights["whole"][k], weights["resumed"][k]) for k in weights["whole"])


class _Killed(BaseException):
    """A SIGKILL, in-process: no handler of the loop catches it."""


def test_a_resume_killed_after_the_evaluation_before_rl_writes_its_row_once(tmp_path, monkeypatch):
    """A warm start saved without its evaluation (the reward failed there) is evaluated again by the resume, which
    appends the row of step 0 before its checkpoint: a resume killed in between left that row, and the next resume
    appended a second one (the evaluation before RL twice in eval.jsonl, the plot and the tracker). One row."""
    from rpgrl.errors import UsageError
    from rpgrl.rewards import REWARDS, register_reward

    if "test_fails_when_on" not in REWARDS:
        register_reward("test_fails_when_on")(_fails_when_on)
    cfg = tiny(("data.reward", "test_fails_when_on"), ("train.max_steps", "2"), ("sft.max_steps", "2"),
               ("sft.batch_size", "8"))  # fmt: skip
    real_eval, real_save = loop.run_eval, loop._save
    out = tmp_path / "run"
    _FAIL.update(on=False)
    monkeypatch.setattr(loop, "run_eval", _eval_failing_at(0))
    with pytest.raises(UsageError, match="in the evaluation before RL, after the warm start, which is saved"):
        loop.train(cfg, out)
    monkeypatch.setattr(loop, "run_eval", real_eval)

    def killed(run, step):
        raise _Killed

    monkeypatch.setattr(loop, "_save", killed)
    with pytest.raises(_Killed):
        loop.train(cfg, out, resume=True)
    assert [r["step"] for r in read_metrics(out / "eval.jsonl")] == [0]
    monkeypatch.setattr(loop, "_save", real_save)
    loop.train(cfg, out, resume=True)
    assert [r["step"] for r in read_metrics(out / "eval.jsonl")] == [0, 2]


def test_a_warm_start_saved_without_its_evaluation_is_kept_by_a_resume_without_sft(tmp_path, monkeypatch):
    """Whether the evaluation before RL follows a warm start is the checkpoint's to say, not the resume's
    sft.max_steps: `--resume --sft.max_steps 0` on a warm start saved without its evaluation said only the reward's
    failure (no "--resume"), and after a fix left step 0's checkpoint without its evaluation (not saved again)."""
    from rpgrl.errors import UsageError
    from rpgrl.rewards import REWARDS, register_reward
    from rpgrl.trainer.checkpoint import load_newest

    if "test_fails_when_on" not in REWARDS:
        register_reward("test_fails_when_on")(_fails_when_on)
    cfg = tiny(("data.reward", "test_fails_when_on"), ("train.max_steps", "0"), ("sft.max_steps", "2"),
               ("sft.batch_size", "8"))  # fmt: skip
    no_warm = apply_overrides(cfg, [("sft.max_steps", "0")])
    out, real_eval = tmp_path / "run", loop.run_eval
    _FAIL.update(on=False)
    monkeypatch.setattr(loop, "run_eval", _eval_failing_at(0))
    with pytest.raises(UsageError, match="in the evaluation before RL, after the warm start, which is saved"):
        loop.train(cfg, out)
    with pytest.raises(UsageError, match="in the evaluation before RL, after the warm start, which is saved"):
        loop.train(no_warm, out, resume=True, base=cfg)  # as `rpgrl train --resume` passes the saved config
    monkeypatch.setattr(loop, "run_eval", real_eval)
    summary = loop.train(no_warm, out, resume=True, base=cfg)
    assert summary["sft"]["steps"] == 2
    assert load_newest(out / "checkpoints")[1]["trainer"]["start_accuracy"] == summary["start_accuracy"]


@pytest.mark.parametrize("value", [1e39, -3e38, 1.01e15, float("inf")])
def test_a_reward_too_large_for_the_advantages_names_the_sample(value):
    """1e39 is finite as a Python float but inf in float32; -3e38 fits float32 but its square does not (the group
    statistics overflowed inside the loss before): refused where the reward is made."""
    from rpgrl.errors import UsageError

    def big(text, answer):
        return Reward(value=value if text == "c" else 0.0, correct=False)

    with pytest.raises(UsageError, match=re.escape(f"on sample 2 (response 'c') returned {value}: rewards must be "
                                                   "finite with |r| <= 1e+15")):  # fmt: skip
        loop.score(big, "big", ["a", "b", "c"], ["1", "2", "3"])
    rewards, _, _ = loop.score(lambda t, a: Reward(value=-(2.0**49), correct=True), "edge", ["a"], ["1"])
    assert rewards.item() == -(2.0**49)  # 5.6e14: within the limit, and exact in float32


SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@pytest.mark.skipif(not (SHARED_DATA / "amc-23.parquet").is_file(), reason="shared eval data not available")
def test_file_dataset_with_benchmark_eval(tmp_path):
    # a JSONL prompt/answer file, the byte-level tiny model, the math reward, and AMC23 scored with mean@k + Best
    rows = [{"prompt": f"What is {a}+{a}?", "answer": str(2 * a)} for a in range(6)]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tiny(
        ("data.train", str(data)),
        ("data.val", str(data)),
        ("data.reward", "math01"),
        ("eval.benchmarks", str(SHARED_DATA / "amc-23.parquet")),
        ("eval.samples", "2"),
        ("eval.max_problems", "2"),
        ("eval.scoring", "strict"),
        ("eval.every", "1"),
        ("data.max_prompt_length", "48"),
        ("data.truncation", "left"),  # AMC23's prompts cut to their last 48 tokens (refused by default)
        ("train.max_steps", "2"),
    )
    summary = loop.train(cfg, tmp_path / "run")
    evals = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 1, 2]
    assert "eval/amc-23/mean@2" in evals[-1] and "eval/amc-23/best_mean@2" in evals[-1]
    assert "eval/amc-23/mean@2" in read_metrics(tmp_path / "run" / "metrics.jsonl")[0]  # periodic, in the step row
    assert set(summary["benchmarks"]["amc-23"]) >= {"last", "best"}
    assert summary["eval_problems"] == 2  # eval.max_problems caps the held-out set too


@pytest.mark.parametrize("optim", ["adamw", "schedulefree"])
def test_a_resume_applies_the_optimizers_settings(tmp_path, optim):
    """optim.betas / eps / weight_decay given on a resume are the ones the optimizer steps with, as config.json
    records them (loading the optimizer's state brought back the saved run's, and only the learning rate was set
    again)."""
    cfg = tiny(("train.max_steps", "1"), ("optim.name", optim))
    loop.train(cfg, tmp_path / "run")
    new = [("optim.betas", "0.5,0.6"), ("optim.eps", "0.001"), ("optim.weight_decay", "0.25"), ("train.max_steps", "2")]
    loop.train(apply_overrides(cfg, new), tmp_path / "run", resume=True)
    groups = torch.load(tmp_path / "run/checkpoints/step-000002/state.pt", weights_only=False)["optimizer"]
    assert all((tuple(g["betas"]), g["eps"], g["weight_decay"]) == ((0.5, 0.6), 0.001, 0.25)
               for g in groups["param_groups"])  # fmt: skip


@pytest.mark.skipif(not (SHARED_DATA / "amc-23.parquet").is_file(), reason="shared eval data not available")
def test_a_resume_may_add_benchmarks_or_change_their_samples(tmp_path, capsys):
    """Benchmarks added on a resume are tracked from there (the final evaluation crashed on the saved run's missing
    tracker, and so did every later --resume); a changed eval.samples tracks the new mean@k (it kept mean@2, which
    no evaluation reported any more, so Last stayed at the saved run's last evaluation)."""
    rows = [{"prompt": f"What is {a}+{a}?", "answer": str(2 * a)} for a in range(6)]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = tiny(("data.train", str(data)), ("data.val", str(data)), ("data.reward", "math01"),
                ("data.max_prompt_length", "48"), ("data.truncation", "left"), ("train.max_steps", "1"))  # fmt: skip
    loop.train(base, tmp_path / "run")
    bench = [("eval.benchmarks", str(SHARED_DATA / "amc-23.parquet")), ("eval.max_problems", "2"),
             ("eval.scoring", "strict")]  # fmt: skip
    summary = loop.train(apply_overrides(base, [*bench, ("eval.samples", "2"), ("train.max_steps", "2")]),
                         tmp_path / "run", resume=True)  # fmt: skip
    assert summary["benchmarks"]["amc-23"]["last_step"] == 2
    assert "count the evaluations from step 1 on" in capsys.readouterr().out
    summary = loop.train(apply_overrides(base, [*bench, ("eval.samples", "3"), ("train.max_steps", "3")]),
                         tmp_path / "run", resume=True)  # fmt: skip
    assert summary["benchmarks"]["amc-23"]["last_step"] == 3
    last = json.loads((tmp_path / "run" / "eval.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 3 and "eval/amc-23/best_mean@3" in last and "eval/amc-23/best_mean@2" not in last
    summary = loop.train(apply_overrides(base, [("train.max_steps", "4")]), tmp_path / "run", resume=True)
    assert summary["benchmarks"] is None  # none evaluated any more: no stale Last/Best


@pytest.mark.parametrize("optim, style", [("adamw", "differentiable"), ("schedulefree", "reinforce")])
def test_on_policy_update_reuses_its_own_forward(tmp_path, monkeypatch, optim, style):
    """One epoch of one mini-batch: the old log-probs are the update's own forward, detached (one policy forward
    per micro-batch, not two), and the run matches one that recomputes them in a separate no-grad pass."""
    cfg = tiny(("train.mini_batch_prompts", "none"), ("train.max_steps", "2"), ("optim.name", optim),
               ("loss.style", style))  # fmt: skip
    calls = _count_logprob_passes(monkeypatch)
    loop.train(cfg, tmp_path / "reuse")
    micro = -(-cfg.rollout.prompts_per_step * cfg.rollout.group_size // cfg.train.micro_batch_size)  # ceil
    assert calls == {True: 2 * micro, False: 1}  # the no-grad pass: the final checkpoint's finite-policy probe

    # the general path, a separate old-logp pass (train.old_logp itself is refused where the update is on-policy)
    monkeypatch.setattr(loop, "old_logp_source", lambda cfg, n, batch: "forward")
    loop.train(cfg, tmp_path / "recompute")
    assert calls == {True: 4 * micro, False: 2 * micro + 2}

    reuse = _strip_perf(read_metrics(tmp_path / "reuse" / "metrics.jsonl"))
    recompute = _strip_perf(read_metrics(tmp_path / "recompute" / "metrics.jsonl"))
    assert [r.keys() for r in reuse] == [r.keys() for r in recompute]
    for a, b in zip(reuse, recompute, strict=True):
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), k
    assert all(r["kl/urkl"] == 0.0 for r in reuse)  # w == 1 exactly: the detached forward is the update's own
    from safetensors.torch import load_file

    wa, wb = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("reuse", "recompute"))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-5, atol=1e-6)


def test_multi_epoch_or_minibatch_updates_are_not_on_policy():
    assert loop.on_policy(tiny(("train.epochs", "1")), 1)
    assert not loop.on_policy(tiny(("train.epochs", "2")), 1)
    assert not loop.on_policy(tiny(("train.epochs", "1")), 2)


def test_adamw_is_fused_and_steps_like_the_reference():
    """The trainer's AdamW is torch's fused kernel; it takes the same steps as the plain for-loop AdamW."""
    cfg = tiny(("optim.name", "adamw"), ("optim.weight_decay", "0.1"))
    g = torch.Generator().manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(5, 3, generator=g, dtype=torch.float64)) for _ in range(2)]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt = loop.make_optimizer(cfg, ours)
    assert opt.defaults["fused"] is True
    o = cfg.optim
    ref_opt = torch.optim.AdamW(ref, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay, foreach=False)
    for _ in range(3):
        grads = [torch.randn(5, 3, generator=g, dtype=torch.float64) for _ in ours]
        for p, q, gr in zip(ours, ref, grads, strict=True):
            p.grad, q.grad = gr.clone(), gr.clone()
        opt.step()
        ref_opt.step()
    for p, q in zip(ours, ref, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14)


def test_off_policy_update_shows_the_regime(tmp_path):
    """Several optimizer steps per rollout batch: the later mini-batches see w != 1, the dual clip acts, the URKL
    term is nonzero, and optim/steps counts epochs x mini-batches. Every key that curves.png, the progress bar,
    `rpgrl.metrics` or the README names is emitted by an RPG run or a PPO-family run (a renamed metric would
    silently drop a panel, a reproduce column or a documented name)."""
    from rpgrl import metrics
    from rpgrl.trainer.log import CLIP_KEYS, PLOT_KEYS

    cfg = tiny(("train.epochs", "2"), ("train.mini_batch_prompts", "1"), ("train.max_steps", "3"),
               ("eval.every", "1"), ("eval.val_samples", "2"), ("loss.beta", "0.1"))  # fmt: skip
    loop.train(cfg, tmp_path / "rpg")
    rows = read_metrics(tmp_path / "rpg" / "metrics.jsonl")
    assert all(r["optim/steps"] == 2 * cfg.rollout.prompts_per_step for r in rows)  # group_filter off: 4 groups
    trained = rows[1:]  # step 1 has lr 0 (warm-up): nothing moves
    assert all(r["log_w/max"] > 0 > r["log_w/min"] and r["log_w/abs_mean"] > 0 for r in trained)
    assert all(r["kl/urkl"] > 0 and 0 < r["kl/grad_share"] < 1 for r in trained)
    assert any(sum(r[k] for k in CLIP_KEYS) > 0 for r in trained)
    assert rows[0]["log_w/abs_mean"] < 1e-6 and rows[0]["kl/urkl"] < 1e-9  # lr 0: w == 1 up to float rounding

    loop.train(tiny(("loss.name", "grpo"), ("loss.advantage", "grpo"), ("loss.kl", "k3")), tmp_path / "grpo")
    emitted = {k for run in ("rpg", "grpo") for r in read_metrics(tmp_path / run / "metrics.jsonl") for k in r}
    wanted = {k for keys in PLOT_KEYS for k in keys} | {"reward/mean", "perf/tokens_per_s"}
    wanted |= {v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str)}
    wanted |= {metrics.kl_divergence(cfg.loss.divergence)}
    assert wanted <= emitted, wanted - emitted
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    named = set(re.findall(r"`((?:reward|response|perf|optim|loss|log_w|kl|clip|entropy|eval)/[a-z0-9_@*]+)`", readme))
    assert len(named) > 10, named
    for name in named:  # `clip/*` stands for at least one emitted clip/ metric
        pattern = re.escape(name).replace(r"\*", ".+")
        assert any(re.fullmatch(pattern, k) for k in emitted), f"README names {name}, which no run emits"


@pytest.mark.parametrize("style", ["differentiable", "reinforce"])
def test_off_policy_old_logp_from_the_sampler_equals_a_forward_pass(tmp_path, monkeypatch, style):
    """Off-policy, pi_old's log-probs can be the sampler's own (no no-grad pass at all) or a separate forward pass:
    in float32 the two agree to float rounding, so the runs agree to rounding too."""
    calls = _count_logprob_passes(monkeypatch)
    runs = {}
    for source in ("sampler", "forward"):
        cfg = tiny(("train.old_logp", source), ("train.max_steps", "3"), ("optim.warmup_steps", "0"),
                   ("loss.style", style))  # fmt: skip
        assert loop.old_logp_source(cfg, 2, _recorded_batch()) == source
        calls.update({True: 0, False: 0})
        loop.train(cfg, tmp_path / source)
        runs[source] = (dict(calls), _strip_perf(read_metrics(tmp_path / source / "metrics.jsonl")))
    (c_s, rows_s), (c_f, rows_f) = runs["sampler"], runs["forward"]
    # no old-logp pass with the sampler's: the one no-grad pass is the final checkpoint's finite-policy probe
    assert c_s[False] == 1 and c_f[False] > 1 and c_s[True] == c_f[True]
    assert [r.keys() for r in rows_s] == [r.keys() for r in rows_f]
    for a, b in zip(rows_s, rows_f, strict=True):
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-3, abs=1e-5), k
        assert a["entropy/mean"] == pytest.approx(b["entropy/mean"], rel=1e-5)  # both: the entropy of pi_old
    assert all(r["log_w/max"] > 0.01 for r in rows_s)  # every step trained off-policy (no warm-up)
    auto = tiny(("model.dtype", "bfloat16"))
    assert loop.old_logp_source(auto, 2, _recorded_batch()) == "forward"


def _recorded_batch():
    """A stand-in for a Rollout whose sampler recorded its log-probs and entropies."""
    return type("B", (), {"sampler_logp": torch.zeros(1), "sampler_entropy": torch.zeros(1)})


def test_signal_during_the_final_evaluation_stops_before_the_export(tmp_path, monkeypatch):
    """A SIGTERM after the last step (here: during the final evaluation) ends the run with Interrupted before
    model/ is written; the last step's checkpoint is there, and a resume runs only the final phase."""
    import signal

    from rpgrl.trainer.rundir import Interrupted, StopSignals

    stop = StopSignals()
    real = loop.run_eval

    def signalled_eval(*args, **kwargs):
        if kwargs.get("final"):
            stop.received = signal.SIGTERM
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "run_eval", signalled_eval)
    cfg = tiny(("train.max_steps", "2"))
    with pytest.raises(Interrupted, match="after step 2"):
        loop.train(cfg, tmp_path / "run", stop=stop)
    assert not (tmp_path / "run" / "model").exists()
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text() == "step-000002"
    monkeypatch.setattr(loop, "run_eval", real)
    summary = loop.train(cfg, tmp_path / "run", resume=True)
    assert summary["steps"] == 2 and (tmp_path / "run" / "model" / "config.json").is_file()
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2]


def _count_logprob_passes(monkeypatch) -> dict[bool, int]:
    """Count the trainer's token_logprobs calls, keyed by whether gradients were enabled (update vs no-grad pass)."""
    import rpgrl.rollout

    calls = {True: 0, False: 0}
    real = rpgrl.rollout.token_logprobs

    def counted(*args, **kwargs):
        calls[torch.is_grad_enabled()] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(rpgrl.rollout, "token_logprobs", counted)
    return calls


def test_held_out_sampled_accuracy_leaves_training_unchanged(tmp_path):
    """eval.val_samples adds eval/sampled_accuracy (mean@k) to each evaluation without touching training's
    sampler: the training metrics are those of a run without it."""
    plain = loop.train(tiny(("eval.every", "1")), tmp_path / "a")
    cfg = tiny(("eval.every", "1"), ("eval.val_samples", "3"))
    sampled = loop.train(cfg, tmp_path / "b")
    rows_b = _strip_perf(read_metrics(tmp_path / "b" / "metrics.jsonl"))
    assert all(r.pop("eval/sampled_accuracy") >= 0 for r in rows_b)  # periodic evaluations (the last step too)
    assert _strip_perf(read_metrics(tmp_path / "a" / "metrics.jsonl")) == rows_b
    assert plain["end_accuracy"] == sampled["end_accuracy"]
    evals = [json.loads(line) for line in (tmp_path / "b" / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 1, 2, 3]
    for e in evals:
        assert 0 <= e["eval/sampled_accuracy"] <= 1
        assert (e["eval/sampled_accuracy"] * 3 * 8) == pytest.approx(round(e["eval/sampled_accuracy"] * 24))  # k x n


def test_sampled_accuracy_at_a_vanishing_temperature_is_the_greedy_accuracy():
    cfg = tiny(("rollout.temperature", "1e-6"))
    model, tokenizer = loop.build_model(cfg)
    task = loop.load_task(cfg, tokenizer)
    prompts, answers = task.val_prompts, task.val_answers
    greedy = loop.greedy_accuracy(model, tokenizer, prompts, answers, cfg)
    assert loop.sampled_accuracy(model, tokenizer, prompts, answers, cfg, 4, seed=1) == greedy
    hot = tiny()  # at temperature 1 the samples differ between seeds, and the value is a mean over k x n
    values = {loop.sampled_accuracy(model, tokenizer, prompts, answers, hot, 4, seed=s) for s in range(4)}
    assert len(values) > 1 and all(round(v * 32) == v * 32 for v in values)


@pytest.mark.parametrize("forward,packed", [("auto", True), ("packed", True), ("transformers", False)])
def test_train_forward_reaches_every_training_forward(monkeypatch, tmp_path, forward, packed):
    """train.forward picks the forward of the warm start and the update (with gradients) and of the old-log-prob
    pass (without): the packed forward runs in each, or in none."""
    import rpgrl.rollout

    grad_modes = []
    real = rpgrl.rollout.packed_response_states

    def counted(*args, **kwargs):
        grad_modes.append(torch.is_grad_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(rpgrl.rollout, "packed_response_states", counted)
    cfg = tiny(("train.forward", forward), ("sft.max_steps", "2"), ("train.old_logp", "forward"))
    summary = loop.train(cfg, tmp_path / "run")
    assert summary["sft"]["steps"] == 2 and summary["steps"] == 3
    assert sorted(set(grad_modes)) == ([False, True] if packed else [])


def test_signal_during_the_warm_start_stops_at_once_and_resume_starts_over(tmp_path, monkeypatch):
    """A SIGTERM in the warm start stops before its next step (a scheduler's grace period is short) with nothing
    saved; --resume starts the run over and gives the run that was never stopped."""
    import signal

    import rpgrl.trainer.sft as sft
    from rpgrl.trainer.rundir import Interrupted, StopSignals

    cfg = tiny(("sft.max_steps", "4"), ("sft.eval_every", "2"), ("sft.batch_size", "8"), ("train.max_steps", "2"))
    straight = loop.train(cfg, tmp_path / "straight")
    stop, real, steps = StopSignals(), sft._sft_step, []

    def signalled_step(*args, **kwargs):
        steps.append(1)
        if len(steps) == 2:
            stop.received = signal.SIGTERM
        return real(*args, **kwargs)

    monkeypatch.setattr(sft, "_sft_step", signalled_step)
    out = tmp_path / "run"
    with pytest.raises(Interrupted, match="in the warm start, before the first checkpoint; start the run over") as e:
        loop.train(cfg, out, stop=stop)
    assert len(steps) == 2 and e.value.exit_code == 128 + signal.SIGTERM
    assert not any((out / "checkpoints").iterdir()) and (out / "config.json").is_file()  # made at the start, empty
    monkeypatch.setattr(sft, "_sft_step", real)
    summary = loop.train(cfg, out, resume=True)
    assert summary["sft"]["steps"] == straight["sft"]["steps"]
    for name in ("metrics.jsonl", "eval.jsonl"):
        assert _strip_perf(read_metrics(out / name)) == _strip_perf(read_metrics(tmp_path / "straight" / name))


def test_a_signal_in_the_warm_start_says_it_stops_after_the_warm_start_step(tmp_path, monkeypatch, capfd):
    """The first signal's line said "stopping at the end of this step", then the run ended with "in the warm start
    ... start the run over": it names the warm-start step and that nothing is saved; in RL the step again."""
    import os
    import signal

    import rpgrl.trainer.sft as sft
    from rpgrl.trainer.rundir import STEP_ACTION, WARM_START_ACTION, Interrupted, StopSignals

    cfg = tiny(("sft.max_steps", "4"), ("sft.eval_every", "2"), ("sft.batch_size", "8"), ("train.max_steps", "1"))
    real_sft, real_step, seen = sft._sft_step, loop.training_step, []
    stop = StopSignals()

    def signalled_sft_step(*args, **kwargs):
        seen.append(("warm start", stop._action))
        if len(seen) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_sft(*args, **kwargs)

    monkeypatch.setattr(sft, "_sft_step", signalled_sft_step)
    with stop, pytest.raises(Interrupted, match="in the warm start"):
        loop.train(cfg, tmp_path / "run", stop=stop)
    assert seen == [("warm start", WARM_START_ACTION)] * 2
    assert f"rpgrl train: SIGTERM: {WARM_START_ACTION} (again to stop now)" in capfd.readouterr().err
    assert "not saved" in WARM_START_ACTION and "warm-start step" in WARM_START_ACTION

    monkeypatch.setattr(sft, "_sft_step", real_sft)
    stop = StopSignals()
    monkeypatch.setattr(
        loop, "training_step", lambda run, step: seen.append(("rl", stop._action)) or real_step(run, step)
    )
    loop.train(cfg, tmp_path / "again", stop=stop)
    assert seen[-1] == ("rl", STEP_ACTION)


def test_weights_that_no_longer_give_finite_logits_are_never_checkpointed(tmp_path, monkeypatch):
    """An update that sends the weights so far that every forward overflows (finite weights, here scaled by 1e30)
    ends the run as diverged without saving them, so --resume continues from the last sound checkpoint."""
    from rpgrl.errors import Diverged

    real = loop.training_step

    def blowing_up(run, step):
        row = real(run, step)
        if step == 2:
            with torch.no_grad():
                for p in run.model.parameters():
                    p.mul_(1e30)
        return row

    monkeypatch.setattr(loop, "training_step", blowing_up)
    cfg = tiny(("train.max_steps", "3"), ("train.checkpoint_every", "1"))
    with pytest.raises(Diverged, match="after step 2 the policy's logits are not finite"):
        loop.train(cfg, tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*")) == ["step-000001"]
    monkeypatch.setattr(loop, "training_step", real)
    assert loop.train(cfg, tmp_path / "run", resume=True)["steps"] == 3


def test_a_second_process_on_a_run_directory_in_use_is_refused(tmp_path):
    """Two processes on one run directory would interleave (and, resuming, replace) each other's metrics."""
    import subprocess
    import sys

    from rpgrl.errors import UsageError
    from rpgrl.trainer.rundir import RunLock

    out = tmp_path / "run"
    holder = "import fcntl, os, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); " \
             "f.write(f'{os.getpid()}\\n'); f.flush(); print('locked', flush=True); time.sleep(60)"  # fmt: skip
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", holder, str(out / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(
            UsageError, match=f"run directory {out} is in use by another rpgrl process \\(PID {proc.pid}"
        ):
            loop.train(tiny(("train.max_steps", "1")), out)
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written
    finally:
        proc.kill()
        proc.wait()
    with RunLock(out):  # released when its holder ended, however it ended
        pass


@pytest.mark.parametrize(
    "line,match",
    [('[1]', "line 2 is not a metrics row"), ('{"step": "x"}', "line 2 is not a metrics row"),
     (b"\xff\xfe", "is not UTF-8 text")],
)  # fmt: skip
def test_a_resume_refuses_a_metrics_file_it_cannot_read_before_changing_anything(tmp_path, line, match):
    from rpgrl.errors import UsageError

    cfg = tiny(("train.max_steps", "2"), ("train.checkpoint_every", "1"))
    out = tmp_path / "run"
    loop.train(cfg, out)
    rows = (out / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    bad = line if isinstance(line, bytes) else line.encode()
    (out / "metrics.jsonl").write_bytes(rows[0] + bad + b"\n" + rows[1])
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(UsageError, match=match):
        loop.train(tiny(("train.max_steps", "3"), ("train.checkpoint_every", "1")), out, resume=True)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_a_checkpoint_that_cannot_be_written_keeps_the_older_ones(tmp_path, monkeypatch):
    """A full disk while writing a checkpoint: one line (UsageError), the write's leftovers removed, the older
    checkpoints kept, so --resume continues once there is room."""
    import errno

    import rpgrl.trainer.checkpoint as ckpt
    from rpgrl.errors import UsageError

    real = torch.save

    def full_disk(obj, path, *args, **kwargs):
        if "step-000002" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(obj, path, *args, **kwargs)

    monkeypatch.setattr(ckpt.torch, "save", full_disk)
    cfg = tiny(("train.max_steps", "3"), ("train.checkpoint_every", "1"))
    with pytest.raises(UsageError, match="cannot write the checkpoint of step 2 .*No space left on device"):
        loop.train(cfg, tmp_path / "run")
    names = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert names == ["latest", "step-000001"]
    monkeypatch.setattr(ckpt.torch, "save", real)
    assert loop.train(cfg, tmp_path / "run", resume=True)["steps"] == 3


def test_a_finished_run_whose_checkpoints_were_removed_is_not_started_over(tmp_path):
    """The reproduction runner (and users short of space) delete a finished run's checkpoints: --resume must not
    take that for a run that stopped before its first checkpoint and replace its metrics."""
    import shutil

    from rpgrl.errors import UsageError

    cfg = tiny(("train.max_steps", "2"), ("train.checkpoint_every", "2"))
    out = tmp_path / "run"
    loop.train(cfg, out)
    shutil.rmtree(out / "checkpoints")
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(UsageError, match="no checkpoint to continue from, but it finished: its checkpoints were"):
        loop.train(tiny(("train.max_steps", "3")), out, resume=True)
    (out / "summary.json").unlink()
    shutil.rmtree(out / "model")  # killed during the export: its metrics still show steps past a checkpoint
    with pytest.raises(UsageError, match="but metrics.jsonl holds 2 steps"):
        loop.train(tiny(("train.max_steps", "3")), out, resume=True)  # the saved run checkpoints every 2
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "summary.json"} == {
        k: v for k, v in before.items() if k != "summary.json"
    }


@pytest.mark.parametrize("debris", [False, True])
def test_a_run_killed_writing_its_first_checkpoint_starts_over(tmp_path, debris):
    """No warm start: the first checkpoint comes at train.checkpoint_every steps, after that step's metrics row. A
    kill while writing it (a partial .tmp-step-* left, or none yet) leaves `every` rows and no checkpoint: --resume
    starts the run over (it refused, taking the run for one whose checkpoints were deleted) and ends as a fresh run."""
    cfg = tiny(("train.max_steps", "2"), ("train.checkpoint_every", "2"))
    fresh = loop.train(cfg, tmp_path / "fresh")
    out = tmp_path / "run"
    loop.train(cfg, out)
    for name in ("summary.json", "model", "eval.jsonl"):  # back to the moment step 2's row was written
        loop._remove(out / name)
    for p in (out / "checkpoints").iterdir():
        loop._remove(p)
    if debris:
        (out / "checkpoints" / ".tmp-step-000002").mkdir()
        (out / "checkpoints" / ".tmp-step-000002" / "state.pt").write_bytes(b"partial")
    assert len(read_metrics(out / "metrics.jsonl")) == 2
    again = loop.train(cfg, out, resume=True)
    assert again["steps"] == fresh["steps"] == 2

    def learning(path):  # the rows without their timings
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in read_metrics(path / "metrics.jsonl")]

    assert learning(out) == learning(tmp_path / "fresh")
    assert not (out / loop.ASIDE).exists()


def test_a_tracker_that_refuses_to_start_costs_a_restart_nothing(tmp_path, monkeypatch):
    """--resume of a run that stopped before its first checkpoint removes that attempt's files; when the tracker
    then refused to start (W&B without a login) the command failed in one line with the files already gone."""
    from rpgrl.errors import UsageError

    cfg = tiny(("train.max_steps", "2"), ("train.checkpoint_every", "5"))
    out = tmp_path / "run"
    loop.train(cfg, out)
    for name in ("summary.json", "model"):
        loop._remove(out / name)
    loop._remove(out / "checkpoints")
    (out / "checkpoints").mkdir()  # as a run killed before its first checkpoint leaves it
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    def refuse(*a, **k):
        raise UsageError("train.report_to wandb: no API key")

    monkeypatch.setattr(loop, "make_tracker", refuse)
    with pytest.raises(UsageError, match="no API key"):
        loop.train(cfg, out, resume=True)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert not (out / loop.ASIDE).exists()


def test_a_run_directory_changed_while_loading_is_refused(tmp_path, monkeypatch):
    """The checks run before the lock is held (loading a model takes a while): another process that wrote to the
    directory meanwhile (here: a checkpoint appears) makes this one stop rather than act on a stale view."""
    from rpgrl.errors import UsageError

    real = loop.open_run

    def another_process_writes(cfg, out, resume, base=None):
        run = real(cfg, out, resume, base)
        (out / "checkpoints" / "step-000005").mkdir(parents=True)
        for name in ("state.pt", "meta.json"):
            (out / "checkpoints" / "step-000005" / name).write_text('{"step": 5}')
        return run

    monkeypatch.setattr(loop, "open_run", another_process_writes)
    out = tmp_path / "run"
    with pytest.raises(UsageError, match="changed while this process was loading"):
        loop.train(tiny(("train.max_steps", "1")), out)
    assert sorted(p.name for p in out.iterdir()) == [".lock", "checkpoints"]  # nothing of this process but its lock


def test_a_full_disk_outside_checkpointing_is_one_line(tmp_path, monkeypatch):
    """A write that fails for room raises OSError without a file name (ENOSPC from write()): one line too."""
    import errno

    from rpgrl.errors import UsageError

    def full(self, row):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(loop.MetricsFile, "write", full)
    with pytest.raises(UsageError, match="cannot write in .*No space left on device; the run is kept at its last"):
        loop.train(tiny(("train.max_steps", "2")), tmp_path / "run")


def test_a_tracker_that_refuses_to_start_leaves_no_run_directory(tmp_path, monkeypatch):
    from rpgrl.errors import UsageError
    from rpgrl.trainer import trackers

    class Refusing:
        def __init__(self, *args, **kwargs):
            raise UsageError("train.report_to tensorboard: refused")

    monkeypatch.setattr(trackers, "TensorBoardTracker", Refusing)
    with pytest.raises(UsageError, match="refused"):
        loop.train(tiny(("train.max_steps", "1"), ("train.report_to", "tensorboard")), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_run_files_are_strict_json_without_a_held_out_set(tmp_path):
    """A file dataset without data.val has no held-out accuracy (NaN): the run files hold null there, not a bare NaN
    that strict JSON parsers (jq, JavaScript) refuse."""

    def strict(text: str):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in a run file"))

    rows = [{"prompt": f"What is {a}+{a}?", "answer": str(2 * a)} for a in range(6)]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tiny(("data.train", str(data)), ("data.reward", "math01"), ("eval.every", "1"), ("train.max_steps", "2"))
    summary = loop.train(cfg, tmp_path / "run")
    assert math.isnan(summary["start_accuracy"])  # the returned summary keeps Python's NaN
    assert strict((tmp_path / "run" / "summary.json").read_text())["start_accuracy"] is None
    for name in ("eval.jsonl", "metrics.jsonl"):
        lines = (tmp_path / "run" / name).read_text().splitlines()
        assert lines and all(strict(line)["step"] >= 0 for line in lines)
    assert strict(lines[0]).get("eval/accuracy", None) is None


@pytest.mark.parametrize("name", ["rpg", "grpo"])
def test_a_fixed_anchor_reaches_the_loss_and_the_kl_metric(tmp_path, name):
    """On-policy (one epoch, one mini-batch) pi_theta equals the sampler in every micro-batch, so a KL to the sampler
    is exactly 0: with `ref.mode fixed` the loss's KL term and `kl/anchor` must measure the initial model instead,
    which the policy leaves after its first optimizer step. (A review's mutants: GRPO given `old_logp` as its
    reference, or `kl/anchor` taken to the sampler, passed every test.)"""
    loss = [("loss.name", "grpo"), ("loss.advantage", "grpo"), ("loss.kl", "k3")] if name == "grpo" else []
    base = [("train.mini_batch_prompts", "4"), ("train.max_steps", "4"), ("optim.warmup_steps", "0"), *loss]
    for mode in ("fixed", "behaviour"):
        loop.train(tiny(*base, ("ref.mode", mode)), tmp_path / mode)
    fixed, behaviour = (read_metrics(tmp_path / m / "metrics.jsonl") for m in ("fixed", "behaviour"))
    term = M.KL_PENALTY if name == "grpo" else "kl/urkl"
    assert all(r["optim/steps"] == 1 for r in fixed + behaviour)
    assert all(r[M.KL_ANCHOR] == 0 and abs(r[term]) < 1e-12 for r in behaviour)  # to the sampler: nothing
    assert fixed[0][M.KL_ANCHOR] == 0  # step 1: the initial model sampled it
    assert all(r[M.KL_ANCHOR] > 1e-6 and r[term] > 1e-6 for r in fixed[1:]), [(r[M.KL_ANCHOR], r[term]) for r in fixed]


def test_step_metrics_against_their_definitions(tmp_path):
    """What a review's mutants showed untested: -log pi_old > 0 (response/neg_logp_mean had its sign flipped),
    adv/abs_mean is a mean of |A| (not of A), response/truncated_frac counts responses at max_new_tokens, and DAPO's
    overlong penalty lowers the reward (step 1 samples the same responses with or without it)."""
    cfg = tiny(("train.max_steps", "2"))
    loop.train(cfg, tmp_path / "plain")
    loop.train(tiny(("train.max_steps", "2"), ("rollout.overlong_buffer", "8")), tmp_path / "overlong")
    rows = read_metrics(tmp_path / "plain" / "metrics.jsonl")
    shaped = read_metrics(tmp_path / "overlong" / "metrics.jsonl")
    for r in rows:
        assert r["response/neg_logp_mean"] > 0
        assert r["adv/abs_mean"] > abs(r["adv/mean"]) + 1e-6  # group-centred advantages of both signs
        at_max = r["response/length_max"] == cfg.rollout.max_new_tokens
        assert (r["response/truncated_frac"] > 0) == at_max and r["response/truncated_frac"] <= 1
    assert any(r["response/truncated_frac"] > 0 for r in rows)
    assert shaped[0]["response/length_mean"] == rows[0]["response/length_mean"]  # the same responses
    assert shaped[0]["reward/correct"] == rows[0]["reward/correct"]
    assert shaped[0]["reward/mean"] < rows[0]["reward/mean"] - 1e-3  # lengths above 10 - 8 are penalised


def test_micro_batches_change_nothing_but_rounding(tmp_path):
    """Micro-batches of one mini-batch (unequal token counts) combine to the mini-batch's own update and metrics:
    each mini-batch's token-mean normalizer is its own token count, and the metrics are weighted by tokens (or by
    sequences, for the per-sequence ones). Two mini-batches per step, so a normalizer over the whole batch shows."""
    runs = {}
    for micro in ("3", "64"):
        cfg = tiny(("train.max_steps", "2"), ("train.micro_batch_size", micro), ("optim.warmup_steps", "0"))
        loop.train(cfg, tmp_path / micro)
        runs[micro] = _strip_perf(read_metrics(tmp_path / micro / "metrics.jsonl"))
    for a, b in zip(runs["3"], runs["64"], strict=True):
        assert a.keys() == b.keys() and a["optim/steps"] == 2
        for k in a.keys() - {M.KL_GRAD_SHARE}:  # a ratio of sums: micro-batches approximate it (rpgrl.metrics)
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-7), k


def test_each_mini_batch_is_normalised_by_its_own_tokens(tmp_path, monkeypatch):
    """token-mean: the loss of a mini-batch is its token sum over its own token count (a review's mutant divided by
    the whole batch's, shrinking every loss and gradient by the mini-batch's share and moving grad_clip's bite).
    The micro-batches' tokens add up to the normalizer once per mini-batch, as many times as optimizer steps."""
    calls = []
    original = loop.update_policy

    def spying(*args, **kwargs):
        args = list(args)
        loss_fn = args[7]

        def spy(logp, old, adv, mask, *, normalizer, **kw):
            calls.append((float(mask.sum()), float(normalizer)))
            return loss_fn(logp, old, adv, mask, normalizer=normalizer, **kw)

        args[7] = spy
        return original(*args, **kwargs)

    monkeypatch.setattr(loop, "update_policy", spying)
    loop.train(tiny(("train.max_steps", "2"), ("train.micro_batch_size", "3")), tmp_path / "run")
    completed, acc = 0, 0.0
    for tokens, normalizer in calls:
        acc += tokens
        assert acc <= normalizer
        if acc == normalizer:
            completed, acc = completed + 1, 0.0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert acc == 0 and completed == sum(r["optim/steps"] for r in rows) == 4 and len(calls) > completed


def test_sampled_accuracy_scores_each_sample_against_its_own_problem():
    """With a reward that reads the answer (the parity reward does not), near-greedy samples score as the greedy
    responses do, in the trainer's held-out check and in the warm start's `accuracy` (a review's mutants scored
    sample i against answer i mod the number of problems)."""
    from rpgrl.rewards import REWARDS, register_reward
    from rpgrl.trainer.sft import accuracy

    if "test_answer_parity" not in REWARDS:

        @register_reward("test_answer_parity")
        def _answer_parity(completion: str, answer: str) -> Reward:
            ok = (len(completion) + len(answer)) % 2 == 0
            return Reward(value=float(ok), correct=ok, parts={"correct": float(ok)})

    cfg = tiny(("rollout.temperature", "1e-6"), ("data.reward", "test_answer_parity"), ("data.num_val", "16"))
    model, tokenizer = loop.build_model(cfg)
    task = loop.load_task(cfg, tokenizer)
    prompts, answers = task.val_prompts, task.val_answers
    assert len({len(a) % 2 for a in answers}) == 2  # answers of both parities: a mix-up changes the score
    greedy = loop.greedy_accuracy(model, tokenizer, prompts, answers, cfg)
    assert 0 < greedy < 1
    assert loop.sampled_accuracy(model, tokenizer, prompts, answers, cfg, 3, seed=1) == greedy
    kw = dict(max_new_tokens=cfg.rollout.max_new_tokens, reward="test_answer_parity")
    sft_greedy = accuracy(model, tokenizer, task.val_problems, greedy=True, **kw)
    assert accuracy(model, tokenizer, task.val_problems, greedy=False, n=3, temperature=1e-6, **kw) == sft_greedy


def test_the_collapse_guard_stops_after_patience_steps_without_a_correct_response(tmp_path):
    """No sampled response correct for `train.collapse_patience` steps in a row: the run stops there, checkpointed,
    saying why (the trainer tests run with the guard off, so no test had reached it)."""
    import json

    from rpgrl.rewards import REWARDS, register_reward

    if "test_never" not in REWARDS:

        @register_reward("test_never")
        def _never(completion: str, answer: str) -> Reward:
            return Reward(value=0.0, correct=False, parts={"correct": 0.0})

    loop.train(tiny(("data.reward", "test_never"), ("train.max_steps", "8"), ("train.collapse_patience", "3")),
               tmp_path / "never")  # fmt: skip
    summary = json.loads((tmp_path / "never" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["stopped"].startswith("collapsed: no correct response for 3 steps")
    assert [r["step"] for r in read_metrics(tmp_path / "never" / "metrics.jsonl")] == [1, 2, 3]
    assert (tmp_path / "never" / "checkpoints" / "latest").read_text() == "step-000003"
    # killed in the final evaluation (after the stop's checkpoint, before the summary): the resumed run stops at
    # once, as the uninterrupted one did (it trained a fourth step: a review's)
    first = (tmp_path / "never" / "metrics.jsonl").read_text()
    (tmp_path / "never" / "summary.json").unlink()
    loop.train(tiny(("data.reward", "test_never"), ("train.max_steps", "8"), ("train.collapse_patience", "3")),
               tmp_path / "never", resume=True)  # fmt: skip
    again = json.loads((tmp_path / "never" / "summary.json").read_text())
    assert again["steps"] == 3 and again["stopped"] == summary["stopped"]
    assert (tmp_path / "never" / "metrics.jsonl").read_text() == first
    # resumed again: no step runs, so the end's model stays model/ (it was copied aside at every resume: a review's)
    loop.train(tiny(("data.reward", "test_never"), ("train.max_steps", "8"), ("train.collapse_patience", "3")),
               tmp_path / "never", resume=True)  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "never").glob("model*")) == ["model"]
    loop.train(tiny(("train.max_steps", "4"), ("train.collapse_patience", "1")), tmp_path / "parity")
    rows = read_metrics(tmp_path / "parity" / "metrics.jsonl")
    assert all(r["reward/correct"] > 0 for r in rows) and len(rows) == 4  # correct responses: never stopped


def test_a_resume_past_the_end_sets_the_old_end_aside(tmp_path):
    """Extended with --resume and stopped again, a run kept the old end's model/, summary.json and curves.png: an
    evaluation of OUT/model took step 2's weights for the run's (a review's). The old model and summary are kept as
    model-step2/ and summary-step2.json (bytes unchanged); the new end writes model/ and the summary again."""
    out = tmp_path / "run"
    loop.train(tiny(("train.max_steps", "2")), out)
    old = {p.name: p.read_bytes() for p in (out / "model").iterdir()}

    def stop_at_3(step, st):
        if step == 3:
            assert not (out / "model").exists() and not (out / "summary.json").exists()
            assert not (out / "curves.png").exists()
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        loop.train(tiny(("train.max_steps", "4")), out, resume=True, on_step=stop_at_3)
    assert {p.name: p.read_bytes() for p in (out / "model-step2").iterdir()} == old
    assert json.loads((out / "summary-step2.json").read_text())["steps"] == 2  # the old end's evaluation, kept
    # stopped before a step ran (a signal at startup): the old end is still the end, put back
    import signal

    from rpgrl.trainer.rundir import Interrupted, StopSignals

    loop.train(tiny(("train.max_steps", "2")), tmp_path / "two")
    stop = StopSignals()
    stop.received = signal.SIGTERM
    with pytest.raises(Interrupted):
        loop.train(tiny(("train.max_steps", "4")), tmp_path / "two", resume=True, stop=stop)
    assert (tmp_path / "two" / "model").is_dir() and (tmp_path / "two" / "summary.json").is_file()
    assert not list((tmp_path / "two").glob("*-step2*"))
    summary = loop.train(tiny(("train.max_steps", "4")), out, resume=True)
    assert summary["steps"] == 4 and json.loads((out / "summary.json").read_text())["steps"] == 4
    assert (out / "curves.png").is_file() and (out / "model" / "model.safetensors").is_file()
    assert (out / "model" / "model.safetensors").read_bytes() != old["model.safetensors"]
    assert {p.name: p.read_bytes() for p in (out / "model-step2").iterdir()} == old


def test_an_end_set_aside_and_written_again_at_the_same_step_is_not_kept_twice(tmp_path):
    """A resume past a finished run's end, killed before its next checkpoint, then resumed to the old end's step:
    model-step2/ and summary-step2.json stayed beside model/ and summary.json, duplicates of them (the same
    checkpoint's weights). The end written again replaces them."""
    out = tmp_path / "run"
    loop.train(tiny(("train.max_steps", "2")), out)
    old = {p.name: p.read_bytes() for p in (out / "model").iterdir()}

    def killed_at_3(step, st):
        if step == 3:
            raise KeyboardInterrupt  # as a SIGKILL: no checkpoint after step 2

    with pytest.raises(KeyboardInterrupt):
        loop.train(tiny(("train.max_steps", "4")), out, resume=True, on_step=killed_at_3)
    assert (out / "model-step2").is_dir() and not (out / "model").exists()
    summary = loop.train(tiny(("train.max_steps", "2")), out, resume=True)
    assert summary["steps"] == 2 and {p.name: p.read_bytes() for p in (out / "model").iterdir()} == old
    assert not list(out.glob("*-step2*")) and (out / "summary.json").is_file()


def test_a_stopped_run_has_its_curves_and_rpgrl_plot_draws_any_run(tmp_path, capsys):
    """curves.png was drawn at a run's end only (a stopped run had none) from metrics.jsonl only (the evaluations
    before RL and at the end, in eval.jsonl, never showed); there was no command to draw a run (a review's)."""
    import signal

    from rpgrl.cli import main as rpgrl_main
    from rpgrl.trainer.plot import run_rows
    from rpgrl.trainer.rundir import Interrupted, StopSignals

    stop, out = StopSignals(), tmp_path / "run"

    def signal_at_2(step, st):  # seen at the end of the next step
        if step == 1:
            stop.received = signal.SIGTERM

    with pytest.raises(Interrupted, match="after step 2"):
        loop.train(tiny(("train.max_steps", "4"), ("eval.every", "2")), out, stop=stop, on_step=signal_at_2)
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    loop.train(tiny(("train.max_steps", "4"), ("eval.every", "2")), out, resume=True)
    rows = run_rows(out)
    evals = [r["step"] for r in rows if "eval/accuracy" in r]
    assert evals == [0, 2, 4] == [r["step"] for r in read_metrics(out / "eval.jsonl")]  # before RL, periodic, final
    assert [r["step"] for r in rows if "eval/accuracy" not in r] == [1, 2, 3, 4]
    (out / "curves.png").unlink()
    capsys.readouterr()
    assert rpgrl_main(["plot", str(out)]) == 0 and (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert rpgrl_main(["plot", str(out), "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").is_file() and not list(out.glob(".*part*"))
    assert rpgrl_main(["plot", str(out), f"--out={tmp_path / 'c.pdf'}"]) == 0  # the format its name says
    assert (tmp_path / "c.pdf").read_bytes()[:4] == b"%PDF"
    damaged = tmp_path / "damaged"  # rows that are not rows: one line, as a resume names them (were tracebacks)
    damaged.mkdir()
    for name, text in (
        ("metrics.jsonl", b"\xff\xfe\n"),
        ("metrics.jsonl", b"[1, 2]\n{}\n"),
        ("eval.jsonl", b"x\n{}\n"),
    ):
        (damaged / name).write_bytes(text)
        capsys.readouterr()
        assert rpgrl_main(["plot", str(damaged)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rpgrl plot: error: {damaged / name}") and err.count("\n") == 1, err
        (damaged / name).unlink()
    (damaged / "metrics.jsonl").write_text(
        '{"reward/mean": 1.0}\n{"step": 1, "reward/mean": 0.5}\n'
        '{"step": 2, "reward/mean": {"a": 1}, "response/length_mean": "x"}\n'
    )
    assert rpgrl_main(["plot", str(damaged)]) == 0  # rows without a step, values that are no numbers: left out
    for argv, needle in (([str(tmp_path)], "holds no metrics.jsonl or eval.jsonl: not a run directory"),
                         ([str(out), "--out"], "--out needs a file name"), ([], None),
                         ([str(out), "--out", "c.jpg2"], "name a picture file (.png, .pdf, .svg)"),
                         ([str(out), str(out)], "expected one run directory, got 2"),
                         ([str(out), "--out", str(tmp_path / "no" / "c.png")], "No such file")):  # fmt: skip
        capsys.readouterr()
        code = rpgrl_main(["plot", *argv])
        err = capsys.readouterr().err
        if needle is None:  # usage
            assert code == 0
            continue
        assert code == 2 and err.startswith("rpgrl plot: error: ") and needle in err and err.count("\n") == 1, err


def test_a_reward_failing_in_a_periodic_evaluation_keeps_the_step_and_the_resume_trains_as_never_stopped(
    tmp_path, monkeypatch
):
    """The held-out evaluation called the reward unchecked, after the step's update: a raise was a traceback and
    the steps since the last checkpoint were lost (a review's). The step is saved with its row (its evaluation
    left out), and the resumed run's weights equal those of a run whose evaluation never failed."""
    from rpgrl.errors import UsageError
    from rpgrl.rewards import REWARDS, register_reward

    if "test_fails_when_on" not in REWARDS:
        register_reward("test_fails_when_on")(_fails_when_on)
    cfg = tiny(("data.reward", "test_fails_when_on"), ("train.max_steps", "4"), ("train.checkpoint_every", "20"),
               ("eval.every", "2"))  # fmt: skip
    weights, real = {}, loop.run_eval

    _FAIL.update(on=False)
    loop.train(cfg, tmp_path / "whole", on_step=_keep_weights(weights, "whole"))
    out = tmp_path / "resumed"
    monkeypatch.setattr(loop, "run_eval", _eval_failing_at(2))
    with pytest.raises(UsageError, match=r"returned nan: .*; in the evaluation of step 2, which is saved without it"):
        loop.train(cfg, out)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    assert "eval/accuracy" not in read_metrics(out / "metrics.jsonl")[1]
    assert latest_checkpoint(out / "checkpoints").name == "step-000002"
    monkeypatch.setattr(loop, "run_eval", real)
    loop.train(cfg, out, resume=True, on_step=_keep_weights(weights, "resumed"))
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3, 4]
    assert all(torch.equal(weights["whole"][k], weights["resumed"][k]) for k in weights["whole"])


def test_a_resume_on_other_training_data_is_refused(tmp_path, capsys):
    """A data file edited after the run stopped (or a relative path resumed from another folder) was trained on
    silently, the saved position in the prompt order indexing other prompts: refused in one line, nothing changed.
    The same data resumes."""
    from rpgrl.cli import main as rpgrl_main

    rows = [{"prompt": f"What is {a}+{a}?", "answer": str(2 * a)} for a in range(12)]
    data, out = tmp_path / "train.jsonl", tmp_path / "run"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loop.train(tiny(("data.train", str(data)), ("train.max_steps", "1")), out)
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    capsys.readouterr()
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rpgrl train: error: --resume: the training prompts differ") and err.count("\n") == 1, err
    assert f"data.train {data} changed" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "2"]) == 0
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]


def test_a_resume_of_the_synthetic_task_with_another_seed_is_refused(tmp_path, capsys):
    """The synthetic task's problems are drawn by train.seed: a resume with another seed trained on other problems
    from the saved position (the random streams were the checkpoint's)."""
    from rpgrl.cli import main as rpgrl_main

    out = tmp_path / "run"
    loop.train(tiny(("train.max_steps", "1")), out)
    capsys.readouterr()
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "2", "--seed", "5"]) == 2
    err = capsys.readouterr().err
    assert "the synthetic task draws them by train.seed and data.num_train" in err and err.count("\n") == 1, err


def _slow_steps(monkeypatch, seconds: float) -> None:
    """Every training step takes at least `seconds` more, so sums of step times are known from below."""
    import time

    step = loop.training_step

    def slow_step(run, n):
        time.sleep(seconds)
        return step(run, n)

    monkeypatch.setattr(loop, "training_step", slow_step)


def test_rl_seconds_count_every_process_of_a_resumed_run(tmp_path, monkeypatch):
    """summary.json's rl_seconds counted the last process alone: a resume of a finished run at its end (nothing to
    train) wrote about 1e-5 s over the run's time, and a run continued past its end counted only the new steps."""

    from rpgrl.trainer.checkpoint import load_newest

    _slow_steps(monkeypatch, 0.3)
    out = tmp_path / "run"
    first = loop.train(tiny(("train.max_steps", "2")), out)["rl_seconds"]
    saved = load_newest(out / "checkpoints")[1]["trainer"]["rl_seconds"]  # the time up to step 2's checkpoint
    assert 0.6 <= saved <= first
    again = loop.train(tiny(("train.max_steps", "2")), out, resume=True)["rl_seconds"]  # the end evaluated again
    assert saved <= again <= saved + 0.1  # no step trained
    assert json.loads((out / "summary.json").read_text())["rl_seconds"] == again
    assert loop.train(tiny(("train.max_steps", "3")), out, resume=True)["rl_seconds"] >= saved + 0.3


def test_wall_seconds_count_every_process_of_a_resumed_run(tmp_path, monkeypatch):
    """summary.json's wall_seconds (and the closing "s in total") were the last process's: after a resume of a
    finished run at its end, below the run's own rl_seconds. They count every process up to its last checkpoint."""
    import time

    from rpgrl.trainer.checkpoint import load_newest

    _slow_steps(monkeypatch, 1.0)
    out = tmp_path / "run"
    first = loop.train(tiny(("train.max_steps", "2")), out)
    saved = load_newest(out / "checkpoints")[1]["trainer"]["wall_seconds"]  # up to step 2's checkpoint
    assert first["rl_seconds"] <= first["wall_seconds"] and 2.0 <= saved <= first["wall_seconds"]
    t = time.perf_counter()
    again = loop.train(tiny(("train.max_steps", "2")), out, resume=True)  # the end evaluated again
    spent = time.perf_counter() - t
    assert saved <= again["wall_seconds"] <= saved + spent and again["rl_seconds"] <= again["wall_seconds"]
    assert json.loads((out / "summary.json").read_text())["wall_seconds"] == again["wall_seconds"]
    more = loop.train(tiny(("train.max_steps", "3")), out, resume=True)
    assert more["wall_seconds"] >= load_newest(out / "checkpoints")[1]["trainer"]["wall_seconds"] >= saved + 1.0


@pytest.mark.parametrize("failure", ["fill", "eval-reward"])
def test_rl_seconds_count_the_steps_a_failure_saves(tmp_path, monkeypatch, failure):
    """A step whose rollouts run out of mixed groups (or whose evaluation's reward fails) saves the run at the steps
    it trained: rl_seconds there was the last periodic checkpoint's (0 before the first), so the steps kept, never
    run again, were counted nowhere (wall_seconds counted them)."""
    import time

    from rpgrl.errors import UsageError
    from rpgrl.trainer.checkpoint import load_newest

    step = loop.training_step

    def failing_step(run, n):
        time.sleep(0.3)
        if n < 3:
            return step(run, n)
        if failure == "fill":
            raise loop.FillExhausted("too few mixed groups")
        raise loop.EvalRewardFailed("the reward failed", step(run, n))

    monkeypatch.setattr(loop, "training_step", failing_step)
    out = tmp_path / "run"
    with pytest.raises(UsageError):
        loop.train(tiny(("train.max_steps", "4"), ("train.checkpoint_every", "100")), out)
    saved = load_newest(out / "checkpoints")[1]
    assert saved["step"] == (2 if failure == "fill" else 3)
    assert 0.3 * saved["step"] <= saved["trainer"]["rl_seconds"] <= saved["trainer"]["wall_seconds"]


def test_wall_seconds_of_a_resume_from_a_checkpoint_without_them_are_at_least_rl_seconds(tmp_path, monkeypatch):
    """A checkpoint written before wall_seconds were kept reads them as 0: the resume's summary counted its own
    process alone, below the run's rl_seconds (what keeping them fixed). The earlier processes' time is at least
    their RL time."""

    from rpgrl.trainer.checkpoint import latest_checkpoint

    _slow_steps(monkeypatch, 1.5)
    out = tmp_path / "run"
    loop.train(tiny(("train.max_steps", "2")), out)
    path = latest_checkpoint(out / "checkpoints") / "state.pt"
    state = torch.load(path, weights_only=False)
    del state["trainer"]["wall_seconds"]  # as written before
    torch.save(state, path)
    again = loop.train(tiny(("train.max_steps", "2")), out, resume=True)
    assert 3.0 <= again["rl_seconds"] <= again["wall_seconds"]
