"""What a stopped `rpgrl eval --out DIR` keeps: the generation chunks it sampled, so the same command continues.

`DIR/partial.jsonl`: the first line holds the settings the draws depend on (`Journal.settings` there), each further
line one chunk of `batch_size` problems x k samples: a digest of its prompts, its texts and the sampling generator's
state after it. A rerun into the same folder with the same settings replays the chunks in order and restores the
generator's state after the last one, so its samples (and report) equal an uninterrupted run's; other settings are
refused. Each chunk is appended and fsynced as one write; a line cut by a kill or a full disk is dropped when the
journal is read. The evaluation removes the file once its report (metrics.json) is written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rpgrl.errors import UsageError

NAME = "partial.jsonl"


def _plain(value: Any) -> Any:
    """`value` as JSON reads it back (tuples become lists), so settings compare equal across runs."""
    return json.loads(json.dumps(value))


def files_fingerprint(folder: str | Path) -> list[list]:
    """[name, size, mtime in ns] of each file directly in `folder`, sorted: changes when the weights are rewritten."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    own = {NAME, "metrics.json", "samples.jsonl", "passk_majk.png"}  # an evaluation's own files (--out = the model)
    return sorted([p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in folder.iterdir()
                  if p.is_file() and p.name not in own and not p.name.startswith("."))  # fmt: skip


def digest(prompts: Sequence[Sequence[int]], n: int) -> str:
    """A chunk's identity: its prompts' token ids and the samples per prompt."""
    return hashlib.sha256(json.dumps([[list(map(int, p)) for p in prompts], n]).encode()).hexdigest()[:16]


def _is_chunk(row: Any) -> bool:
    """Whether a journal line holds what `Journal.record` writes: a digest, texts and a base64 generator state."""
    if not (isinstance(row, dict) and isinstance(row.get("digest"), str) and isinstance(row.get("rng"), str)):
        return False
    if not (isinstance(row.get("texts"), list) and all(isinstance(t, str) for t in row["texts"])):
        return False
    try:
        base64.b64decode(row["rng"], validate=True)
    except ValueError:  # binascii.Error
        return False
    return True


class Journal:
    """The chunks sampled so far in `path` (nothing is written until the first chunk is recorded)."""

    def __init__(self, path: str | Path, settings: dict[str, Any]):
        self.path, self.settings = Path(path), _plain(settings)
        self.chunks: list[dict[str, Any]] = []
        self.position = 0  # chunks replayed or recorded by this process
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        raw = self.path.read_bytes()
        lines, good = raw.split(b"\n"), []
        for line in lines[:-1]:  # the text after the last newline is a cut line (or empty)
            try:
                good.append(json.loads(line))
            except ValueError:
                break
        if not good and not any(lines[:-1]):  # empty, or its first line cut (a full disk, a kill): nothing kept
            self.path.unlink()
            return
        if not good or not isinstance(good[0], dict) or not isinstance(good[0].get("settings"), dict):
            raise UsageError(f"{self.path} is not an rpgrl eval journal: pass a new --out folder, or delete it")
        bad = next((i for i, x in enumerate(good[1:], 2) if not _is_chunk(x)), None)
        if bad is not None:  # not what `record` writes (an edit, another program): replayed, it was a traceback
            raise UsageError(f"{self.path}: line {bad} is not a chunk an evaluation wrote: pass a new --out folder, "
                             "or delete the file")  # fmt: skip
        theirs = good[0]["settings"]
        if theirs != self.settings:
            keys = sorted(set(theirs) | set(self.settings), key=str)
            other_model = theirs.get("model") != self.settings.get("model")  # then its files differ too
            diff = [f"{k} {theirs.get(k)!r} there, {self.settings.get(k)!r} here" if k != "model_files" else
                    "the model folder's files were rewritten since" for k in keys
                    if theirs.get(k) != self.settings.get(k) and not (k == "model_files" and other_model)]  # fmt: skip
            raise UsageError(f"--out {self.path.parent} holds an unfinished evaluation with other settings "
                             f"({'; '.join(diff)}): run its command to continue it, or pass a new folder")  # fmt: skip
        self.chunks = good[1:]
        if len(good) < len(lines) - 1 or lines[-1]:  # drop the cut tail before anything is appended after it
            from rpgrl.trainer.checkpoint import write_text_atomic

            write_text_atomic(self.path, "".join(json.dumps(x) + "\n" for x in good))

    def replay(self, key: str, count: int | None = None) -> tuple[list[str], bytes] | None:
        """The next chunk's texts and the generator state after it, if it was sampled before; None if not. A
        recorded chunk with other prompts (the data changed under the same settings), or with other than `count`
        texts, is a UsageError."""
        if self.position >= len(self.chunks):
            return None
        chunk = self.chunks[self.position]
        if chunk.get("digest") != key:
            raise UsageError(f"{self.path}: chunk {self.position + 1} was sampled from other prompts (a data file "
                             "changed since): pass a new --out folder")  # fmt: skip
        if count is not None and len(chunk["texts"]) != count:  # an edit: its responses would shift to other problems
            self.not_written(self.position, f"it holds {len(chunk['texts'])} responses, not {count}")
        self.position += 1
        return chunk["texts"], base64.b64decode(chunk["rng"])

    def not_written(self, index: int, why: str) -> None:
        """UsageError: chunk `index` (0-based) cannot be replayed, for `why`."""
        raise UsageError(f"{self.path}: line {index + 2} cannot be continued from ({why}): pass a "
                         "new --out folder, or delete the file")  # fmt: skip

    def record(self, key: str, texts: Sequence[str], rng_state: bytes) -> None:
        """Append one chunk (one write, fsynced; the settings line first when the file is new)."""
        row = {"digest": key, "texts": list(texts), "rng": base64.b64encode(rng_state).decode()}
        text = json.dumps(row) + "\n"
        if not self.path.exists():
            text = json.dumps({"settings": self.settings}) + "\n" + text
        with open(self.path, "a") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        self.chunks.append(row)
        self.position += 1

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def kept(out: Path) -> str | None:
    """What a stopped evaluation into `out` keeps, as a clause for its stop line; None when it kept nothing."""
    path = Path(out) / NAME
    try:
        chunks = path.read_bytes().count(b"\n") - 1
    except OSError:
        return None
    if chunks < 1:
        return None
    return f"{chunks} sampled chunk{'s' if chunks > 1 else ''} kept in {path}: the same command continues from there"
