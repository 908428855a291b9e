"""`rpgrl train [PRESET] [--out DIR] [--max-steps N] [--seed S] [--resume] [--section.field VALUE ...]`.

A small parser of our own (tyro is not a dependency) so every error is one line naming the problem. PRESET is a
name from `rpgrl.presets` (none = the embedded default). `--max-steps` and `--seed` are shortcuts for
`--train.max_steps` and `--train.seed`. With `--resume`, the base config is the one saved in DIR; overrides apply
on top, and a PRESET, if given, must describe the same run.

Exit codes: 0 done; 2 bad input (one line on stderr, nothing in DIR changed); 130 / 143 stopped by SIGINT / SIGTERM
after the current step and a checkpoint (one line on stderr naming the `--resume` command; a second signal stops at
once), or before the run started (config checks, imports: nothing written). A signal after the last checkpoint,
while the model, curves and summary are written, lets the run finish (0).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import sys
import time
from pathlib import Path

from rpgrl.config import Config, apply_overrides, check, config_from_dict, help_text
from rpgrl.errors import Diverged, TermAsInterrupt, UsageError, interrupt_signal, one_line
from rpgrl.presets import get_preset, preset_table
from rpgrl.trainer.rundir import Interrupted, StopSignals, check_run_dir

# A config.json written before data.truncation existed: its run cut long prompts from the left
BEFORE_TRUNCATION = dataclasses.replace(Config(), data=dataclasses.replace(Config().data, truncation="left"))
# Fields an older config.json lacks: a resume naming its preset does not count them as differences (others it lacks
# still do: a hand-deleted field would otherwise take the plain default silently)
ADDED_SINCE = frozenset({"data.truncation"})
USAGE = "usage: rpgrl train [PRESET] [--out DIR] [--max-steps N] [--seed S] [--resume] [--section.field VALUE ...]"
SHORTCUTS = {"max-steps": "train.max_steps", "max_steps": "train.max_steps", "seed": "train.seed"}


@dataclasses.dataclass
class Args:
    preset: str | None = None
    out: str | None = None
    resume: bool = False
    help: bool = False
    overrides: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def parse_args(argv: list[str]) -> Args:
    """Split argv into preset, run options and `(key, value)` config overrides; UsageError on malformed input."""
    args = Args()
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok in ("-h", "--help"):
            args.help = True
            continue
        if tok == "--resume":
            args.resume = True
            continue
        if not tok.startswith("--"):
            if tok.startswith("-") or args.preset is not None:
                raise UsageError(f"unexpected argument {tok!r}; {USAGE}")
            args.preset = tok
            continue
        key, eq, value = tok[2:].partition("=")
        if key != "out" and key not in SHORTCUTS and "." not in key:  # before its value: `--foo` alone is unknown
            raise UsageError(f"unknown option --{key}; config keys look like --section.field (see rpgrl train --help)")
        if not eq:
            if i >= len(argv) or argv[i].startswith("--"):  # values never start with "--"; "-1" is a value
                raise UsageError(f"--{key} needs a value")
            value = argv[i]
            i += 1
        if key == "out":
            if not value.strip():
                raise UsageError("--out needs a folder, got an empty value")
            args.out = value
        else:
            args.overrides.append((SHORTCUTS.get(key, key), value))  # a key given again: the last value wins
    return args


def resolve_config(args: Args) -> tuple[Config, str, Config]:
    """The final config, a name for the run and the config the flags were applied to (a preset, or the resumed
    run's saved config: options it holds are not refused as unused), validated (UsageError otherwise)."""
    if not args.resume:
        name = args.preset or "default"
        preset = get_preset(name)
        return check(apply_overrides(preset, args.overrides), base=preset), name, preset
    if args.out is None:
        raise UsageError("--resume needs --out DIR (the run to continue)")
    saved_file = Path(args.out) / "config.json"
    if not saved_file.is_file():
        raise UsageError(f"--resume: no run to resume in {args.out} (no config.json: a run stopped in its first "
                             "seconds saved nothing): run its command again without --resume")  # fmt: skip
    try:
        saved_dict = json.loads(saved_file.read_text())
        saved = config_from_dict(saved_dict, base=BEFORE_TRUNCATION)
    except json.JSONDecodeError as e:
        raise UsageError(f"--resume: {saved_file} is not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"--resume: {saved_file} is not UTF-8 text (byte {e.object[e.start]:#04x})") from None
    except OSError as e:  # unreadable (permissions), or a read error of the file system
        raise UsageError(f"--resume: cannot read {saved_file}: {e.strerror or e}") from None
    except UsageError as e:  # an unknown key or a wrong type in the file: named, as the user typed no such flag
        raise UsageError(f"--resume: {saved_file}: {e}") from None
    cfg = apply_overrides(saved, args.overrides)
    if args.preset is not None:
        fresh = apply_overrides(get_preset(args.preset), args.overrides)
        recorded = {f"{sec}.{k}" for sec, keys in saved_dict.items() for k in keys}  # (a mapping of mappings: checked)
        differ = [k for k in _differences(fresh, cfg) if k in recorded or k not in ADDED_SINCE]
        if differ:
            raise UsageError(
                f"--resume: preset {args.preset!r} differs from the run saved in {args.out} in "
                f"{', '.join(differ[:5])}{' ...' if len(differ) > 5 else ''}; drop the preset to use the saved config"
            )
    return check(cfg, base=saved), args.preset or "resumed", saved


def _differences(a: Config, b: Config) -> list[str]:
    out = []
    for f in dataclasses.fields(a):
        sa, sb = getattr(a, f.name), getattr(b, f.name)
        out += [f"{f.name}.{g.name}" for g in dataclasses.fields(sa) if getattr(sa, g.name) != getattr(sb, g.name)]
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of `rpgrl train`; returns the exit code (2 with one line on stderr for bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = claimed = None
    try:
        with TermAsInterrupt():  # SIGTERM while the config is checked and torch loads, or a second one in the run
            prepared = _prepare(argv)
            if prepared is None:
                return 0
            cfg, out, resume, train, claimed = prepared
            with StopSignals() as stop:
                train(cfg, out, resume=resume, stop=stop)
    except UsageError as e:
        print(f"rpgrl train: error: {one_line(e)}", file=sys.stderr)
        return 2
    except Diverged as e:  # nothing of the failing step was saved
        print(f"rpgrl train: error: {one_line(e)}; {out} keeps what was saved before", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"rpgrl train: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:  # before the run started, or a second Ctrl-C during it (stopped at once)
        sig = interrupt_signal(e)
        print(f"rpgrl train: {_stopped_now(sig.name, out)}", file=sys.stderr)
        return 128 + sig
    finally:
        if claimed:  # the default run directory, created to claim its name: left only if the run wrote in it
            with contextlib.suppress(OSError):
                Path(out).rmdir()  # (fails if not empty)
                Path(out).parent.rmdir()  # runs/, if no other run is there
    return 0


def _prepare(argv: list[str]):
    """Parse and check the command, then load the trainer: (config, run directory, resume, train), or None after
    printing --help. Reads only: a UsageError or a signal here leaves every file as it was."""
    args = parse_args(argv)
    if args.help:
        base = get_preset(args.preset) if args.preset is not None else Config()  # an unknown name: one line, exit 2
        print(f"{USAGE}\n\npresets:\n{preset_table()}\n\noptions:\n"
              "  --out DIR          run directory (default: runs/PRESET-TIMESTAMP-sSEED)\n"
              "  --max-steps N      total RL steps (= --train.max_steps)\n"
              "  --seed S           seed (= --train.seed)\n"
              "  --resume           continue the run in DIR up to --max-steps\n\n"
              f"config (defaults of {args.preset or 'default'}):\n{help_text(base)}")  # fmt: skip
        return None
    if args.out is not None:
        check_run_dir(Path(args.out), args.resume)  # before reading its config or loading anything
    cfg, name, base = resolve_config(args)
    if args.resume:
        _say_changes(base, cfg)
    from rpgrl.trainer.loop import train  # (imports first: a signal while they load leaves no directory behind)

    out = args.out or default_out(name, cfg.train.seed)
    return cfg, out, args.resume, functools.partial(train, base=base), args.out is None


def _say_changes(saved: Config, cfg: Config) -> None:
    """One line naming the settings a --resume changes besides train.max_steps: config.json is written again with
    them, so the run directory no longer says that the steps before ran with the saved ones."""
    changed = [k for k in _differences(saved, cfg) if k != "train.max_steps"]
    if changed:

        def value(c: Config, key: str):
            section, field = key.split(".")
            return getattr(getattr(c, section), field)

        parts = ", ".join(f"{k} {value(saved, k)} -> {value(cfg, k)}" for k in changed)
        print(f"--resume: changed from the saved run: {parts} (config.json now holds the new values; the steps "
              "before ran with the saved ones, kept in config_changes.jsonl)", flush=True)  # fmt: skip


def default_out(name: str, seed: int) -> str:
    """runs/PRESET-TIMESTAMP-sSEED, with -2, -3, ... if taken, claimed by creating it (one process wins each name):
    runs launched together in one second shared one directory, and all but one failed (a review's). `main` removes
    it again if the run writes nothing there."""
    stem = f"runs/{name}-{time.strftime('%Y%m%d-%H%M%S')}-s{seed}"
    Path(stem).parent.mkdir(exist_ok=True)  # runs/ (removed with the run's if both stay empty)
    out, n = stem, 1
    while True:
        try:
            Path(out).mkdir()
            return out
        except FileExistsError:
            n += 1
            out = f"{stem}-{n}"


def _stopped_now(signal_name: str, out: str | None) -> str:
    """The line for a run stopped at once: before it started (`out` None), or by a second signal during it."""
    if out is None:
        return f"stopped by {signal_name} before the run started; nothing was written"
    if (Path(out) / "config.json").is_file():
        return f"stopped by {signal_name} at once; continue with: rpgrl train --out {out} --resume"
    return f"stopped by {signal_name} at once, before the run saved anything; run the command again"
