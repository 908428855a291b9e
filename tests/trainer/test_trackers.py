"""Trackers (`train.report_to`): TensorBoard event files and W&B offline files read back and compared with
metrics.jsonl / eval.jsonl, resume without duplicated steps, and the one-line errors."""

import json
import shutil
import struct

import pytest
from tiny_config import tiny

from rpgrl.errors import UsageError
from rpgrl.trainer import loop, trackers
from rpgrl.trainer.checkpoint import checkpoint_name
from rpgrl.trainer.log import read_metrics


def expected_scalars(run) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} from metrics.jsonl and eval.jsonl: what every tracker must hold, each step once."""
    want: dict[str, dict[int, float]] = {}
    for row in read_metrics(run / "metrics.jsonl") + read_metrics(run / "eval.jsonl"):
        for k, v in trackers.scalars(row).items():
            assert row["step"] not in want.setdefault(k, {}), (k, row["step"])
            want[k][row["step"]] = v
    return want


def tensorboard_scalars(run) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def assert_same(got: dict[str, list[tuple[int, float]]], want: dict[str, dict[int, float]]) -> None:
    assert set(got) == set(want)
    for tag, events in got.items():
        steps = [s for s, _ in events]
        assert steps == sorted(set(steps)), (tag, steps)  # each step once, in order
        assert dict(events) == pytest.approx(want[tag], rel=1e-6, nan_ok=True), tag  # float32 in the event file


def test_tensorboard_scalars_equal_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    loop.train(tiny(("train.max_steps", "2"), ("train.report_to", "tensorboard"), ("train.device", "cpu")), run)
    got, want = tensorboard_scalars(run), expected_scalars(run)
    assert [s for s, _ in got["reward/mean"]] == [1, 2]
    assert [s for s, _ in got["eval/accuracy"]] == [0, 2]  # before RL and the final evaluation
    assert len(want) > 30
    assert_same(got, want)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    (config_event,) = acc.Tensors("config/text_summary")
    text = config_event.tensor_proto.string_val[0].decode()
    assert json.loads(text.strip("`\n")) == json.loads((run / "config.json").read_text())


def test_tensorboard_resume_after_a_crash_has_each_step_once(tmp_path):
    """A run that wrote steps 1-3 but whose last checkpoint is step 2 (a kill before the step-3 checkpoint): the
    resume purges step 3's events, writes 3 and 4 again, and the event files equal the final metrics.jsonl."""
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    base = [("train.report_to", "tensorboard"), ("train.checkpoint_every", "2"), ("train.keep_checkpoints", "5")]
    loop.train(tiny(("train.max_steps", "3"), *base), run)
    shutil.rmtree(run / "checkpoints" / checkpoint_name(3))  # as if killed before the step-3 checkpoint
    (run / "checkpoints" / "latest").write_text(checkpoint_name(2))
    before = {tag: dict(ev) for tag, ev in tensorboard_scalars(run).items()}
    assert sorted(before["reward/mean"]) == [1, 2, 3]

    loop.train(tiny(("train.max_steps", "4"), *base), run, resume=True)
    got = tensorboard_scalars(run)
    assert [s for s, _ in got["reward/mean"]] == [1, 2, 3, 4]
    assert [s for s, _ in got["eval/accuracy"]] == [0, 4]  # the first run's final evaluation at 3 is purged
    assert dict(got["reward/mean"])[2] == before["reward/mean"][2]  # steps up to the checkpoint are the old ones
    assert_same(got, expected_scalars(run))


# ---------- W&B, offline ----------


def wandb_records(path):
    """Every protobuf record of a W&B `.wandb` file: a LevelDB-style log (32 KiB blocks of checksummed chunks)
    after a 7-byte `:W&B` header, the format `wandb sync` reads."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf, out = 7, 32768, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])  # kind: 1 full, 2 first, 3 middle, 4 last
        buf = data[pos + 7 : pos + 7 + length] if kind in (1, 2) else buf + data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
    return out


def wandb_history(run) -> tuple[list[str], dict[str, list[tuple[int, float]]], list[dict]]:
    """(run ids, {key: [(step, value)]}, config updates) over every offline run file of the run directory."""
    files = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    ids, history, configs = [], {}, []
    for f in files:
        for r in wandb_records(f):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                ids.append(r.run.run_id)
                configs += [{u.key: json.loads(u.value_json)} for u in r.run.config.update if u.key != "_wandb"]
            elif kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
                for k, v in items.items():
                    if not k.startswith("_"):
                        history.setdefault(k, []).append((items["_step"], v))
    return ids, history, configs


def test_wandb_offline_files_equal_metrics_and_resume_the_same_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    run = tmp_path / "run"
    cfg = [("train.report_to", "wandb"), ("train.checkpoint_every", "1")]
    loop.train(tiny(("train.max_steps", "2"), *cfg), run)
    loop.train(tiny(("train.max_steps", "3"), *cfg), run, resume=True)
    ids, history, configs = wandb_history(run)
    run_id = (run / "wandb_run_id").read_text().strip()
    assert ids == [run_id, run_id]  # the resume continued the same run
    saved = json.loads((run / "config.json").read_text())
    saved["train"]["max_steps"] = 2  # the config is logged once, by the first run (the resume only raised max_steps)
    assert len(configs) == len(saved) and {k: v for c in configs for k, v in c.items()} == saved  # config once
    assert [s for s, _ in history["reward/mean"]] == [1, 2, 3]
    # the first run's final evaluation (step 2) stays in W&B, which cannot delete; eval.jsonl drops it on resume
    assert [s for s, _ in history["eval/accuracy"]] == [0, 2, 3]
    want = expected_scalars(run)
    assert dict(history["eval/accuracy"])[0] == want["eval/accuracy"][0]
    assert dict(history["eval/accuracy"])[3] == want["eval/accuracy"][3]
    for key, events in history.items():
        if key.startswith("eval/") or key == "perf/eval_s":
            continue
        steps = [s for s, _ in events]
        assert steps == sorted(set(steps)), key
        assert dict(events) == pytest.approx(want[key], rel=1e-12), key


# ---------- names and errors ----------


@pytest.mark.parametrize(
    "text,names",
    [("none", ()), ("tensorboard", ("tensorboard",)), (" wandb , tensorboard", ("wandb", "tensorboard")),
     ("none,tensorboard", ("tensorboard",)), ("TensorBoard,tensorboard", ("tensorboard",))],
)  # fmt: skip
def test_parse_report_to(text, names):
    assert trackers.parse_report_to(text) == names


def test_unknown_tracker_and_missing_extra_are_one_line_errors(tmp_path, monkeypatch, capsys):
    from rpgrl.cli import main

    assert main(["train", "--out", str(tmp_path / "r"), "--train.report_to", "tensorbord"]) == 2
    err = capsys.readouterr().err
    assert "unknown tracker 'tensorbord'" in err and err.count("\n") == 1
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(UsageError, match=r"pip install 'rpgrl\[wandb\]'"):
        trackers.make_tracker("tensorboard,wandb", tmp_path / "r2", {})
    assert not (tmp_path / "r2").exists()  # nothing created before the error


def test_null_tracker_and_scalars():
    row = {"step": 3, "final": 1, "reward/mean": 0.5, "optim/steps": 8, "note": "x", "flag": True}
    assert trackers.scalars(row) == {"reward/mean": 0.5, "optim/steps": 8.0}
    assert isinstance(trackers.make_tracker("none", "unused", {}), trackers.NullTracker)


def test_a_tracker_that_refuses_to_start_leaves_no_trace(tmp_path, monkeypatch):
    """W&B without a login raises at `wandb.init`: one line, and whatever the call created is taken back (a fresh
    run directory entirely; in an existing one, only the new entries)."""
    wandb = pytest.importorskip("wandb")

    def refuse(**kw):
        (tmp_path / kw["dir"] / "wandb").mkdir()  # wandb writes its folder before it checks the login
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", refuse)
    with pytest.raises(UsageError, match="train.report_to wandb: No API key configured"):
        trackers.make_tracker("tensorboard,wandb", tmp_path / "fresh", {})
    assert not (tmp_path / "fresh").exists()
    run = tmp_path / "resumed"
    run.mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(UsageError):
        trackers.make_tracker("wandb", run, {}, resume_step=1)
    assert [p.name for p in run.iterdir()] == ["metrics.jsonl"]


def test_tensorboard_holds_the_evaluation_before_rl_of_a_warm_start_saved_without_it(tmp_path, monkeypatch):
    """A reward failing in the evaluation before RL saves the warm start at step 0 without it; the resume evaluates
    again, but its tracker took step 0 as logged (rows at or before the checkpoint are skipped): TensorBoard never
    held eval/accuracy at step 0. It does, each step once, the config once."""
    pytest.importorskip("tensorboard")
    from test_loop import _FAIL, _eval_failing_at, _fails_when_on

    from rpgrl.rewards import REWARDS, register_reward

    if "test_fails_when_on" not in REWARDS:
        register_reward("test_fails_when_on")(_fails_when_on)
    cfg = tiny(("data.reward", "test_fails_when_on"), ("train.max_steps", "2"), ("sft.max_steps", "2"),
               ("sft.batch_size", "8"), ("train.report_to", "tensorboard"))  # fmt: skip
    run, real = tmp_path / "run", loop.run_eval
    _FAIL.update(on=False)
    monkeypatch.setattr(loop, "run_eval", _eval_failing_at(0))
    with pytest.raises(UsageError, match="in the evaluation before RL, after the warm start, which is saved"):
        loop.train(cfg, run)
    monkeypatch.setattr(loop, "run_eval", real)
    loop.train(cfg, run, resume=True)
    got = tensorboard_scalars(run)
    assert [s for s, _ in got["eval/accuracy"]] == [0, 2]
    assert_same(got, expected_scalars(run))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    assert len(acc.Tensors("config/text_summary")) == 1


def test_a_benchmark_named_in_another_encoding_reaches_tensorboard(tmp_path):
    """eval/<benchmark>/... of a benchmark file named in Latin-1 (a surrogate escape in Python) stopped a run at its
    first evaluation with a UnicodeEncodeError traceback from TensorBoard's protobuf, every resume again: logged,
    its byte escaped as the evaluation's table shows it."""
    pytest.importorskip("tensorboard")
    import os

    name = os.fsdecode(b"bench\xe9")
    tracker = trackers.TensorBoardTracker(tmp_path, {}, None)
    tracker.log({"step": 0, f"eval/{name}/mean@2": 0.5, "eval/accuracy": 1.0})
    tracker.close()
    assert tensorboard_scalars(tmp_path)["eval/bench\\udce9/mean@2"] == [(0, 0.5)]
