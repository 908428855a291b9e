"""Atomic checkpoints: a kill at any moment never leaves a checkpoint that resume would load half-written.

Layout in the run directory:

    checkpoints/step-000020/state.pt    everything `train` needs to continue (weights, optimizer, RNG, data order)
    checkpoints/step-000020/meta.json   {"step": 20}, written last inside the directory
    checkpoints/latest                  the name of the newest complete checkpoint, replaced last

A checkpoint is first written to `checkpoints/.tmp-step-000020/`, every file is fsynced, the directory is renamed to
its final name (atomic on POSIX), and only then is `latest` replaced (write to a temporary file, fsync,
`os.replace`). Readers trust only a directory that `latest` names, or failing that the newest `step-*` directory
holding `meta.json`; `.tmp-*` leftovers of a crashed write are ignored and removed by the next save.

Resuming (`load_newest`) tries the checkpoint `latest` names, then the other complete ones from the newest down,
and takes the first whose `state.pt` loads: a corrupt newest checkpoint (bit rot, a disk that lied about fsync)
costs the steps since the one before it, not the run. Pruning renames a directory to `.del-step-*` before deleting
it, so a kill mid-delete leaves nothing that looks like a checkpoint; the next save removes `.tmp-*` and `.del-*`
leftovers (as does a resume), `step-*` directories without both files, and checkpoints newer than the step it saves
(those belong to the timeline a resume abandoned: it cut the metrics back to an older step).

`crash_point(name)` marks the moments a kill is most harmful; the kill-and-resume test sets `RPGRL_CRASH_AT` to
make the process SIGKILL itself there.

The RNG helpers capture and restore python, numpy and torch global states plus a sampling `torch.Generator`, so a
resumed run draws the same random numbers as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rpgrl.errors import first_line

LATEST = "latest"
_PREFIX = "step-"


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (temporary file in the same directory, fsync, os.replace)."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically (temporary file in the same directory, fsync, os.replace); on failure
    `path` is as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:  # a full disk mid-write leaves `path` as it was and no temporary file
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def checkpoint_name(step: int) -> str:
    return f"{_PREFIX}{step:06d}"


def save_checkpoint(ckpt_dir: Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write `state` (anything `torch.save` takes) as the checkpoint of `step`; keep the newest `keep`."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    remove_leftovers(ckpt_dir)
    name = checkpoint_name(step)
    tmp, final = ckpt_dir / f".tmp-{name}", ckpt_dir / name
    tmp.mkdir()
    torch.save(state, tmp / "state.pt")
    crash_point("checkpoint-write")
    _fsync_file(tmp / "state.pt")
    (tmp / "meta.json").write_text(json.dumps({"step": step}))
    _fsync_file(tmp / "meta.json")
    _fsync_dir(tmp)
    trash = final.with_name(f".del-{name}")
    if final.exists():  # re-saving a step: set the old copy aside, never delete it before the new one is in place
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(final, trash)
    os.replace(tmp, final)
    _fsync_dir(ckpt_dir)
    shutil.rmtree(trash, ignore_errors=True)
    crash_point("checkpoint-rename")
    write_text_atomic(ckpt_dir / LATEST, name)
    found = _complete(ckpt_dir)  # no write is pending here: remove_leftovers placed them above
    steps = sorted(found)
    for old in [s for s in steps if s > step] + [s for s in steps if s <= step][:-keep]:
        _delete(found[old])
    return final


def _delete(d: Path) -> None:
    """Remove a checkpoint directory: first renamed out of the `step-*` namespace (atomic), then deleted."""
    trash = d.with_name(f".del-{d.name}")
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(d, trash)
    crash_point("checkpoint-prune")
    shutil.rmtree(trash, ignore_errors=True)


def remove_leftovers(ckpt_dir: Path) -> None:
    """Remove crashed writes (`.tmp-*`), interrupted deletes (`.del-*`) and `step-*` directories missing a file.
    A complete write (`.tmp-X` with its meta.json, written last) whose `X` is missing was killed between its two
    renames: it is put in place instead."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return
    for d in ckpt_dir.glob(f".tmp-{_PREFIX}*"):
        final = ckpt_dir / d.name[len(".tmp-") :]
        if not final.exists() and (d / "meta.json").is_file() and (d / "state.pt").is_file():
            os.replace(d, final)
    for d in ckpt_dir.iterdir():
        complete = (d / "meta.json").is_file() and (d / "state.pt").is_file()
        if d.name.startswith((".tmp-", ".del-")) or (d.name.startswith(_PREFIX) and not complete):
            if d.is_dir():
                shutil.rmtree(d, ignore_errors=True)
            else:
                d.unlink(missing_ok=True)


def _complete(ckpt_dir: Path) -> dict[int, Path]:
    """{step: directory} of the complete checkpoints: `step-*` holding both files, and a complete write killed
    between its two renames (`.tmp-step-X` with both files and no `step-X`: the next save or resume puts it in
    place, and until then it is read where it is)."""
    found = {}
    for d in [*ckpt_dir.glob(f"{_PREFIX}*"), *ckpt_dir.glob(f".tmp-{_PREFIX}*")]:
        pending = d.name.startswith(".tmp-")
        if pending and (ckpt_dir / d.name[len(".tmp-") :]).exists():
            continue
        if (d / "meta.json").is_file() and (d / "state.pt").is_file():
            try:
                found[int(json.loads((d / "meta.json").read_text())["step"])] = d
            except (ValueError, KeyError, TypeError, json.JSONDecodeError):
                continue
    return found


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return None
    pointer = ckpt_dir / LATEST
    try:  # a pointer that does not read or name a directory here (a broken disk, a hand edit) is passed over
        name = pointer.read_text(encoding="utf-8").strip() if pointer.is_file() else ""
        d = ckpt_dir / name
        if name and d.parent == ckpt_dir and (d / "meta.json").is_file() and (d / "state.pt").is_file():
            return d
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    found = _complete(ckpt_dir)
    return found[max(found)] if found else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The state saved by `save_checkpoint` (loaded on CPU)."""
    return torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)


def load_newest(ckpt_dir: Path) -> tuple[Path | None, dict[str, Any] | None, list[str]]:
    """(directory, state, skipped) of the newest checkpoint whose state loads: the one `latest` names first, then
    the complete ones from the newest down. `skipped` describes each unreadable one tried before it, in one line
    each; (None, None, skipped) when none loads."""
    ckpt_dir = Path(ckpt_dir)
    first = latest_checkpoint(ckpt_dir)
    order = [] if first is None else [first]
    found = _complete(ckpt_dir)
    order += [found[s] for s in sorted(found, reverse=True)]
    skipped = []
    for d in dict.fromkeys(order):  # in order, without repeats
        try:
            state = load_checkpoint(d)
            if not isinstance(state, dict) or "step" not in state:
                raise ValueError("not a checkpoint state")
        except Exception as e:  # a corrupt pickle or zip can raise nearly anything ("[Errno 22] Invalid argument")
            what = "cannot be read" if isinstance(e, PermissionError) else "does not load (truncated or corrupt)"
            skipped.append(f"{d.name} (state.pt {what}: {first_line(e)[:100]})")
            continue
        return d, state, skipped
    return None, None, skipped


_CRASHES: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Test hook: with RPGRL_CRASH_AT=name or name:n, SIGKILL this process the n-th time (default: the first)
    execution passes `name`. A no-op without the variable."""
    want = os.environ.get("RPGRL_CRASH_AT")
    if not want:
        return
    target, _, nth = want.partition(":")
    if target == name:
        _CRASHES[name] = _CRASHES.get(name, 0) + 1
        if _CRASHES[name] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)


def rng_state(generator: torch.Generator | None) -> dict[str, Any]:
    """Python, numpy and torch global RNG states, plus `generator`'s."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "generator": None if generator is None else generator.get_state(),
    }


def set_rng_state(state: dict[str, Any], generator: torch.Generator | None) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if generator is not None and state["generator"] is not None:
        generator.set_state(state["generator"])
