"""Checkpoints are atomic: a crash at any point of a write leaves the previous checkpoint loadable."""

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from rpgrl.trainer import checkpoint as ck


def _state(step):
    return {"step": step, "w": torch.full((3,), float(step))}


def test_save_load_latest_and_prune(tmp_path):
    for step in (1, 2, 3):
        ck.save_checkpoint(tmp_path, step, _state(step), keep=2)
    latest = ck.latest_checkpoint(tmp_path)
    assert latest.name == "step-000003"
    assert ck.load_checkpoint(latest)["step"] == 3
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000002", "step-000003"]
    assert (tmp_path / "latest").read_text() == "step-000003"
    assert ck.latest_checkpoint(tmp_path / "missing") is None


def test_crash_while_writing_state_keeps_previous(tmp_path, monkeypatch):
    ck.save_checkpoint(tmp_path, 1, _state(1))
    real_save = torch.save

    def torn_save(obj, path, *a, **k):  # write half a file, then die (as a kill mid-write would)
        real_save(obj, path, *a, **k)
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) // 2])
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(ck.torch, "save", torn_save)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(tmp_path, 2, _state(2))
    monkeypatch.setattr(ck.torch, "save", real_save)
    assert (tmp_path / ".tmp-step-000002").exists()  # the torn write is there ...
    latest = ck.latest_checkpoint(tmp_path)  # ... but never loaded
    assert latest.name == "step-000001" and ck.load_checkpoint(latest)["step"] == 1
    ck.save_checkpoint(tmp_path, 2, _state(2))  # the next save cleans up
    assert not list(tmp_path.glob(".tmp-*"))
    assert ck.load_checkpoint(ck.latest_checkpoint(tmp_path))["step"] == 2


def test_crash_before_pointer_update_and_broken_pointer(tmp_path, monkeypatch):
    ck.save_checkpoint(tmp_path, 1, _state(1))

    def die(*a, **k):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(ck, "write_text_atomic", die)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(tmp_path, 2, _state(2))
    monkeypatch.undo()
    # step 2 is complete on disk, the pointer still names step 1: either is a whole checkpoint; the pointer wins
    assert ck.latest_checkpoint(tmp_path).name == "step-000001"
    (tmp_path / "latest").write_text("step-000099")  # pointer to nothing: fall back to the newest complete one
    assert ck.latest_checkpoint(tmp_path).name == "step-000002"
    (tmp_path / "step-000002" / "meta.json").unlink()  # incomplete directories are never chosen
    assert ck.latest_checkpoint(tmp_path).name == "step-000001"


def test_write_text_atomic(tmp_path):
    p = tmp_path / "f.txt"
    ck.write_text_atomic(p, "a")
    ck.write_text_atomic(p, "b")
    assert p.read_text() == "b" and [x.name for x in tmp_path.iterdir()] == ["f.txt"]


def test_rng_round_trip():
    gen = torch.Generator().manual_seed(5)
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = ck.rng_state(gen)
    first = (random.random(), np.random.rand(), torch.rand(2), torch.rand(2, generator=gen))
    ck.set_rng_state(state, gen)
    again = (random.random(), np.random.rand(), torch.rand(2), torch.rand(2, generator=gen))
    assert first[0] == again[0] and first[1] == again[1]
    assert torch.equal(first[2], again[2]) and torch.equal(first[3], again[3])


def test_kill_during_pruning_leaves_nothing_behind(tmp_path, monkeypatch):
    for step in (1, 2):
        ck.save_checkpoint(tmp_path, step, _state(step), keep=2)
    real_rmtree = ck.shutil.rmtree

    def torn_rmtree(path, *a, **k):  # delete one file of the pruned checkpoint, then die
        if any(path.glob("state.pt")):
            (path / "state.pt").unlink()
            raise KeyboardInterrupt("killed")
        real_rmtree(path, *a, **k)

    monkeypatch.setattr(ck.shutil, "rmtree", torn_rmtree)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(tmp_path, 3, _state(3), keep=2)  # prunes step 1
    monkeypatch.undo()
    assert ck.latest_checkpoint(tmp_path).name == "step-000003"
    assert not (tmp_path / "step-000001").exists()  # out of the step-* namespace before the delete began
    (tmp_path / "step-000000").mkdir()  # what a kill mid-delete left behind before this fix: never removed
    ck.save_checkpoint(tmp_path, 4, _state(4), keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-000003", "step-000004"]


def test_save_drops_checkpoints_of_an_abandoned_timeline(tmp_path):
    for step in (10, 20, 30):
        ck.save_checkpoint(tmp_path, step, _state(step), keep=3)
    ck.save_checkpoint(tmp_path, 15, _state(15), keep=2)  # a resume from step 10 (20 and 30 unreadable, say)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000010", "step-000015"]


def _random(p):
    p.write_bytes(random.Random(0).randbytes(5000))


def _truncated(p):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _empty(p):
    p.write_bytes(b"")


@pytest.mark.parametrize("damage", [_random, _truncated, _empty], ids=["random", "truncated", "empty"])
def test_load_newest_falls_back_past_a_corrupt_checkpoint(tmp_path, damage):
    for step in (1, 2, 3):
        ck.save_checkpoint(tmp_path, step, _state(step), keep=3)
    damage(tmp_path / "step-000003" / "state.pt")
    path, state, skipped = ck.load_newest(tmp_path)
    assert path.name == "step-000002" and state["step"] == 2
    assert len(skipped) == 1 and skipped[0].startswith("step-000003 (") and "\n" not in skipped[0]
    assert "state.pt does not load (truncated or corrupt): " in skipped[0]  # was torch's reason alone ("[Errno 22]")
    damage(tmp_path / "step-000002" / "state.pt")
    damage(tmp_path / "step-000001" / "state.pt")
    path, state, skipped = ck.load_newest(tmp_path)
    assert path is None and state is None and len(skipped) == 3


def test_resave_never_leaves_a_step_without_a_complete_copy(tmp_path, monkeypatch):
    """Re-saving a step sets the old copy aside before the new one is renamed in; a kill between the two renames
    leaves a complete `.tmp-` write, which the next save or resume puts in place instead of deleting."""
    import os

    d = tmp_path / "ckpt"
    ck.save_checkpoint(d, 5, {"v": 1})
    real = os.replace
    calls = []

    def dies_on_second_rename(src, dst):
        calls.append((Path(src).name, Path(dst).name))
        if len(calls) == 2:  # step-5 -> .del-step-5 done; .tmp-step-5 -> step-5 is where the kill lands
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(ck.os, "replace", dies_on_second_rename)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(d, 5, {"v": 2})
    monkeypatch.setattr(ck.os, "replace", real)
    assert calls[0][1].startswith(".del-") and not (d / ck.checkpoint_name(5)).exists()
    ck.remove_leftovers(d)
    assert torch.load(d / ck.checkpoint_name(5) / "state.pt", weights_only=False) == {"v": 2}
    assert sorted(p.name for p in d.iterdir() if p.is_dir()) == [ck.checkpoint_name(5)]
    ck.save_checkpoint(d, 5, {"v": 3})  # an ordinary re-save replaces the copy
    assert torch.load(d / ck.checkpoint_name(5) / "state.pt", weights_only=False) == {"v": 3}


def test_a_complete_write_killed_between_its_renames_is_a_checkpoint_until_placed(tmp_path):
    """`.tmp-step-X` with both files and no `step-X` (a kill between the rename and `latest`'s): readers see it, so
    nothing decides the run has no checkpoint (a resume would start it over and drop its metrics)."""
    ck.save_checkpoint(tmp_path, 1, _state(1))
    ck.save_checkpoint(tmp_path, 2, _state(2))
    (tmp_path / "step-000002").rename(tmp_path / ".tmp-step-000002")
    (tmp_path / "latest").unlink()
    assert ck.latest_checkpoint(tmp_path) == tmp_path / ".tmp-step-000002"
    d, state, skipped = ck.load_newest(tmp_path)
    assert d == tmp_path / ".tmp-step-000002" and state["step"] == 2 and skipped == []
    ck.remove_leftovers(tmp_path)  # what the next save or resume does: put in place
    assert ck.latest_checkpoint(tmp_path) == tmp_path / "step-000002"
    # an incomplete write is not one
    (tmp_path / "step-000002").rename(tmp_path / ".tmp-step-000002")
    (tmp_path / ".tmp-step-000002" / "meta.json").unlink()
    assert ck.latest_checkpoint(tmp_path) == tmp_path / "step-000001"
