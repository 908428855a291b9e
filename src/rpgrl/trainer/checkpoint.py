"""Atomic checkpoints: a kill at any moment never leaves a checkpoint that resume would load half-written.

Layout in the run directory:

    checkpoints/step-000020/state.pt    everything `train` needs to continue (weights, optimizer, RNG, data order)
    checkpoints/step-000020/meta.json   {"step": 20}, written last inside the directory
    checkpoints/latest                  the name of the newest complete checkpoint, replaced last

A checkpoint is first written to `checkpoints/.tmp-step-000020/`, every file is fsynced, the directory is renamed to
its final name (atomic on POSIX), and only then is `latest` replaced (write to a temporary file, fsync,
`os.replace`). Readers trust only a directory that `latest` names, or failing that the newest `step-*` directory
holding `meta.json`; `.tmp-*` leftovers of a crashed write are ignored and removed by the next save.

The RNG helpers capture and restore python, numpy and torch global states plus a sampling `torch.Generator`, so a
resumed run draws the same random numbers as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

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
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def checkpoint_name(step: int) -> str:
    return f"{_PREFIX}{step:06d}"


def save_checkpoint(ckpt_dir: Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write `state` (anything `torch.save` takes) as the checkpoint of `step`; keep the newest `keep`."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    for leftover in ckpt_dir.glob(".tmp-*"):  # a crashed earlier write
        shutil.rmtree(leftover, ignore_errors=True)
    name = checkpoint_name(step)
    tmp, final = ckpt_dir / f".tmp-{name}", ckpt_dir / name
    tmp.mkdir()
    torch.save(state, tmp / "state.pt")
    _fsync_file(tmp / "state.pt")
    (tmp / "meta.json").write_text(json.dumps({"step": step}))
    _fsync_file(tmp / "meta.json")
    _fsync_dir(tmp)
    if final.exists():  # re-saving a step (e.g. the final checkpoint of a resumed, already finished run)
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(ckpt_dir)
    write_text_atomic(ckpt_dir / LATEST, name)
    for old in sorted(_complete(ckpt_dir))[:-keep]:
        shutil.rmtree(ckpt_dir / checkpoint_name(old), ignore_errors=True)
    return final


def _complete(ckpt_dir: Path) -> list[int]:
    steps = []
    for d in ckpt_dir.glob(f"{_PREFIX}*"):
        if (d / "meta.json").is_file() and (d / "state.pt").is_file():
            try:
                steps.append(int(json.loads((d / "meta.json").read_text())["step"]))
            except (ValueError, KeyError, json.JSONDecodeError):
                continue
    return steps


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return None
    pointer = ckpt_dir / LATEST
    if pointer.is_file():
        d = ckpt_dir / pointer.read_text().strip()
        if (d / "meta.json").is_file() and (d / "state.pt").is_file():
            return d
    steps = _complete(ckpt_dir)
    return ckpt_dir / checkpoint_name(max(steps)) if steps else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The state saved by `save_checkpoint` (loaded on CPU)."""
    return torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)


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
