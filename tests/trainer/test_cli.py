"""`rpgrl train`: bad input gives one line and exit code 2 and leaves the run directory untouched."""

import hashlib
import json

import pytest
from tiny_config import TINY

from rpgrl.cli import main as rpgrl_main
from rpgrl.errors import UsageError
from rpgrl.trainer.cli import parse_args
from rpgrl.trainer.log import read_metrics

TINY_ARGS = [f"--{k}={v}" for k, v in TINY if k != "train.max_steps"]


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
    out = tmp_path_factory.mktemp("cli") / "run"
    assert rpgrl_main(["train", "--out", str(out), "--max-steps", "2", *TINY_ARGS]) == 0
    return out


def test_train_then_resume_to_a_larger_total(finished_run, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    assert rpgrl_main(["train", "--out", str(out), "--resume", "--max-steps", "3"]) == 0
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    assert json.loads((out / "config.json").read_text())["train"]["max_steps"] == 3


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
    for path, needle in cases:
        err = _fail(capsys, ["--data.train", path, "--data.reward", "math01", "--out", str(out)])
        assert needle in err
        assert not out.exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--model.path", "/nonexistent/model"], "model folder not found"),
        (["--loss.bta", "1"], "unknown config key"),
        (["--data.train", "/nonexistent.jsonl"], "data file not found"),
        (["grpo"], "differs from the run saved in"),
        (["--model.hidden_size", "64"], "does not fit this config"),  # the checkpoint holds a hidden-32 model
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
    assert "no run to resume" in _fail(capsys, ["--resume", "--out", str(tmp_path / "none")])
    assert "--resume needs --out" in _fail(capsys, ["--resume"])


def test_help_lists_presets_and_every_key(capsys):
    assert rpgrl_main(["train", "--help"]) == 0
    text = capsys.readouterr().out
    assert "rpg-reinforce-urkl" in text and "--loss.beta float" in text and "--train.max_steps int" in text


def test_parse_args_forms():
    a = parse_args(["rpg-urkl", "--loss.beta=0.5", "--max-steps", "7", "--seed=3", "--out", "d", "--resume"])
    assert (a.preset, a.out, a.resume) == ("rpg-urkl", "d", True)
    assert a.overrides == [("loss.beta", "0.5"), ("train.max_steps", "7"), ("train.seed", "3")]
    with pytest.raises(UsageError, match="unexpected argument '-x'"):
        parse_args(["-x"])
