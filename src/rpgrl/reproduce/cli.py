"""Reproduce the paper's claims at small scale: seeded arms on the embedded task, paired t intervals, a verdict each.

    rpgrl reproduce CLAIM... [--seeds N] [--quick] [--out DIR] [--report FILE] [--jobs J] [--no-run]

Runs what is missing of the named claims (or `all`), then writes DIR/results.json and the Markdown report with one
PNG per claim beside it (FILE's folder, in a subfolder named after FILE). An existing FILE is rewritten only when it
is an earlier report (its first line is REPORT_TITLE), and a plot only beside one. The committed `docs/results.md`
is `rpgrl reproduce all --report docs/results.md` on the full scale. Runs hold DIR's RunLock (another suite with runs
to do is refused); the results and the report are written under DIR's ResultsLock (another suite, `--no-run` too,
waits for that write: seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from rpgrl.errors import ArgumentParser, UsageError, dir_problem
from rpgrl.reproduce.claims import CLAIMS, FULL, QUICK, Scale, base_config, warm_start_config
from rpgrl.reproduce.report import (
    EQUAL_SEEDS,
    add_multiplicity,
    claim_markdown,
    claim_result,
    config_changes,
    plot_claim,
)
from rpgrl.reproduce.runner import FULL_DISK_ERRNOS, Job, config_key, read_record, run_all, run_dir, run_environment
from rpgrl.reproduce.stats import MIN_SEEDS

MAX_SEEDS = 1000
REPORT_TITLE = "# The paper's claims at small scale (`rpgrl reproduce`)"
"""the report's first line: how `--report` tells an earlier report, which it may rewrite, from any other file"""


def parse(argv: list[str]) -> argparse.Namespace:
    ap = ArgumentParser(prog="rpgrl reproduce", description=__doc__.splitlines()[0])
    ap.add_argument("claims", nargs="+", metavar="CLAIM", help=f"all, or some of: {', '.join(CLAIMS)}")
    ap.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per arm (default 5; --quick: 2)")
    ap.add_argument("--quick", action="store_true", help=f"a few steps per run ({QUICK.steps}), for a smoke test")
    ap.add_argument("--out", type=Path, default=None,
                    help="suite directory and run cache (default runs/reproduce[-quick])")  # fmt: skip
    ap.add_argument("--report", type=Path, default=None,
                    help="Markdown report, new or an earlier one (default OUT/results.md)")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each (default 2)")
    ap.add_argument("--no-run", action="store_true", help="only regenerate the report from the runs cached so far")
    a = ap.parse_args(argv)
    names = list(CLAIMS) if "all" in a.claims else a.claims
    bad = [c for c in names if c not in CLAIMS]
    if bad:
        raise UsageError(f"unknown claim {bad[0]!r}; valid: all, {', '.join(CLAIMS)}")
    a.claims = names
    a.seeds = a.seeds if a.seeds is not None else (2 if a.quick else 5)
    if a.seeds < 1 or a.jobs < 1:
        raise UsageError("--seeds and --jobs must be >= 1")
    cores = os.cpu_count() or 1
    if a.jobs > cores:  # each job is a process with a torch thread: more than the cores only slows every run
        raise UsageError(f"--jobs must be <= {cores} (this machine's cores), got {a.jobs}")
    if a.seeds > MAX_SEEDS:
        raise UsageError(f"--seeds must be <= {MAX_SEEDS} (every seed is a run per arm), got {a.seeds}")
    a.out = a.out or Path("runs") / ("reproduce-quick" if a.quick else "reproduce")
    a.report = a.report or a.out / "results.md"
    if a.report.is_dir():
        raise UsageError(f"--report {a.report}: it is a directory, not a file")
    for flag, folder in (("--out", a.out), ("--report", a.report.parent)):  # before any run or file is written
        problem = dir_problem(folder)
        if problem is not None:
            raise UsageError(f"{flag} {folder}: {problem}")
    problem = results_problem(a.out / "results.json")
    if problem is not None:  # the suite's hours of runs would end in a failed read or write
        raise UsageError(f"--out {a.out}: its results.json {problem}: move it, or pass another folder")
    if (a.out / "config.json").is_file():  # what `rpgrl train` writes first; a suite directory never holds one
        raise UsageError(f"--out {a.out}: it holds a config.json (a training run or a model folder), not a "
                         "reproduction suite: pass another folder")  # fmt: skip
    problem = report_problem(a.report, a.out, a.claims)
    if problem is not None:
        raise UsageError(f"--report {a.report}: {problem}")
    return a


def results_problem(path: Path) -> str | None:
    """Why the suite could not read OUT/results.json (for the claims it keeps) or replace it at its end; None if it
    can, or if there is none (a link to a file not there yet is replaced). Reads only."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:  # a link to itself, a folder on the way that cannot be searched
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISDIR(mode):
        return "is a directory, where the suite writes its results"
    if not stat.S_ISREG(mode):  # a FIFO: reading it waits for a writer
        return "is not a regular file"
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    return None


def plot_dir(report: Path) -> Path:
    """The folder of the report's plots: beside it, named after its stem (docs/results.md -> docs/results/)."""
    return report.parent / report.stem


def report_problem(report: Path, out: Path, claims: list[str]) -> str | None:
    """Why writing `report` and its plots of `claims` would overwrite a file `rpgrl reproduce` did not write (or
    cannot work); None if it would not. Reads only."""
    plots = plot_dir(report)
    if plots == report:
        return "it has no suffix, so its plot folder would be the file itself: name it like FILE.md"
    if report.resolve() == (out / "results.json").resolve():
        return "it is the suite's results.json, written in the same run: pass another file"
    problem = dir_problem(plots)
    if problem is not None:
        return f"its plot folder {plots}: {problem}"
    if report.exists() or report.is_symlink():
        if not report.is_file():
            return "it is not a regular file"
        if not is_report(report):
            return ("it exists and is not a report written by `rpgrl reproduce` (its first line is not the report's "
                    "title): pass another file, or remove it")  # fmt: skip
        return None  # an earlier report: it and the plots beside it are rewritten
    taken = [p.name for p in (plots / f"{c}.png" for c in claims) if p.exists() or p.is_symlink()]
    if taken:
        return (f"its plot folder {plots} already holds {', '.join(taken)}, and no earlier report is beside it: "
                "pass another file")  # fmt: skip
    return None


def is_report(path: Path) -> bool:
    """Whether `path` begins with the report's title line (written by `write_report`); False if unreadable."""
    try:
        with path.open("rb") as f:
            first = f.readline(len(REPORT_TITLE.encode()) + 2)
    except OSError:
        return False
    return first.rstrip(b"\r\n") == REPORT_TITLE.encode()


def main(argv: list[str]) -> int:
    a = parse(argv)
    scale = QUICK if a.quick else FULL
    reproduce(a.claims, list(range(a.seeds)), scale, a.out, a.report, jobs=a.jobs, run=not a.no_run)
    return 0


def reproduce(claims, seeds, scale: Scale, out: Path, report: Path, jobs: int = 2, run: bool = True,
              base=None, warm=None) -> dict:  # fmt: skip
    """Run (unless `run` is false) and report; returns the results dict. `base`/`warm` override the configs
    (tests use a tiny model)."""
    base = base or base_config(scale)
    warm = warm or warm_start_config(scale)
    plan = []
    for name in claims:
        for seed in seeds:
            for arm in CLAIMS[name].arms:
                plan.append((name, arm.name, Job(arm.config(base), seed, config_key(warm, seed))))
    t = time.perf_counter()
    if run:
        done = [0]

        def progress(job, rec):
            done[0] += 1
            acc = f"greedy {100 * rec['start']:.1f}% -> {100 * rec['final']:.1f}%"
            print(f"[{done[0]}] seed {job.seed} {job.key}: {acc} in {rec['wall_seconds']:.0f} s", flush=True)

        run_all(out, warm, [j for _, _, j in plan], workers=jobs, commit=_commit(), on_done=progress,
                say=lambda line: print(line, flush=True))  # fmt: skip
    runs: dict[str, dict[str, dict[int, dict]]] = {}
    named = set()
    for name, arm, job in plan:
        rec, why = read_record(run_dir(out, job))
        if rec is not None:
            runs.setdefault(name, {}).setdefault(arm, {})[job.seed] = rec
        elif why is not None and not run and job.key not in named:  # (a run names it and runs it again)
            named.add(job.key)
            print(f"rpgrl reproduce: {run_dir(out, job) / 'record.json'} cannot be used ({why}): not read; run "
                  "without --no-run to run it again", file=sys.stderr)  # fmt: skip
    earlier = None if run else _stored_records(out, claims, base, scale, seeds, runs)
    if not run and not runs:  # a mistyped --out would otherwise overwrite a report with an empty one
        raise UsageError(f"--no-run: no finished run of these claims is cached under {out}; check --out, or run "
                         "without --no-run")  # fmt: skip
    results = {
        "header": _header(scale, seeds, jobs, runs, earlier["header"] if earlier else None),
        "claims": {n: claim_result(CLAIMS[n], runs.get(n, {}), base, seeds) for n in claims},
        "report_commit": _commit(),
    }
    from rpgrl.trainer.rundir import ResultsLock  # it imports torch: not before the arguments are checked

    with ResultsLock(out):  # from reading the claims stored in results.json to the report: whether runs ran or not
        _save(out, report, results, scale, seeds)
    print(f"{time.perf_counter() - t:.0f} s; results in {out / 'results.json'}, report {report}")
    for n, r in results["claims"].items():
        print(f"  {n}: {r['verdict']}{'' if r['complete'] else ' (incomplete)'}")
    return results


def _save(out: Path, report: Path, results: dict, scale: Scale, seeds: list[int]) -> None:
    """OUT/results.json with `results`' claims and the stored ones it does not name, then the report. Under
    `ResultsLock(out)`: the stored claims are read here and written back, so another suite's write in between
    would be lost (a suite whose runs are all cached takes no RunLock)."""
    from rpgrl.trainer.checkpoint import write_text_atomic
    from rpgrl.trainer.log import json_safe

    stored = _stored_claims(out, scale, seeds)  # the records of claims not named: maybe kept nowhere else
    claims_json = {n: results["claims"].get(n, stored.get(n)) for n in (*CLAIMS, *stored)}
    saved = {**results, "claims": {n: r for n, r in claims_json.items() if r is not None}}
    # Holm's family: the suite's comparisons, its stored claims' too; not those of a claim it no longer has (kept)
    suite = {n: r for n, r in saved["claims"].items() if n in CLAIMS}
    add_multiplicity(suite)
    with _full_disk_is_usage(out):
        out.mkdir(parents=True, exist_ok=True)
        kept = None if stored else _keep_other_suite(out)
        write_text_atomic(out / "results.json", json.dumps(json_safe(saved), indent=1, allow_nan=False) + "\n")
        if kept is not None:
            print(f"{out / 'results.json'} held another suite (another scale or seeds, or unreadable): kept as {kept}")
        write_report(results, report, len(seeds), suite=suite)


@contextlib.contextmanager
def _full_disk_is_usage(out: Path):
    """A full disk (or quota) while the results and the report are written: one line (exit 2), not a traceback; each
    file is replaced whole or left as it was, and every run's record stays in the cache."""
    try:
        yield
    except OSError as e:
        if e.errno not in FULL_DISK_ERRNOS:
            raise
        where = f" ({e.filename})" if e.filename else ""
        message = (f"cannot write the results{where}: {e.strerror}; the runs' records are kept in {out / 'runs'}: "
                   "free some space, then the same command again writes them")  # fmt: skip
        raise UsageError(message) from None


def write_report(results: dict, report: Path, n_seeds: int, suite: dict | None = None) -> None:
    """The markdown report of `results`' claims and their plots; `suite`: every claim of the suite OUT/results.json
    holds, over whose comparisons Holm's correction runs (the named claims' when None)."""
    plots = plot_dir(report)
    h = results["header"]
    lines = [
        REPORT_TITLE,
        "",
        "Generated by `rpgrl reproduce` from the runs' records (do not edit by hand"
        f"{'; written at commit ' + _commits([results['report_commit']]) if results.get('report_commit') else ''}). "
        f"Runs: commit {_commits(h['commits'])}, {h['hardware']}, Python {h['python']}, "
        f"torch {h['torch']}, transformers {h['transformers']}, {h['date']}{h.get('env_note', '')}.",
        "",
        f"**Setup.** {h['setup']}",
        "",
        "**Reading the tables.** Each cell is a mean over seeds with its 95% Student-t interval [low, high]. Arms "
        "at the same seed start RL from the same warm-started model, so comparisons use the per-seed differences; a "
        "comparison is *resolved* when its interval lies wholly on one side of 0 or of its margin, as its "
        f"expectation asks (`rpgrl.reproduce.report`), and never over fewer than {MIN_SEEDS} seeds (nor, where "
        f"every seed's difference is the same, a zero-width interval, over fewer than {EQUAL_SEEDS}: there the "
        "sign-flip test decides). "
        "Greedy Last: held-out greedy accuracy at the end (0 for a run that diverged); Best: the highest of the "
        "periodic evaluations; sampled mean@k: accuracy of k samples per held-out problem at temperature 1 at the "
        "end; entropy, reward: means over the last quarter of the steps; collapsed: stopped by the collapse guard, "
        "diverged, or ended 10+ points below its start. A comparison whose paired runs ran at different commits "
        "says so.",
        "",
        _multiplicity_text(suite or results["claims"], shown=len(results["claims"])),
        "",
    ]
    lines += ["| claim | verdict | after Holm's correction |", "|---|---|---|"]
    lines += [f"| [{r['title']}](#{_anchor(r)}) | {r['verdict']}{'' if r['complete'] else ' (incomplete)'} | "
              f"{r.get('verdict_holm', '-')} |" for r in results["claims"].values()]  # fmt: skip
    lines.append("")
    for r in results["claims"].values():
        lines.append(claim_markdown(r, plots.name, n_seeds))
        plot_claim(r, plots / f"{r['name']}.png")
    from rpgrl.trainer.checkpoint import write_text_atomic

    report.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(report, "\n".join(lines))


def _multiplicity_text(claims: dict, shown: int | None = None) -> str:
    comps = [c for r in claims.values() for c in r["comparisons"]]
    k = sum(c["expect"] == "higher" for c in comps)
    part = f" (this report shows {shown} of its {len(claims)} claims)" if (shown or len(claims)) < len(claims) else ""
    return (
        f"**Many comparisons.** The suite makes {len(comps)} comparisons{part}, each status resolved by a two-sided "
        f'test at 5%. Were no arm truly different, each of its {k} "expected higher" comparisons would come out '
        f"supporting by chance with probability 2.5%, so at least one of them with probability {1 - 0.975**k:.0%}. "
        "Each comparison therefore also gives the p-value of the test its status rests on and Holm's adjustment "
        "over the suite, and the table below a second verdict in which a status whose adjusted p is 5% or more "
        "counts as unresolved. An expected advantage that the interval rules out down to its margin (the smallest "
        "difference that would reproduce the claim at this scale) *falls short*."
    )


def _commits(commits: list[str]) -> str:
    return ", ".join(c[:7] + ("+dirty" if c.endswith("+dirty") else "") for c in commits) or "-"


def _anchor(r: dict) -> str:
    text = f"{r['title']} ({r['name']})".lower()
    return "".join(ch for ch in text if ch.isalnum() or ch in " -").replace(" ", "-")


def _commit() -> str:
    try:
        package = Path(__file__).resolve().parents[1]  # src/rpgrl: a change there changes what runs compute
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=package, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "."], cwd=package, capture_output=True, text=True,
                               timeout=10).stdout.strip()  # fmt: skip
        return head.stdout.strip() + ("+dirty" if dirty else "") if head.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _stored_claims(out: Path, scale: Scale, seeds: list[int]) -> dict:
    """The claims OUT/results.json holds, as it holds them, when it is a suite at this scale over these seeds (the
    file a suite rewrites: claims it does not name stay); {} when there is none (or it is unreadable, or another
    suite's: `_earlier_results` says so where it is read)."""
    try:
        stored = json.loads((out / "results.json").read_text())
        same = stored["header"]["scale"] == scale.__dict__ and set(stored["header"]["seeds"]) == set(seeds)
        return stored["claims"] if same and isinstance(stored["claims"], dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _keep_other_suite(out: Path) -> Path | None:
    """A copy of OUT/results.json as results-previous.json (or -2, -3, ...), for a file the suite's write replaces
    without keeping its claims (another scale or seeds: `_stored_claims` reads none of them; or unreadable): their
    records may be kept nowhere else (docs/results holds no run cache). Returns the copy, or None (no claims)."""
    path = out / "results.json"
    try:
        if not json.loads(path.read_text()).get("claims"):
            return None  # no claims: nothing to lose
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError):
        pass  # unreadable: kept as it is
    aside, n = out / "results-previous.json", 1
    while aside.exists():
        n += 1
        aside = out / f"results-previous-{n}.json"
    shutil.copyfile(path, aside)  # a copy: a failing write leaves results.json as it was
    return aside


def _stored_records(out, claims, base, scale, seeds, runs) -> dict | None:
    """--no-run: `runs` (the run cache's records) completed in place from OUT/results.json, seed by seed, where it
    holds a seed of an arm the cache does not (no cache: another machine; a partial one: a copied or pruned folder),
    so a report never has fewer records than the file it rewrites nor than the cache. Returns `_earlier_results`
    when a record is taken from it, else None. With a cache, a results.json this suite cannot read is left aside,
    as before."""
    try:
        earlier = _earlier_results(out, claims, base, scale, seeds)
    except UsageError:
        if not runs:
            raise
        return None
    taken = False
    for name, arms in (earlier or {}).get("runs", {}).items():
        for arm, records in arms.items():
            cached = runs.get(name, {}).get(arm, {})
            if records.keys() - cached.keys():
                # A seed in both: the cache's record (it holds its curves). The file's records hold none: each takes
                # the arm's stored mean over the file's seeds, which the arm's new mean so weighs by their number
                # (exact when the cache holds none of them and all ran as many steps).
                mean = earlier["curves"][(name, arm)]
                merged = {s: cached.get(s) or {**rec, "curves": mean} for s, rec in records.items()} | cached
                runs.setdefault(name, {})[arm] = dict(sorted(merged.items()))
                taken = True
    return earlier if taken else None


def _earlier_results(out: Path, claims: list[str], base, scale: Scale, seeds: list[int]) -> dict | None:
    """From OUT/results.json, written by an earlier suite: {"runs": claim -> arm -> seed -> record, "curves":
    (claim, arm) -> mean curves, "header": its header}, for the arms whose flags are still the claim's (an arm
    changed since is left out); None when there is no such file. A suite at another scale (--quick or not) or over
    other seeds than `seeds` is refused (its arms' mean curves are over all its seeds)."""
    path = out / "results.json"
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text())
        _ = stored["header"]["scale"], stored["claims"]  # what this reads must be there
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--no-run: {path} is no results.json an earlier suite wrote ({type(e).__name__}: {e}); "
                         "run without --no-run") from None  # fmt: skip
    if stored["header"]["scale"] != scale.__dict__:
        raise UsageError(f"--no-run: {path} holds a suite at another scale than this command's (--quick or not): "
                         "pass the same scale")  # fmt: skip
    if set(stored["header"].get("seeds", [])) != set(seeds):
        raise UsageError(f"--no-run: {path} holds seeds {stored['header'].get('seeds')}, not this command's "
                         f"{seeds}: pass --seeds {len(stored['header'].get('seeds', []))}")  # fmt: skip
    runs: dict[str, dict[str, dict[int, dict]]] = {}
    curves = {}
    for name in claims:
        now = {a.name: config_changes(a.config(base), base) for a in CLAIMS[name].arms}
        for arm in stored.get("claims", {}).get(name, {}).get("arms", []):
            if now.get(arm["name"]) == arm["flags"] and arm["runs"]:
                runs.setdefault(name, {})[arm["name"]] = {int(s): rec for s, rec in arm["runs"].items()}
                curves[(name, arm["name"])] = arm["curves"]
    return {"runs": runs, "curves": curves, "header": stored["header"]} if runs else None


def _header(scale: Scale, seeds: list[int], jobs: int, runs: dict, earlier: dict | None = None) -> dict:
    """The report's header: commits, versions, hardware, dates and runs at a time as the runs' records hold them
    (each record keeps where it ran). For records older than that: the `earlier` header of the results.json they
    came from, written by the suite that ran them, when every record is such; else this process's, and the header
    says so."""
    records = [r for arms in runs.values() for seeds_ in arms.values() for r in seeds_.values()]
    commits = sorted({r.get("commit") or "" for r in records} - {""})
    envs = [r["env"] for r in records if isinstance(r.get("env"), dict)]
    if earlier is not None and not envs:
        return {**earlier, "commits": commits}
    here = {k: v for k, v in run_environment().items() if k != "workers"}  # this process runs none of them
    note = ""
    if len(envs) < len(records):
        n = len(records) - len(envs)
        note = (f" ({n} of {len(records)} runs recorded no environment: for them, that of the process that wrote "
                "this report)")  # fmt: skip
        envs.append(here)
    if not envs:
        envs.append(here)

    def values(key: str) -> str:
        return ", ".join(sorted({str(e[key]) for e in envs if key in e})) or "-"

    dates = sorted(e["date"] for e in envs if "date" in e)
    workers = values("workers") if all("workers" in e for e in envs) else str(jobs)
    setup = (
        f"{len(seeds)} seeds per arm. Each run: the embedded task and tiny model, warm-started per seed by the "
        f"default's supervised phase (up to {scale.sft_steps} steps), then {scale.steps} RL steps of "
        f"{scale.prompts} prompts x {scale.group} responses with {scale.updates} optimizer steps per rollout batch "
        f"(unless the arm says otherwise), evaluated every {scale.eval_every} steps on the held-out split "
        f"({scale.max_problems or 'all 300'} problems; sampled mean@{scale.val_samples}); {workers} runs at a time, "
        "one thread each. Methods use their preset's algorithm at this scale (`rpgrl.reproduce.claims`): equal sample "
        "budget (DAPO's dynamic sampling becomes its filter without regeneration), an 8-token overlong buffer, "
        "one learning rate."
    )
    return {
        "commits": commits,
        "hardware": values("hardware"),
        "python": values("python"),
        "torch": values("torch"),
        "transformers": values("transformers"),
        "date": dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}",
        "env_note": note,
        "scale": scale.__dict__,
        "seeds": seeds,
        "setup": setup,
    }
