"""`rpgrl train`: bad input gives one line and exit code 2 and leaves the run directory untouched."""

import hashlib
import json

import pytest
import torch
from tiny_config import TINY

from rpgrl.cli import main as rpgrl_main
from rpgrl.config import ModelConfig
from rpgrl.errors import UsageError
from rpgrl.trainer.cli import parse_args
from rpgrl.trainer.log import read_metrics

TINY_ARGS = [f"--{k}={v}" for k, v in TINY if k != "train.max_steps"]
# with --model.path: the folder's config.json has the sizes (the tiny model's own are refused there)
FOLDER_ARGS = [a for a in TINY_ARGS if not a.startswith("--model.")]
SIZE_DEFAULTS = [f"{k}={getattr(ModelConfig, k.split('.')[1])}" for k, _ in TINY if k.startswith("model.")]


def _snapshot(d):
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()
    }


def _fail(capsys, argv):
    code = rpgrl_main(["train", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("rpgrl train: error: "), err
    return err


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A two-step run with checkpoints at steps 1 and 2, both written by the wall clock (checkpoint_every 100)."""
    out = tmp_path_factory.mktemp("cli") / "run"
    clock = ["--train.checkpoint_every", "100", "--train.checkpoint_minutes", "1e-9"]
    assert rpgrl_main(["train", "--out", str(out), "--max-steps", "2", *clock, *TINY_ARGS]) == 0
    assert sorted(p.name for p in (out / "checkpoints").glob("step-*")) == ["step-000001", "step-000002"]
    return out


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--loss.bta", "0.1"], "unknown config key --loss.bta"),
        (["--rollout.group_size", "four"], "--rollout.group_size: expected an integer, got 'four'"),
        (["--model.path", "/nonexistent/model"], "model folder not found: /nonexistent/model"),
        (["--lr", "1"], "unknown option --lr"),
        (["--loss.beta"], "--loss.beta needs a value"),
        (["grpo2"], "unknown preset 'grpo2'"),
        (["grpo"], "model.path is not set"),
        (["default", "extra"], "unexpected argument 'extra'"),
        # generation that cannot fit the machine: refused before the run directory, not out of memory mid-run
        (["--rollout.max_new_tokens", str(10**12)], "rows of 1000000000011 positions needs a"),
        (["--rollout.group_size", str(10**9)], "generating 1000000000 rows of"),
        (["--eval.val_samples", str(10**9)], "or eval.val_samples"),  # was found after the warm start
        # a step's rollouts larger than the machine (a MemoryError, or the machine out of memory, mid-run)
        # (any training set: the step's prompts are drawn with repeats from a smaller one)
        (
            [
                "--rollout.prompts_per_step",
                "324000",
                "--rollout.group_size",
                "64",
                "--train.mini_batch_prompts",
                "none",
            ],
            "one step's 20736000 rollouts of",
        ),  # fmt: skip
        # a warm-start batch larger than the machine (a batch beyond the training set is the whole set: 324,000
        # worked solutions at once were an out-of-memory kill; a review's; 20,000 at a wider model here, since
        # drawing 324,000 distinct problems takes ~17 s), and a warm start that cannot move
        (
            ["--sft.batch_size", str(10**8), "--model.hidden_size", "1024", "--model.intermediate_size", "3072"],
            "a warm-start step of 20000 sequences",
        ),  # fmt: skip
        (["--sft.lr", "0"], "sft.lr must be > 0 (sft.max_steps 0 turns the warm start off), got 0.0"),
        # a generation batch larger than the training set (the DAPO presets' 1536 with a smaller file: a review's)
        (["--rollout.group_filter", "fill", "--rollout.gen_prompts", str(10**11)], "is twice the 20000 training"),
        # numbers no float32 tensor holds, and more problems than the synthetic task has
        (["--optim.lr", "1e39"], "optim.lr must be at most 3.403e+38 in size (float32's largest), got 1e+39"),
        (["--rollout.overlong_factor", "-4e38"], "rollout.overlong_factor must be at most 3.403e+38 in size"),
        (["--rollout.overlong_factor", "3e38"], "rollout.overlong_factor must be in [0, 1e+15]"),
        (["--data.num_train", str(10**10)], "data.num_train must be <= 324000 (the synthetic task's distinct train"),
        (["--data.num_val", "400000"], "data.num_val must be <= 40500"),
        # a tiny model too large to train here: refused before a byte of it is allocated
        (["--model.hidden_size", "65536", "--model.intermediate_size", "65536"], "B parameters: training it needs"),
        # a line break inside the message (here a path's) stays on the one line
        (["--data.train", "/no\nsuch.jsonl", "--sft.max_steps", "0"], "/no\\nsuch.jsonl"),
        # a path longer than the file system takes (a traceback)
        (["--data.train", "/tmp/" + "a" * 300 + ".jsonl", "--sft.max_steps", "0"], "File name too long"),
    ],
)
def test_bad_input_fresh_run_creates_nothing(capsys, tmp_path, argv, needle):
    out = tmp_path / "run"
    err = _fail(capsys, [*argv, "--out", str(out)])
    assert needle in err
    assert not out.exists()


def test_bad_data_files(capsys, tmp_path):
    out = tmp_path / "run"
    cases = [
        (_jsonl(tmp_path / "nocol.jsonl", [{"question": "1+1", "answer": "2"}]), "missing column 'prompt'"),
        (_jsonl(tmp_path / "empty.jsonl", []), "no rows"),
        (str(tmp_path / "absent.jsonl"), "data file not found"),
    ]
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "caf\xe9", "answer": "1"}\n')
    cases.append((str(tmp_path / "latin1.jsonl"), "line 1: not UTF-8 text (byte 0xe9)"))
    for path, needle in cases:
        err = _fail(capsys, ["--data.train", path, "--data.reward", "math01", "--out", str(out)])
        assert needle in err
        assert not out.exists()
    three = _jsonl(tmp_path / "three.jsonl", [{"prompt": f"{i}+1", "answer": str(i + 1)} for i in range(3)])
    fill = ["--rollout.group_filter", "fill", "--rollout.prompts_per_step", "1", "--train.mini_batch_prompts", "1"]
    err = _fail(capsys, ["--data.train", three, "--data.reward", "math01", "--sft.max_steps", "0", *fill,
                         "--rollout.gen_prompts", "6", "--out", str(out)])  # fmt: skip
    assert "rollout.gen_prompts 6 is twice the 3 training prompts or more" in err and "2 times" in err
    assert "set it below 6" in err and not out.exists()
    # a generation batch no larger than the training batch is what gen_prompts none generates: not refused
    from rpgrl.config import Config, apply_overrides
    from rpgrl.trainer.setup import _check_generation_batch

    def cfg(gen: str):
        return apply_overrides(Config(), [("rollout.group_filter", "fill"), ("rollout.prompts_per_step", "400"),
                                          ("rollout.gen_prompts", gen)])  # fmt: skip

    _check_generation_batch(cfg("400"), 200)
    _check_generation_batch(cfg("none"), 200)
    with pytest.raises(UsageError, match="rollout.gen_prompts 401 is twice the 200 .* set it below 401"):
        _check_generation_batch(cfg("401"), 200)


@pytest.mark.parametrize(
    "argv, needle",
    [
        # the saved run is the tiny model: its sizes back to their defaults, which a model folder leaves alone
        (["--model.path", "/nonexistent/model", *(f"--{k}" for k in SIZE_DEFAULTS)], "model folder not found"),
        # the saved run's tiny sizes are not refused as unused (the saved config holds them): the folder is missing
        (["--model.path", "/nonexistent/model"], "model folder not found: /nonexistent/model"),
        (["--loss.bta", "1"], "unknown config key"),
        # the saved run is synthetic with tiny sizes: back to their defaults, which a file dataset leaves alone
        (["--data.train", "/nonexistent.jsonl", "--data.num_train=20000", "--data.num_val=300"], "data file not found"),
        (["grpo"], "differs from the run saved in"),
        # the checkpoint holds a hidden-32 model: the field is named (was torch's header, ending at a colon)
        (["--model.hidden_size", "64"], "does not fit this config: model.hidden_size 64 here, 32 in the saved run"),
        (["--model.num_layers", "2"], "does not fit this config: model.num_layers 2 here, 1 in the saved run"),
        (["--optim.name", "schedulefree"], "was written by adamw, not schedulefree"),
    ],
)
def test_bad_input_on_resume_leaves_run_untouched(capsys, finished_run, argv, needle):
    before = _snapshot(finished_run)
    err = _fail(capsys, [*argv, "--out", str(finished_run), "--resume", "--max-steps", "5"])
    assert needle in err
    assert _snapshot(finished_run) == before


def test_fresh_run_into_existing_run_refused(capsys, finished_run):
    before = _snapshot(finished_run)
    err = _fail(capsys, ["--out", str(finished_run), "--max-steps", "5", *TINY_ARGS])
    assert "is not empty: pass --resume" in err
    assert _snapshot(finished_run) == before


def test_resume_needs_a_run(capsys, tmp_path):
    (tmp_path / "empty").mkdir()  # a run killed in its first seconds, before its config.json
    err = _fail(capsys, ["--resume", "--out", str(tmp_path / "empty")])
    assert "no run to resume" in err and "run its command again without --resume" in err
    assert "--resume needs --out" in _fail(capsys, ["--resume"])


def test_help_lists_presets_and_every_key(capsys):
    assert rpgrl_main(["train", "--help"]) == 0
    text = capsys.readouterr().out
    assert "rpg-reinforce-urkl" in text and "--loss.beta float" in text and "--train.max_steps int" in text
    assert rpgrl_main(["train", "nosuch", "--help"]) == 2  # printed the default's keys as nosuch's, exit 0
    assert capsys.readouterr().err.startswith("rpgrl train: error: unknown preset 'nosuch'")


def test_parse_args_forms():
    a = parse_args(["rpg-urkl", "--loss.beta=0.5", "--max-steps", "7", "--seed=3", "--out", "d", "--resume"])
    assert (a.preset, a.out, a.resume) == ("rpg-urkl", "d", True)
    assert a.overrides == [("loss.beta", "0.5"), ("train.max_steps", "7"), ("train.seed", "3")]
    with pytest.raises(UsageError, match="unexpected argument '-x'"):
        parse_args(["-x"])


def test_a_run_that_stopped_before_its_first_checkpoint_is_started_over_by_resume(capsys, finished_run, tmp_path):
    """No checkpoint yet (killed in the warm start, a crash in the first steps): a plain run refuses the directory
    and names --resume, which starts the run over in it: the same rows as the run that finished, each once."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    for gone in ("checkpoints", "model"):  # a run killed before its first checkpoint (every 100 steps there)
        shutil.rmtree(out / gone)
    (out / "summary.json").unlink()
    before = _snapshot(out)
    err = _fail(capsys, ["--out", str(out), "--max-steps", "3", *TINY_ARGS])
    assert "stopped before its first checkpoint: pass --resume to start it over" in err
    assert _snapshot(out) == before
    assert rpgrl_main(["train", "--out", str(out), "--resume"]) == 0
    assert "has no checkpoint yet (the run stopped before its first one): starting it over" in capsys.readouterr().out
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]  # noqa: E731
    for name in ("metrics.jsonl", "eval.jsonl"):
        assert strip(read_metrics(out / name)) == strip(read_metrics(finished_run / name)), name


def test_resume_to_a_larger_total_falls_back_past_a_corrupt_newest_checkpoint(capsys, finished_run, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    (out / "checkpoints" / "step-000002" / "state.pt").write_bytes(b"\x00garbage" * 100)
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "3"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("resuming from")]
    assert (
        len(printed) == 1 and "step-000001 (step 1); newer checkpoints do not load, skipped: step-000002" in printed[0]
    )
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    assert sorted(p.name for p in (out / "checkpoints").glob("step-*")) == ["step-000002", "step-000003"]
    assert json.loads((out / "config.json").read_text())["train"]["max_steps"] == 3


def test_resume_with_no_readable_checkpoint_changes_nothing(capsys, finished_run, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    for state in (out / "checkpoints").glob("step-*/state.pt"):
        state.write_bytes(b"")
    before = _snapshot(out)
    err = _fail(capsys, ["--out", str(out), "--resume", "--max-steps", "3"])
    assert "no checkpoint in" in err and "loads: step-000002 (" in err
    assert _snapshot(out) == before


@pytest.mark.parametrize("where", ["file", "below-file", "read-only"])
def test_out_that_cannot_hold_a_run_fails_before_loading(capsys, tmp_path, monkeypatch, where):
    from rpgrl.trainer import loop, rundir

    def no_loading(*a, **k):
        raise AssertionError("loaded a model before checking --out")

    monkeypatch.setattr(loop, "build_model", no_loading)
    (tmp_path / "f").write_text("x")
    out, needle = {
        "file": (tmp_path / "f", "is a file, not a directory"),
        "below-file": (tmp_path / "f" / "a" / "run", f"lies below {tmp_path / 'f'}, which is a file"),
        "read-only": (tmp_path / "ro" / "run", f"no permission to write in {tmp_path}"),
    }[where]
    if where == "read-only":  # root ignores chmod, so ask the check's question the way a read-only place answers
        monkeypatch.setattr(rundir.os, "access", lambda p, mode: False)
    for resume in ([], ["--resume"]):
        assert needle in _fail(capsys, ["--out", str(out), *resume, *TINY_ARGS])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"] and (tmp_path / "f").read_text() == "x"


def test_sigterm_checkpoints_the_current_step_and_exits_143(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "rpgrl.cli", "train", "--out", str(out), "--max-steps", "50", *TINY_ARGS]
    argv.append("--data.reward=synthetic")  # test_parity is registered in this process only
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not read_metrics(out / "metrics.jsonl") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    last = err.strip().splitlines()[-1]
    steps = [r["step"] for r in read_metrics(out / "metrics.jsonl")]
    assert last == f"rpgrl train: stopped by SIGTERM after step {steps[-1]}, checkpoint saved; continue with: " \
        f"rpgrl train --out {out} --resume"  # fmt: skip
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 50
    assert (out / "checkpoints" / "latest").read_text() == f"step-{steps[-1]:06d}"
    assert not (out / "summary.json").exists()


@pytest.mark.parametrize("damaged", ["tokenizer_config.json", "model.safetensors"])
def test_broken_model_folder_is_one_line(capsys, finished_run, tmp_path, damaged):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(finished_run / "model", model)
    (model / damaged).write_bytes((model / damaged).read_bytes()[:100])  # truncated
    err = _fail(capsys, ["--model.path", str(model), "--out", str(tmp_path / "run"), *FOLDER_ARGS])
    assert f"cannot load the {'tokenizer of' if damaged.startswith('tok') else 'model in'} {model}" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--out="], "--out needs a folder, got an empty value"),
        (["--out", "/tmp/" + "a" * 300], "cannot use it: File name too long"),
    ],
)
def test_out_empty_or_too_long_is_one_line(capsys, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert needle in _fail(capsys, [*argv, *TINY_ARGS])
    assert list(tmp_path.iterdir()) == []


def test_out_holding_a_model_folder_is_not_called_a_stopped_run(capsys, finished_run):
    """A model folder has a config.json too: it was named a run that stopped before its first checkpoint, with advice
    (--resume) that then failed differently."""
    err = _fail(capsys, ["--out", str(finished_run / "model"), *TINY_ARGS])
    assert "holds a config.json that is not a run's (a model folder?)" in err


@pytest.mark.parametrize("pointer", [b"\xff\xfe", b"../../elsewhere", b"step-000002\x00"])
def test_a_latest_pointer_that_does_not_read_is_passed_over(capsys, finished_run, tmp_path, pointer):
    """checkpoints/latest that is not UTF-8, points outside the folder or holds a NUL byte raised a traceback; the
    newest complete checkpoint is found by listing instead."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    (out / "checkpoints" / "latest").write_bytes(pointer)
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "3"]) == 0
    assert "resuming from" in capsys.readouterr().out and len(read_metrics(out / "metrics.jsonl")) == 3


@pytest.mark.parametrize("field, value", [("vocab_size", "abc"), ("num_hidden_layers", None),
                                          ("num_attention_heads", 0)])  # fmt: skip
def test_a_model_config_with_a_field_of_the_wrong_type_is_one_line(capsys, finished_run, tmp_path, field, value):
    """huggingface_hub's strict config dataclasses raise their own exception class, and 0 heads a
    ZeroDivisionError: both were tracebacks."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(finished_run / "model", model)
    cfg = json.loads((model / "config.json").read_text())
    cfg[field] = value
    (model / "config.json").write_text(json.dumps(cfg))
    err = _fail(capsys, ["--model.path", str(model), "--out", str(tmp_path / "run"), *FOLDER_ARGS])
    assert f"cannot load the model in {model}" in err
    assert not (tmp_path / "run").exists()


def test_warm_start_without_the_synthetic_task_creates_nothing(capsys, tmp_path):
    """The warm start imitates the synthetic task's solutions; on a file dataset it is refused before `out`."""
    out = tmp_path / "run"
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1", "answer": "2"}])
    err = _fail(capsys, ["--data.train", data, "--data.reward", "math01", "--sft.max_steps", "5", "--out", str(out)])
    assert "sft.max_steps > 0 needs the synthetic task" in err
    assert not out.exists()


def test_compiled_decode_without_a_compiler_creates_nothing(capsys, tmp_path, monkeypatch):
    """rollout.decode compiled where torch.compile finds no C++ compiler: one line at setup, naming it."""
    import rpgrl.rollout

    monkeypatch.setattr(rpgrl.rollout, "compiler_missing", lambda: "torch.compile finds no C++ compiler (X: set CXX)")
    out = tmp_path / "run"
    err = _fail(capsys, ["--rollout.decode", "compiled", "--out", str(out), *TINY_ARGS])
    assert "rollout.decode compiled: torch.compile finds no C++ compiler" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "key,value", [("rollout.decode", "static"), ("rollout.decode", "compiled"), ("train.forward", "packed")]
)
def test_static_decode_on_an_unsupported_model_creates_nothing(capsys, tmp_path, key, value):
    """rollout.decode static / train.forward packed on a model rpgrl.decode / rpgrl.packed do not compute exactly
    (a GELU MLP) fails at setup, naming the reason; 'auto' would fall back to the transformers path."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rpgrl.models import build_byte_tokenizer

    tok = build_byte_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, hidden_act="gelu", pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id)  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    capsys.readouterr()  # the save's progress bar
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1", "answer": "2"}])
    out = tmp_path / "run"
    argv = ["--model.path", str(tmp_path / "model"), "--data.train", data, "--data.reward", "math01",
            "--sft.max_steps", "0", f"--{key}", value, "--out", str(out)]  # fmt: skip
    err = _fail(capsys, argv)
    assert f"{key} {value} does not support this model (hidden_act 'gelu')" in err
    assert not out.exists()


def test_resume_below_the_checkpoint_step_or_from_a_garbled_config_changes_nothing(capsys, finished_run, tmp_path):
    import shutil

    before = _snapshot(finished_run)
    err = _fail(capsys, ["--out", str(finished_run), "--resume", "--max-steps", "1"])
    assert "train.max_steps 1 is below the step of" in err and "(2): pass --max-steps 2 or more" in err
    assert _snapshot(finished_run) == before
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "config.json").write_bytes(b"\xff\xfe{}")
    before = _snapshot(run)
    assert "config.json is not UTF-8 text (byte 0xff)" in _fail(capsys, ["--out", str(run), "--resume"])
    assert _snapshot(run) == before


def test_an_unreadable_saved_config_is_one_line(capsys, finished_run, monkeypatch):
    from pathlib import Path

    read = Path.read_text

    def denied(self, *a, **k):
        if self.name == "config.json":
            raise PermissionError(13, "Permission denied", str(self))
        return read(self, *a, **k)

    before = _snapshot(finished_run)
    monkeypatch.setattr(Path, "read_text", denied)
    assert "config.json: Permission denied" in _fail(capsys, ["--out", str(finished_run), "--resume"])
    monkeypatch.undo()
    assert _snapshot(finished_run) == before


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--sft.max_steps", "5", "--sft.lr", "1e30"], r"warm start step \d: the loss is (nan|inf), the weights "
         r"diverged \(lower sft.lr, now 1e\+30\)"),
        (["--optim.lr", "1e30", "--max-steps", "4"], r"the policy's log-probs are not finite .* diverged "
         r"\(lower optim.lr; or loss.beta, optim.weight_decay or the reward's scale, if large\)"),
    ],
)  # fmt: skip
def test_divergence_is_one_line_and_keeps_what_was_saved(capsys, tmp_path, argv, needle):
    """A learning rate far too large: the warm start's loss, or the policy's log-probs after an optimizer step,
    turn NaN. One line naming the knob, exit 2, and the run directory holds nothing of the failing step."""
    import re

    out = tmp_path / "run"
    err = _fail(capsys, [*TINY_ARGS, "--train.checkpoint_every", "1", *argv, "--out", str(out)])
    assert re.search(needle, err) and err.rstrip().endswith(f"; {out} keeps what was saved before"), err
    steps = [r["step"] for r in read_metrics(out / "metrics.jsonl")] if (out / "metrics.jsonl").exists() else []
    saved = [int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("step-*")]
    assert set(saved) <= set(steps)  # every checkpoint (one per step here) is of a step that completed


@pytest.mark.parametrize(
    "argv",
    [
        ["--optim.lr", "1e30"],
        ["--data.reward", "test_nan_after_two"],
        ["--data.reward", "test_nan_after_two", "--train.report_to", "tensorboard"],  # its event files taken back
    ],
)
def test_a_resume_that_fails_before_saving_leaves_the_run_as_it_was(capsys, finished_run, tmp_path, argv):
    """A learning rate far too large, or a reward that returns NaN, passed when resuming: one line and exit 2, and
    the files the resume rewrote before its first step (config.json, metrics and evaluations cut back to the
    checkpoint, summary) are put back, so a plain --resume continues the run as it was."""
    import shutil

    from rpgrl.rewards import REWARDS, Reward, register_reward

    if "test_nan_after_two" not in REWARDS:

        @register_reward("test_nan_after_two")
        def _nan(completion: str, answer: str) -> Reward:
            return Reward(value=float("nan"), correct=False)

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = _snapshot(run)
    err = _fail(capsys, ["--out", str(run), "--resume", "--max-steps", "4", *argv])
    assert "not finite" in err or "returned nan" in err, err
    assert _snapshot(run) == before
    assert rpgrl_main(["train", "--out", str(run), "--resume", "--max-steps", "3"]) == 0  # the saved config again
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]


def test_a_tokenizer_larger_than_the_model_is_refused_before_any_work(capsys, tmp_path):
    """Byte-tokenizer prompts hold ids up to 258; a model with 50 embeddings cannot read them (was a traceback at
    the first sampling, with the run directory already written)."""
    from rpgrl.models import build_byte_tokenizer, build_tiny_model

    tok = build_byte_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=1, heads=4, kv_heads=2, ffn=64)
    model.resize_token_embeddings(50)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    capsys.readouterr()
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": "What is 1+1?", "answer": "2"}])
    out = tmp_path / "run"
    err = _fail(capsys, ["--model.path", str(tmp_path / "model"), "--data.train", data, "--data.reward", "math01",
                         "--sft.max_steps", "0", "--out", str(out)])  # fmt: skip
    assert "training prompt 0 encodes to token id" in err and "outside the model's vocabulary of 50" in err
    assert not out.exists()


def test_dynamic_sampling_that_gives_up_saves_the_run_and_says_how_to_go_on(capsys, tmp_path):
    """'fill' with no mixed group within rollout.max_gen_batches (the task's answers are never produced): one line,
    exit 2, and the run is kept at the last finished step so --resume continues it."""
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": f"{i}", "answer": "unreachable"} for i in range(8)])
    out = tmp_path / "run"
    args = [a for a in TINY_ARGS if not a.startswith(("--data.reward", "--rollout.group_filter", "--data.num_"))]
    err = _fail(capsys, [*args, "--data.train", data, "--data.reward", "math01", "--rollout.group_filter", "fill",
                         "--rollout.max_gen_batches", "2", "--max-steps", "2", "--out", str(out)])  # fmt: skip
    assert "only 0 of 4 prompt groups had mixed outcomes after 2 generation batches" in err
    assert "the run is saved at step 0: continue with --resume" in err
    saved = torch.load(out / "checkpoints" / "step-000000" / "state.pt", weights_only=False)
    # the data and random streams where step 1 began (they had moved on through the batches it gave up on, so a
    # resume with a larger max_gen_batches drew other prompts than a run given it from the start)
    assert (saved["data"]["epoch"], saved["data"]["pos"]) == (0, 0)
    fresh = torch.Generator().manual_seed(0).get_state()
    assert torch.equal(saved["rng"]["generator"], fresh)


def test_benchmarks_the_tokenizer_cannot_spell_are_refused_before_the_run_directory(capsys, tmp_path):
    """The synthetic task's character tokenizer cannot spell AIME's prompts: found at setup (was at the first
    evaluation, after the run directory was written)."""
    bench = _jsonl(tmp_path / "bench.jsonl", [{"prompt": "What is $\\frac{1}{2}$?", "answer": "1/2"}])
    out = tmp_path / "run"
    err = _fail(capsys, [*TINY_ARGS, "--eval.benchmarks", bench, "--out", str(out)])
    assert "cannot encode the prompt" in err
    assert not out.exists()


def test_benchmarks_sharing_a_name_are_refused_before_the_run_directory(capsys, tmp_path):
    """Two files with one name (their metrics would share keys): refused at setup (was after config.json)."""
    (tmp_path / "a").mkdir()
    one = _jsonl(tmp_path / "bench.jsonl", [{"prompt": "1+1=", "answer": "2"}])
    two = _jsonl(tmp_path / "a" / "bench.jsonl", [{"prompt": "2+2=", "answer": "4"}])
    out = tmp_path / "run"
    err = _fail(capsys, [*TINY_ARGS, "--eval.benchmarks", f"{one},{two}", "--out", str(out)])
    assert "two benchmark files share a name" in err
    assert not out.exists()


def test_progress_false_prints_no_progress_bar(capsys, tmp_path):
    """--train.progress false (TINY): not even transformers' bar when the final model is written."""
    assert rpgrl_main(["train", "--out", str(tmp_path / "run"), "--max-steps", "1", *TINY_ARGS]) == 0
    err = capsys.readouterr().err
    assert "Writing model shards" not in err and "it/s" not in err, err
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()  # put back for the rest of the process


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_a_loss_that_overflows_mid_run_is_a_diverged_run(capsys, tmp_path, monkeypatch, where):
    """The loss refusing ratios it cannot represent (`LossOverflow`, e.g. an unclipped sequence-level w past
    float32), in its forward or, for a finite loss whose gradient overflows, in backward, is a diverged run: one line
    naming it, exit 2, the steps before it kept (was a traceback)."""
    import dataclasses

    import torch

    from rpgrl.objectives import LOSSES, LossOverflow

    message = "rpg_loss overflowed (its gradient, log w per sequence in [0, 95]): a ratio is too big"

    class InBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            raise LossOverflow(message)

    real, calls = LOSSES.get("rpg"), []

    def overflowing(*args, **kwargs):
        calls.append(1)
        if len(calls) > 5 and where == "forward":  # step 2: 1 call checks the options at setup, 4 calls a step
            raise LossOverflow(message)
        out = real(*args, **kwargs)
        if len(calls) > 5:  # step 2's first backward raises
            return dataclasses.replace(out, loss=InBackward.apply(out.loss))
        return out

    monkeypatch.setitem(LOSSES._items, "rpg", overflowing)
    out = tmp_path / "run"
    err = _fail(capsys, [*TINY_ARGS, "--train.checkpoint_every", "1", "--max-steps", "3", "--out", str(out)])
    assert "rpg_loss overflowed (its gradient" in err and "lower optim.lr" in err, err
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    assert (out / "checkpoints" / "step-000001").is_dir()


def test_an_unknown_option_without_a_value_is_named_unknown(capsys, tmp_path):
    """`--foo` alone (last, or before another option) is an unknown option, as `--foo 1` is, not one missing its
    value; a known option without one still says it needs a value."""
    out = tmp_path / "run"
    for argv in (["--foo"], ["--foo", "--max-steps", "1"], ["--foo="]):
        err = _fail(capsys, ["--out", str(out), *argv])
        assert "unknown option --foo; config keys look like --section.field" in err, err
    assert "--out needs a value" in _fail(capsys, ["--out"])
    assert "--seed needs a value" in _fail(capsys, ["--seed", "--out", str(out)])
    assert not out.exists()


def test_the_preset_reaches_the_runs_own_config_check(tmp_path, monkeypatch):
    """`rpg-urkl-released --loss.clip none`: the preset's unused options passed the command's check but were refused
    by the run's own (open_run checked again without the preset, a review found)."""
    from pathlib import Path

    import rpgrl.trainer.setup as setup
    from rpgrl.config import check as real_check
    from rpgrl.presets import get_preset
    from rpgrl.trainer.cli import _prepare

    data = _jsonl(tmp_path / "t.jsonl", [{"prompt": "1+1", "answer": "2"}])
    argv = ["rpg-urkl-released", "--loss.clip", "none", "--data.train", data, "--data.reward", "math",
            "--model.path", str(tmp_path), "--out", str(tmp_path / "run")]  # fmt: skip
    cfg, out, resume, train, _ = _prepare(argv)
    assert train.keywords["base"] == get_preset("rpg-urkl-released")
    seen = {}

    def check(c, base=None):
        seen["base"] = base
        raise UsageError("stop here")

    monkeypatch.setattr("rpgrl.config.check", check)
    with pytest.raises(UsageError, match="stop here"):
        setup.open_run(cfg, Path(out), resume, train.keywords["base"])
    assert seen["base"] == get_preset("rpg-urkl-released")
    with pytest.raises(UsageError, match="also unused"):  # without it (the Python API), refused, all named at once
        real_check(cfg)


def test_resume_names_a_mistyped_or_wrong_folder_and_a_bad_saved_config(capsys, tmp_path):
    """A review's: --resume on a folder that does not exist advised starting a fresh run there; on a model folder it
    said the run's checkpoints were removed; a saved config.json with an unknown key or a wrong type was reported as
    if the user had typed the flag. A run of --max-steps 0 without a warm start wrote no checkpoint, and --resume
    then said its checkpoints were removed: it writes the end's checkpoint, and resumes."""
    err = _fail(capsys, ["--out", str(tmp_path / "typo"), "--resume"])
    assert f"--resume: {tmp_path / 'typo'} does not exist: check --out" in err and not (tmp_path / "typo").exists()
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    assert "holds no rpgrl run (its config.json is not a run's: a model folder?)" in _fail(
        capsys, ["--out", str(model), "--resume"]
    )
    run = tmp_path / "run"
    assert rpgrl_main(["train", "--out", str(run), "--max-steps", "0", *TINY_ARGS, "--sft.max_steps", "0"]) == 0
    assert (run / "checkpoints" / "latest").read_text() == "step-000000"
    saved = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(saved | {"train": saved["train"] | {"foo": 1}}))
    err = _fail(capsys, ["--out", str(run), "--resume", "--max-steps", "1"])
    assert f"--resume: {run / 'config.json'}: unknown config key train.foo" in err
    (run / "config.json").write_text(json.dumps(saved))
    assert rpgrl_main(["train", "--out", str(run), "--resume", "--max-steps", "1"]) == 0
    assert json.loads((run / "summary.json").read_text())["steps"] == 1


def test_a_prompt_above_max_prompt_length_is_refused_or_cut_as_data_truncation_says(capsys, tmp_path):
    """A long prompt was cut from the left without a word, losing its question ('What is 17+25? ...' became its
    last 16 tokens; a review's). Refused by default, naming it (verl's truncation=error); --data.truncation left
    keeps its last tokens, as before. A config.json from before the option ran with left: its resume is not
    refused."""
    from tiny_config import tiny

    from rpgrl.models import build_byte_tokenizer
    from rpgrl.trainer.setup import encode_prompt, load_task

    tok = build_byte_tokenizer()
    short, long = "What is 1+1?", "What is 17+25? Give the answer."
    n_short, n_long = (len(encode_prompt(tok, p, chat=True)) for p in (short, long))  # with the chat template
    assert n_long == n_short + len(long) - len(short)
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": short, "answer": "2"}, {"prompt": long, "answer": "42"}])
    args = [a for a in TINY_ARGS if not a.startswith(("--data.reward", "--data.num_"))]
    common = [*args, "--data.train", data, "--data.reward", "math01", "--data.max_prompt_length", str(n_short)]
    out = tmp_path / "run"
    err = _fail(capsys, [*common, "--out", str(out)])
    assert f"training prompt 1 ('{long}') has {n_long} tokens, above data.max_prompt_length {n_short}: raise it, " \
           "or pass --data.truncation left" in err  # fmt: skip
    assert not out.exists()
    cfg = tiny(("data.num_train", "20000"), ("data.num_val", "300"), ("data.train", data), ("data.reward", "math01"),
               ("data.max_prompt_length", str(n_short)), ("data.truncation", "left"))  # fmt: skip
    task = load_task(cfg, tok)
    assert task.train_prompts == [encode_prompt(tok, short, chat=True), encode_prompt(tok, long, chat=True)[-n_short:]]
    assert rpgrl_main(["train", *common, "--data.truncation", "left", "--max-steps", "1", "--out", str(out)]) == 0
    saved = json.loads((out / "config.json").read_text())
    del saved["data"]["truncation"]  # written before the option: its prompts were cut
    (out / "config.json").write_text(json.dumps(saved))
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "2"]) == 0
    assert json.loads((out / "config.json").read_text())["data"]["truncation"] == "left"
    (out / "config.json").write_text(json.dumps(saved))  # resumed naming its preset: the field added since is none
    assert rpgrl_main(["train", "default", *common, "--out", str(out), "--resume", "--max-steps", "3"]) == 0
    # another field gone (a hand edit) still differs from the named preset (it took the plain default silently)
    own = [a for a in TINY_ARGS if not a.startswith("--optim.lr")]  # default-on-policy's lr 1e-4, not 3.5e-5
    out = tmp_path / "on-policy"
    assert rpgrl_main(["train", "default-on-policy", *own, "--max-steps", "1", "--out", str(out)]) == 0
    saved = json.loads((out / "config.json").read_text())
    del saved["optim"]["lr"]
    (out / "config.json").write_text(json.dumps(saved))
    err = _fail(capsys, ["default-on-policy", *own, "--out", str(out), "--resume", "--max-steps", "2"])
    assert "preset 'default-on-policy' differs from the run saved in" in err and " in optim.lr; drop the" in err


def test_default_run_directories_of_runs_started_together_differ(tmp_path, monkeypatch, capsys):
    """Runs launched together without --out picked one runs/default-<second> and all but one failed (a review's;
    then again for one seed: a name checked free was taken by the time the run created it). The name carries the
    seed and is claimed by creating it (-2, -3 when taken); a run that writes nothing there removes it again."""
    from rpgrl.trainer.cli import default_out

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("time.strftime", lambda fmt: "20261127-190100")
    assert default_out("default", 3) == "runs/default-20261127-190100-s3"
    assert default_out("default", 4) == "runs/default-20261127-190100-s4"
    assert default_out("default", 3) == "runs/default-20261127-190100-s3-2"
    assert default_out("default", 3) == "runs/default-20261127-190100-s3-3"
    assert all((tmp_path / "runs" / n).is_dir() for n in ("default-20261127-190100-s3", "default-20261127-190100-s3-3"))
    data = tmp_path / "nope.jsonl"  # refused once the run opens it: the claimed directory goes again
    args = [a for a in TINY_ARGS if not a.startswith(("--data.reward", "--data.num_"))]
    code = rpgrl_main(["train", "--seed", "5", *args, "--data.train", str(data), "--data.reward", "math01"])
    assert code == 2 and "data file not found" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "default-20261127-190100-s5").exists()
    empty = tmp_path / "empty"  # and runs/ itself, when the refused run was all it held
    empty.mkdir()
    monkeypatch.chdir(empty)
    code = rpgrl_main(["train", "--seed", "5", *args, "--data.train", str(data), "--data.reward", "math01"])
    assert code == 2 and list(empty.iterdir()) == []


def test_a_benchmark_file_with_other_columns_is_named_as_eval_benchmarks(capsys, tmp_path):
    """With --data.prompt_key question, a benchmark with that column failed as "missing column 'prompt'", without
    saying that eval.benchmarks was read, nor that data.prompt_key does not apply there (a review's)."""
    rows = [{"question": "What is 1+1?", "answer": "2"}]
    data, bench = _jsonl(tmp_path / "d.jsonl", rows), _jsonl(tmp_path / "same.jsonl", rows)
    args = [a for a in TINY_ARGS if not a.startswith(("--data.reward", "--data.num_"))]
    err = _fail(capsys, [*args, "--data.train", data, "--data.prompt_key", "question", "--data.reward", "math01",
                         "--eval.benchmarks", bench, "--out", str(tmp_path / "run")])  # fmt: skip
    assert f"eval.benchmarks: {bench}: missing column 'prompt'" in err
    assert "data.prompt_key and data.answer_key apply to data.train and data.val" in err


def test_a_resume_says_which_metric_rows_were_deleted_or_cut(capsys, finished_run, tmp_path):
    """A metrics.jsonl deleted, or cut mid-line, since it was written: the resume wrote the later steps and said
    nothing of the rows it cannot write again (a review's)."""
    import shutil

    for name, cut in (("gone", None), ("cut", 1)):
        run = tmp_path / name
        shutil.copytree(finished_run, run)
        lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
        if cut is None:
            (run / "metrics.jsonl").unlink()
        else:  # step 1's row whole, step 2's cut in the middle
            (run / "metrics.jsonl").write_text(lines[0] + lines[1][: len(lines[1]) // 2])
        capsys.readouterr()
        assert rpgrl_main(["train", "--out", str(run), "--resume", "--max-steps", "3"]) == 0
        missing = "1-2" if cut is None else "2"
        assert f"has no row for step {missing} (deleted or cut since it was written); the run goes on from step 3" \
            in capsys.readouterr().out  # fmt: skip
        assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == ([3] if cut is None else [1, 3])


def test_a_benchmark_prompt_above_max_prompt_length_is_refused_too(capsys, tmp_path):
    """data.truncation error covered the training files, while `evaluate` still cut benchmark prompts without a word
    (a review's): refused before the run, naming the benchmark's prompt; with left they are cut as before."""
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": "What is 1+1?", "answer": "2"}])
    bench = _jsonl(tmp_path / "bench.jsonl", [{"prompt": "What is 1+1? " * 10, "answer": "2"}])
    args = [a for a in TINY_ARGS if not a.startswith(("--data.reward", "--data.num_"))]
    common = [*args, "--data.train", data, "--data.reward", "math01", "--data.max_prompt_length", "60",
              "--eval.benchmarks", bench, "--eval.samples", "1"]  # fmt: skip
    err = _fail(capsys, [*common, "--out", str(tmp_path / "run")])
    assert "bench prompt 0 ('What is 1+1? What is 1+1? What is 1+1? What is 1+1') has 154 tokens, " in err
    assert "above data.max_prompt_length 60: raise it, or pass --data.truncation left" in err
    assert rpgrl_main(["train", *common, "--data.truncation", "left", "--max-steps", "1",
                       "--out", str(tmp_path / "run")]) == 0  # fmt: skip


def test_prompts_are_encoded_in_one_call_as_each_alone_and_a_prompt_that_fails_is_named():
    """load_task encoded the default's 20,000 prompts one tokenizer call each (about a second of every run): one
    call now, the same ids; a prompt the tokenizer cannot encode is still named alone."""
    from rpgrl.errors import UsageError
    from rpgrl.models import build_byte_tokenizer, build_char_tokenizer
    from rpgrl.rewards.synthetic import CHARS, make_problems
    from rpgrl.trainer.setup import encode_prompt, encode_prompts

    tok = build_char_tokenizer(CHARS)
    prompts = [p.prompt for p in make_problems(50, seed=1, split="train")]
    assert encode_prompts(tok, prompts, chat=False) == [encode_prompt(tok, p, chat=False) for p in prompts]
    assert encode_prompts(tok, [], chat=False) == []
    with pytest.raises(
        UsageError, match=r"cannot encode the prompt 'Q:1\$2' \(characters outside its vocabulary: '\$'"
    ):
        encode_prompts(tok, [*prompts[:3], "Q:1$2"], chat=False)
    byte = build_byte_tokenizer()  # with a chat template: each prompt rendered alone, as before
    texts = ["What is 1+1?", [{"role": "user", "content": "And 2+2?"}]]
    assert encode_prompts(byte, texts, chat=True) == [encode_prompt(byte, p, chat=True) for p in texts]
    assert encode_prompts(byte, texts, chat=False) == [encode_prompt(byte, p, chat=False) for p in texts]


@pytest.mark.parametrize("chat", ["true", "false"])
def test_a_prompt_the_tokenizer_cannot_encode_is_named_by_its_index(capsys, tmp_path, chat):
    """A data file's prompt holding a lone surrogate (JSON's "\\udce9": no tokenizer takes it) was quoted but not
    located ("cannot encode the prompt ..."): named as a prompt too long is, by split and index, in one line."""
    rows = [{"prompt": f"What is {i}+1?", "answer": str(i + 1)} for i in range(8)]
    rows[5]["prompt"] = "What is \udce9?"
    data = _jsonl(tmp_path / "d.jsonl", rows)
    args = [a for a in TINY_ARGS if not a.startswith("--data.num_")]
    err = _fail(capsys, [*args, "--data.train", data, "--model.chat_template", chat, "--out", str(tmp_path / "r")])
    assert "error: training prompt 5: the model's tokenizer cannot encode the prompt " in err, err
    assert "(characters outside its vocabulary: '\\udce9')" in err, err


def test_a_benchmark_prompt_the_tokenizer_cannot_encode_is_named_by_its_index(capsys, tmp_path):
    """As a training prompt is: an eval.benchmarks prompt the tokenizer cannot encode was quoted only, inside the
    chat template's rendering ("cannot encode the prompt '<|user|>\\nWhat is ...'"): named by benchmark and index,
    as one too long is."""
    rows = [{"prompt": f"What is {i}+1?", "answer": str(i + 1)} for i in range(4)]
    rows[2]["prompt"] = "What is \udce9?"
    data = _jsonl(tmp_path / "d.jsonl", rows[:2] * 4)
    bench = _jsonl(tmp_path / "mybench.jsonl", rows)
    args = [a for a in TINY_ARGS if not a.startswith("--data.num_")]
    err = _fail(capsys, [*args, "--data.train", data, "--eval.benchmarks", bench, "--out", str(tmp_path / "r")])
    assert "error: mybench prompt 2: the model's tokenizer cannot encode the prompt " in err, err


def test_a_temperature_past_float32_s_resolution_is_one_line_before_anything_is_written(capsys, tmp_path):
    """`--rollout.temperature 1e30` ran: every log-prob was -log V and the gradient 0. Above 1e4 it is refused."""
    out = tmp_path / "run"
    assert rpgrl_main(["train", "--out", str(out), "--rollout.temperature", "1e30"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rpgrl train: error: rollout.temperature must be <= 1e4") and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("kind", ["dangling", "below dangling", "loop"])
def test_an_out_through_a_broken_link_is_named_before_anything_loads(capsys, tmp_path, kind):
    """A link to nothing passed every check (it does not exist, its folder is writable); the run then failed making
    it, after the model loaded, with "cannot write there: File exists"; `rpgrl eval --out` and `rpgrl reproduce`
    share the check."""
    link = tmp_path / "link"
    if kind == "loop":
        (tmp_path / "other").symlink_to(link)
    link.symlink_to(tmp_path / "other" if kind == "loop" else tmp_path / "gone" / "run")
    out = link / "run" if kind == "below dangling" else link
    err = _fail(capsys, [*TINY_ARGS, "--max-steps", "1", "--out", str(out)])
    name = "it" if out == link else str(link)
    assert f"--out {out}: {name} is a link to " in err and "which leads to no folder" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["link"] + ["other"] * (kind == "loop"))


def test_a_resume_that_changes_settings_names_them(capsys, finished_run, tmp_path):
    """`--resume --loss.beta 0.5` trained on with the new value and rewrote config.json without a word, so nothing
    said that the steps before ran with another beta: one line names each change (train.max_steps aside)."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    argv = ["train", "--out", str(out), "--resume", "--max-steps", "3", "--loss.beta", "0.5", "--optim.lr", "0.002"]
    assert rpgrl_main(argv) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("--resume: changed")]
    assert printed == [
        "--resume: changed from the saved run: loss.beta 0.0001 -> 0.5, optim.lr 0.01 -> 0.002 (config.json now "
        "holds the new values; the steps before ran with the saved ones, kept in config_changes.jsonl)"
    ]
    assert json.loads((out / "config.json").read_text())["loss"]["beta"] == 0.5
    # the saved values were in the printed line alone: config_changes.jsonl keeps them, with the step they ran to
    change = {
        "step": 2,
        "before": {"loss.beta": 0.0001, "optim.lr": 0.01},
        "after": {"loss.beta": 0.5, "optim.lr": 0.002},
    }
    assert [json.loads(line) for line in (out / "config_changes.jsonl").read_text().splitlines()] == [change]
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "4", "--loss.beta", "0.5"]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("--resume: changed")]
    assert len((out / "config_changes.jsonl").read_text().splitlines()) == 1  # no change, no line


def test_a_resume_stopped_before_config_json_was_rewritten_logs_its_change_once(capsys, finished_run, tmp_path):
    """config_changes.jsonl is appended before config.json is rewritten: a resume killed between the two left the
    old config.json, and the next resume with the same flags appended the same change a second time. A change back
    is a new line, and the same change after it again (only the last line is compared)."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    saved = (out / "config.json").read_text()
    resume = ["train", "--out", str(out), "--resume", "--max-steps", "2"]
    assert rpgrl_main([*resume, "--loss.beta", "0.5"]) == 0
    (out / "config.json").write_text(saved)  # as a kill between the two writes leaves it
    assert rpgrl_main([*resume, "--loss.beta", "0.5"]) == 0
    change = {"step": 2, "before": {"loss.beta": 0.0001}, "after": {"loss.beta": 0.5}}
    back = {"step": 2, "before": {"loss.beta": 0.5}, "after": {"loss.beta": 0.0001}}
    assert [json.loads(line) for line in (out / "config_changes.jsonl").read_text().splitlines()] == [change]
    assert rpgrl_main([*resume, "--loss.beta", "0.0001"]) == 0
    assert rpgrl_main([*resume, "--loss.beta", "0.5"]) == 0
    lines = [json.loads(line) for line in (out / "config_changes.jsonl").read_text().splitlines()]
    assert lines == [change, back, change]
    capsys.readouterr()


def test_a_resume_of_a_config_json_without_a_later_field_logs_no_change(capsys, finished_run, tmp_path):
    """A config.json written before data.truncation existed reads as truncation "left" (`BEFORE_TRUNCATION`): a resume
    that changed nothing wrote {"data.truncation": null -> "left"} to config_changes.jsonl (and nothing printed)."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    saved = json.loads((out / "config.json").read_text())
    del saved["data"]["truncation"]
    (out / "config.json").write_text(json.dumps(saved))
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "3"]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("--resume: changed")]
    assert not (out / "config_changes.jsonl").exists()
    saved = json.loads((out / "config.json").read_text())  # again, and a real change: only that one is logged
    del saved["data"]["truncation"]
    (out / "config.json").write_text(json.dumps(saved))
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "4", "--loss.beta", "0.5"]) == 0
    change = {"step": 3, "before": {"loss.beta": 0.0001}, "after": {"loss.beta": 0.5}}
    assert [json.loads(line) for line in (out / "config_changes.jsonl").read_text().splitlines()] == [change]
