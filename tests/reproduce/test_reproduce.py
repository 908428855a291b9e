"""The suite's machinery on tiny runs: claims resolve, runs are cached by config and seed, the report is generated
from the records."""

import errno
import json
import os
import shutil
from dataclasses import replace

import pytest
import torch

from rpgrl.cli import main as rpgrl_main
from rpgrl.config import check
from rpgrl.errors import UsageError
from rpgrl.presets import DEFAULT, get_preset
from rpgrl.reproduce import cli as reproduce_cli
from rpgrl.reproduce.claims import CLAIMS, FULL, QUICK, Arm, Claim, Comparison, base_config, family, then
from rpgrl.reproduce.report import config_changes
from rpgrl.reproduce.runner import Job, _warm_problem, config_key, run_dir, summarize_run
from rpgrl.reproduce.stats import paired_difference


@pytest.mark.parametrize("scale", [FULL, QUICK])
def test_every_arm_of_every_claim_is_a_valid_config(scale):
    base = base_config(scale)
    for claim in CLAIMS.values():
        names = [a.name for a in claim.arms]
        assert len(set(names)) == len(names), claim.name
        for arm in claim.arms:
            cfg = check(arm.config(base))
            assert cfg.train.max_steps == scale.steps and cfg.sft.max_steps == 0
            assert cfg.optim.lr == DEFAULT.optim.lr, "one learning rate for every arm"
        for c in claim.comparisons:
            assert c.a in names and c.b in names, (claim.name, c)


def test_methods_keep_their_preset_algorithm_at_the_default_scale():
    base = base_config(FULL)
    grpo = family("grpo")(base)
    assert grpo.loss == get_preset("grpo").loss and grpo.ref.mode == "fixed"
    assert grpo.rollout.group_filter == "off" and grpo.rollout.overlong_buffer == 0
    dapo = family("dapo")(base)
    assert dapo.loss.beta == 0 and dapo.loss.eps_high == 0.28
    assert dapo.rollout.group_filter == "drop" and dapo.rollout.overlong_buffer == 8  # equal sample budget
    rf = family("rpg-reinforce-urkl")(base)
    assert rf.loss == get_preset("rpg-reinforce-urkl").loss and rf.ref.mode == "behaviour"
    for cfg in (grpo, dapo, rf):
        assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.train.mini_batch_prompts) == (32, 8, 4)
        assert cfg.model == DEFAULT.model and cfg.optim == DEFAULT.optim


def test_off_policy_arms_set_the_updates_per_batch():
    base = base_config(FULL)
    arms = {a.name: a.config(base) for a in CLAIMS["off-policy"].arms}
    assert arms["rpg-clip x1"].train.mini_batch_prompts == 32
    assert arms["no-clip x16"].train.mini_batch_prompts == 2 and arms["no-clip x16"].loss.clip is None
    assert arms["truncated-is x4"].train.mini_batch_prompts == 8 and arms["truncated-is x4"].loss.clip == "truncate"
    assert arms["grpo x16"].loss.name == "grpo"


def test_config_key_tracks_what_a_run_computes(monkeypatch):
    cfg = base_config(FULL)
    assert config_key(cfg, 0, "w") == config_key(replace(cfg, model=replace(cfg.model, path="/elsewhere")), 0, "w")
    assert config_key(cfg, 0, "w") != config_key(cfg, 1, "w")
    assert config_key(cfg, 0, "w") != config_key(cfg, 0, "v")
    assert config_key(cfg, 0, "w") != config_key(then(lambda c: c, loss={"beta": 1e-3})(cfg), 0, "w")
    # arms of different claims with the same resolved config share their runs
    kl = CLAIMS["kl"].arm("beta 0.0001 behaviour").config(cfg)
    assert config_key(kl, 0, "w") == config_key(CLAIMS["methods"].arm("rpg-reinforce-urkl").config(cfg), 0, "w")
    # a field added since the cached runs, at its default, leaves their keys as they were; set, it counts
    import rpgrl.reproduce.runner as runner

    key, to_dict = config_key(cfg, 0, "w"), runner.config_to_dict

    def before_the_field(c):
        d = to_dict(c)
        del d["data"]["truncation"]
        return d

    monkeypatch.setattr(runner, "config_to_dict", before_the_field)
    assert config_key(cfg, 0, "w") == key
    monkeypatch.undo()
    assert config_key(replace(cfg, data=replace(cfg.data, truncation="left")), 0, "w") != key


def test_config_changes_are_the_flags_that_differ():
    base = base_config(FULL)
    cfg = then(lambda c: c, loss={"eps_low": 0.1, "clip": None})(base)
    assert config_changes(cfg, base) == ["--loss.clip none", "--loss.eps_low 0.1"]


def test_summarize_run_reads_last_best_and_collapse(tmp_path):
    evals = [{"step": 0, "eval/accuracy": 0.4}, {"step": 10, "eval/accuracy": 0.6}, {"step": 20, "eval/accuracy": 0.25}]
    rows = [
        {"step": i, "entropy/mean": float(i), "reward/mean": 0.1 * i, "log_w/max": 0.5, "log_w/min": -2.0 * (i == 3)}
        for i in range(1, 9)
    ]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "summary.json").write_text(json.dumps({"stopped": None, "rl_seconds": 3.0}))
    r = summarize_run(tmp_path)
    assert (r["start"], r["final"], r["best"]) == (0.4, 0.25, 0.6)
    assert r["collapsed"]  # 15 points below its start
    assert r["entropy"] == pytest.approx(7.5) and r["reward"] == pytest.approx(0.75)  # the last quarter: steps 7, 8
    assert r["max_log_w"] == 2.0 and r["steps"] == 8
    evals[-1]["eval/accuracy"] = 0.35
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    assert not summarize_run(tmp_path)["collapsed"]
    for start in range(30, 301):  # exactly 10 points below, as accuracies over 300 problems round: always collapsed
        evals[0]["eval/accuracy"], evals[-1]["eval/accuracy"] = start / 300, (start - 30) / 300
        (tmp_path / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
        assert summarize_run(tmp_path)["collapsed"], start
        evals[-1]["eval/accuracy"] = (start - 29) / 300  # 9.67 points below: not
        (tmp_path / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
        assert not summarize_run(tmp_path)["collapsed"], start


def _tiny(cfg):
    m = replace(cfg.model, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32)
    return replace(
        cfg,
        model=m,
        data=replace(cfg.data, num_train=40, num_val=6),
        rollout=replace(cfg.rollout, max_new_tokens=12),
        sft=replace(cfg.sft, batch_size=4, eval_every=1),
    )


def test_suite_runs_caches_and_reports(tmp_path, monkeypatch):
    """Two tiny runs (two arms, one seed) plus their warm start; a second call runs nothing; the report and the
    JSON hold the records' numbers and the intervals computed from them."""
    scale = replace(QUICK, steps=2, prompts=4, group=2, updates=2, eval_every=1, val_samples=2, max_problems=6,
                    sft_steps=2)  # fmt: skip
    claim = Claim(
        "toy",
        "A toy claim",
        "the higher clip is better",
        (Arm("low", then(lambda c: c, loss={"eps_high": 0.1})), Arm("high", lambda c: c)),
        (Comparison("high", "low", "final", "higher"),),
    )
    monkeypatch.setitem(CLAIMS, "toy", claim)
    out, report = tmp_path / "suite", tmp_path / "docs" / "results.md"
    base, warm = _tiny(base_config(scale)), _tiny(reproduce_cli.warm_start_config(scale))
    # an untrained tiny model scores 0 everywhere: without the filter its all-alike groups are still trained on
    base = replace(base, rollout=replace(base.rollout, group_filter="off"))
    res = reproduce_cli.reproduce(["toy"], [0], scale, out, report, jobs=1, base=base, warm=warm)

    runs = sorted((out / "runs").iterdir())
    assert len(runs) == 2 and len(list((out / "warmstart").glob("*-s0"))) == 1
    records = {}
    for d in runs:
        rec = json.loads((d / "record.json").read_text())
        cfg = json.loads((d / "run" / "config.json").read_text())
        records["high" if cfg["loss"]["eps_high"] == 0.28 else "low"] = rec
        assert not (d / "run" / "checkpoints").exists() and not (d / "run" / "model").exists()
        assert 0 <= rec["sampled"] <= 1 and rec["steps"] == 2 and rec["seed"] == 0 and rec["trained"] == 2 * 8
        assert rec["run"] == d.name  # which run it is the result of (a copy in another run's folder is refused)
        assert rec["env"]["workers"] == 1 and rec["env"]["torch"] == torch.__version__  # where it ran
        assert cfg["model"]["path"].endswith("-s0/model")  # RL starts from the seed's warm start
    assert records["low"]["start"] == records["high"]["start"]  # the same warm start
    warm_folder = next((out / "warmstart").glob("*-s0"))
    assert _warm_problem(warm_folder, 0, warm) is None  # the config.json `train` wrote reads as the suite's own
    assert "another config's warm start" in _warm_problem(warm_folder, 0, replace(warm, sft=replace(warm.sft, lr=1e-3)))

    r = res["claims"]["toy"]
    arm = {a["name"]: a for a in r["arms"]}
    assert arm["high"]["summary"]["final"]["mean"] == records["high"]["final"]
    diff = paired_difference({0: records["high"]["final"]}, {0: records["low"]["final"]})
    assert r["comparisons"][0]["difference"]["mean"] == diff.mean
    assert arm["low"]["flags"] == ["--loss.eps_high 0.1"]
    text = report.read_text()
    assert "| high | 1 |" in text and "| low | 1 |" in text and f"**Verdict: {r['verdict']}.**" in text
    assert (report.parent / "results" / "toy.png").stat().st_size > 1000
    assert json.loads((out / "results.json").read_text())["claims"]["toy"]["verdict"] == r["verdict"]

    stamps = {d.name: (d / "record.json").stat().st_mtime_ns for d in runs}
    res2 = reproduce_cli.reproduce(["toy"], [0], scale, out, report, jobs=1, base=base, warm=warm)
    assert {d.name: (d / "record.json").stat().st_mtime_ns for d in (out / "runs").iterdir()} == stamps
    assert res2["claims"]["toy"]["arms"] == r["arms"]

    # no run cache (the committed results.json on another machine): --no-run reports from the records it holds
    header = json.loads((out / "results.json").read_text())["header"]
    assert header["torch"] == torch.__version__ and "1 runs at a time" in header["setup"]
    cache = out / "runs"
    cache.rename(tmp_path / "elsewhere")
    res3 = reproduce_cli.reproduce(["toy"], [0], scale, out, report, jobs=2, run=False, base=base, warm=warm)
    assert res3["claims"]["toy"]["arms"] == r["arms"] and res3["claims"]["toy"]["comparisons"] == r["comparisons"]
    assert res3["header"]["setup"] == header["setup"]  # the runs' own "1 at a time", not this call's jobs=2
    for other, scale_ in (([0, 1], scale), ([0], replace(scale, steps=3))):  # not what results.json holds: refused
        with pytest.raises(UsageError, match="seeds|another scale"):
            reproduce_cli.reproduce(["toy"], other, scale_, out, report, run=False, base=base, warm=warm)
    kept = (out / "results.json").read_text()
    for broken in ("{", "[]", '{"header": {}}'):  # a cut or foreign file: one line, not a traceback
        (out / "results.json").write_text(broken)
        with pytest.raises(UsageError, match="is no results.json an earlier suite wrote"):
            reproduce_cli.reproduce(["toy"], [0], scale, out, report, run=False, base=base, warm=warm)
    (out / "results.json").write_text(kept)
    (tmp_path / "elsewhere").rename(cache)

    assert "verdict_holm" in res3["claims"]["toy"] and not any(
        x.endswith("| - |") for x in report.read_text().splitlines()
    )
    # an arm changed since results.json was written is left out of it; with a cache, the cache is read, not it
    stored = json.loads((out / "results.json").read_text())
    changed = replace(claim, arms=(Arm("low", then(lambda c: c, loss={"eps_high": 0.15})), claim.arms[1]))
    monkeypatch.setitem(CLAIMS, "toy", changed)
    cache.rename(tmp_path / "elsewhere")
    res4 = reproduce_cli.reproduce(["toy"], [0], scale, out, report, run=False, base=base, warm=warm)
    assert {a["name"]: a["seeds"] for a in res4["claims"]["toy"]["arms"]} == {"low": [], "high": [0]}
    (tmp_path / "elsewhere").rename(cache)
    monkeypatch.setitem(CLAIMS, "toy", claim)
    stored["header"]["seeds"] = [0, 1]
    (out / "results.json").write_text(json.dumps(stored))
    assert reproduce_cli.reproduce(["toy"], [0], scale, out, report, run=False, base=base, warm=warm)["claims"]

    # an unfinished run (no record.json) is started again; a changed arm runs anew
    (runs[0] / "record.json").unlink()
    monkeypatch.setitem(CLAIMS, "toy", replace(claim, arms=(*claim.arms, Arm("c", then(lambda c: c, loss={"c": 3.0})))))
    reproduce_cli.reproduce(["toy"], [0], scale, out, report, jobs=1, base=base, warm=warm)
    assert (runs[0] / "record.json").is_file() and len(list((out / "runs").iterdir())) == 3


def test_header_reads_each_runs_environment(monkeypatch):
    """The header's versions, dates and runs at a time come from the records (the reporting process's were
    printed); the multiple-comparison note counts the "higher" comparisons."""
    from rpgrl.reproduce import runner

    monkeypatch.setattr(runner, "_SUITE_WORKERS", 4)
    env = runner.run_environment()
    assert env["workers"] == 4 and env["torch"] == torch.__version__
    runs = {
        "c": {
            "a": {0: {"env": {**env, "date": "2024-01-03", "torch": "9.9"}}, 1: {"env": {**env, "date": "2024-01-01"}}}
        }
    }
    h = reproduce_cli._header(QUICK, [0, 1], 1, runs)
    assert h["date"] == "2024-01-01 to 2024-01-03" and h["torch"] == ", ".join(sorted(["9.9", torch.__version__]))
    assert "4 runs at a time" in h["setup"] and not h["env_note"]
    comps = [{"expect": "higher"}] * 3 + [{"expect": "similar"}]
    text = reproduce_cli._multiplicity_text({"c": {"comparisons": comps}})
    assert "makes 4 comparisons" in text and "each of its 3 " in text and "probability 7%" in text  # 1 - 0.975^3


def test_report_texts():
    from rpgrl.reproduce.report import _margin, _p_text, claim_markdown

    assert _margin({"expect": "higher", "margin": 0.0}, 100, " points") == ""
    assert _margin({"expect": "higher", "margin": 0.02}, 100, " points") == " (by 2 points or more)"
    assert _p_text({"p": 0.01, "p_holm": 0.05, "family": 5}) == (
        " (p = 0.01; 0.05 after Holm's correction over the suite's 5 comparisons)"
    )
    res = {"title": "T", "name": "t", "paper": "p", "verdict": "Reproduced at this scale",
           "verdict_holm": "Partly reproduced at this scale", "comparisons": [], "arms": [], "columns": [],
           "complete": True}  # fmt: skip
    assert "After Holm's correction over the suite: Partly reproduced at this scale." in claim_markdown(res, "x", 1)


def test_runs_that_trained_nothing_are_left_out():
    """A run whose every group scored alike trained on nothing: it was counted as a result of its algorithm (the
    quick scale's runs all were such, and "similar" comparisons of them came out consistent)."""
    from rpgrl.reproduce.report import claim_result

    claim = Claim(
        "toy", "t", "p", (Arm("a", lambda c: c), Arm("b", lambda c: c)), (Comparison("a", "b", "final", "higher"),)
    )
    runs = {
        "a": {s: {"final": 0.5 + 0.01 * s, "trained": 0 if s == 3 else 40.0} for s in range(4)},
        "b": {s: {"final": 0.4} for s in range(4)},  # records from before `trained` count as trained
    }
    res = claim_result(claim, runs, DEFAULT, [0, 1, 2, 3])
    a = res["arms"][0]
    assert a["untrained"] == [3] and a["summary"]["final"]["n"] == 3
    assert res["comparisons"][0]["difference"]["n"] == 3
    assert res["comparisons"][0]["difference"]["mean"] == pytest.approx(0.11)


def test_cli_errors_are_one_line_exit_2(capsys, tmp_path):
    assert rpgrl_main(["reproduce", "nonsense"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown claim 'nonsense'" in err and "methods" in err
    assert rpgrl_main(["reproduce", "methods", "--seeds", "0"]) == 2
    assert rpgrl_main(["reproduce", "--bogus", "methods"]) == 2
    (tmp_path / "f").write_text("")
    o, below_file = str(tmp_path / "o"), str(tmp_path / "f" / "sub" / "r.md")
    for argv, needle in [(["--out", str(tmp_path / "f")], "it is a file, not a directory"),
                         (["--out", o, "--report", below_file], "lies below"),
                         (["--out", o, "--report", str(tmp_path)], "a directory, not a file")]:  # fmt: skip
        capsys.readouterr()
        assert rpgrl_main(["reproduce", "methods", "--no-run", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and needle in err
    assert not (tmp_path / "o").exists()
    # --no-run on a directory with no cached run (a mistyped --out) keeps an existing report as it is
    (tmp_path / "kept.md").write_text(f"{reproduce_cli.REPORT_TITLE}\n")
    assert rpgrl_main(["reproduce", "all", "--no-run", "--out", o, "--report", str(tmp_path / "kept.md")]) == 2
    assert "no finished run of these claims is cached under" in capsys.readouterr().err
    assert (tmp_path / "kept.md").read_text() == f"{reproduce_cli.REPORT_TITLE}\n" and not (tmp_path / "o").exists()
    assert rpgrl_main(["reproduce", "methods", "--no-run", "--seeds", str(10**11)]) == 2
    assert "--seeds must be <= 1000" in capsys.readouterr().err
    cores = os.cpu_count() or 1  # a process per job: more than the cores only slows every run
    assert rpgrl_main(["reproduce", "methods", "--no-run", "--jobs", str(cores + 1)]) == 2
    assert f"--jobs must be <= {cores} (this machine's cores), got {cores + 1}" in capsys.readouterr().err
    # a training run's directory is not a suite's: refused before anything is written in it
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}\n")
    assert rpgrl_main(["reproduce", "methods", "--out", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "it holds a config.json (a training run or a model folder)" in err, err
    assert [q.name for q in run.iterdir()] == ["config.json"]
    # a results.json that is a directory: the whole suite ran, then its write failed (a review's)
    blocked = tmp_path / "blocked"
    (blocked / "results.json").mkdir(parents=True)
    _refused(capsys, ["reproduce", "methods", "--no-run", "--out", str(blocked)], "its results.json is a directory")
    assert [q.name for q in blocked.iterdir()] == ["results.json"]


def test_a_results_json_the_suite_cannot_read_is_refused_before_any_run(capsys, tmp_path):
    """As a results.json that is a directory: one the suite reads at its end (for the claims it keeps) but cannot
    was accepted. A symbolic link to itself was a traceback (RuntimeError: Symlink loop), a FIFO hung the suite
    forever after its runs (reading it waits for a writer). Refused in one line before any run; nothing written."""
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "results.json").symlink_to("results.json")
    _refused(capsys, ["reproduce", "methods", "--out", str(loop)], "its results.json cannot be read")
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "results.json")
    with pytest.raises(UsageError, match="its results.json is not a regular file"):
        reproduce_cli.parse(["methods", "--out", str(fifo)])  # (parse only: the suite would hang before the fix)
    for out in (loop, fifo):
        assert [q.name for q in out.iterdir()] == ["results.json"]
    dangling = tmp_path / "dangling"  # a link to a file not there yet: the suite's write replaces the link
    dangling.mkdir()
    (dangling / "results.json").symlink_to(tmp_path / "absent.json")
    reproduce_cli.parse(["methods", "--out", str(dangling)])


def test_a_claim_the_suite_no_longer_has_is_kept_but_not_corrected_with_it(tmp_path):
    """OUT/results.json keeps a claim the suite no longer names (renamed or retired: its records may be kept nowhere
    else), but its comparisons joined Holm's family: `reproduce all` corrected the suite's over 17 comparisons where
    it makes 13, and its report said it showed 5 of its 6 claims."""
    committed = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results", "results.json")
    with open(committed) as f:
        stored = json.load(f)
    retired = {**json.loads(json.dumps(stored["claims"]["methods"])), "name": "retired"}
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "results.json").write_text(json.dumps({**stored, "claims": {**stored["claims"], "retired": retired}}))
    assert rpgrl_main(["reproduce", "all", "--no-run", "--out", str(suite), "--report", str(tmp_path / "r.md")]) == 0
    after = json.loads((suite / "results.json").read_text())
    assert after["claims"]["retired"] == retired  # kept as it was
    assert {n: after["claims"][n] for n in CLAIMS} == {n: stored["claims"][n] for n in CLAIMS}
    n = sum(len(stored["claims"][c]["comparisons"]) for c in CLAIMS)
    text = (tmp_path / "r.md").read_text()
    assert f"The suite makes {n} comparisons, each" in text and "this report shows" not in text


def _cached_suite(out, claim, seeds):
    """A record for every arm of `claim` at `seeds`, where `rpgrl reproduce --quick` finds its runs (none is run)."""
    base, warm = base_config(QUICK), reproduce_cli.warm_start_config(QUICK)
    for seed in seeds:
        for arm in CLAIMS[claim].arms:
            d = run_dir(out, Job(arm.config(base), seed, config_key(warm, seed)))
            d.mkdir(parents=True, exist_ok=True)  # claims may share an arm's run
            curves = {"reward": [0.1, 0.3], "entropy": [1.2, 1.0], "length": [9.0, 8.0]}
            record = {**summarize_run(d), "start": 0.4, "final": 0.5, "best": 0.5, "curves": curves, "seed": seed,
                      "wall_seconds": 1.0}  # fmt: skip
            (d / "record.json").write_text(json.dumps(record))


def test_two_suites_writing_results_at_once_keep_each_others_claims(tmp_path, monkeypatch):
    """A suite reads the claims OUT/results.json holds, then rewrites it with them and its own. A suite whose runs
    were all cached took no lock, so one writing while another was between its read and its write lost the
    other's claims from results.json (the run records stay). Here suite A reads, waits for suite B (up to 5 s),
    then writes: both claims must be in the file, whoever waits for whom."""
    import threading

    out = tmp_path / "suite"
    first, second = list(CLAIMS)[:2]
    _cached_suite(out, first, [0, 1, 2])
    _cached_suite(out, second, [0, 1, 2])
    real, a_read, b_done = reproduce_cli._stored_claims, threading.Event(), threading.Event()

    def stored_claims(*args):
        stored = real(*args)
        if threading.current_thread().name == "A":
            a_read.set()
            b_done.wait(5)
        return stored

    monkeypatch.setattr(reproduce_cli, "_stored_claims", stored_claims)
    a = threading.Thread(
        target=reproduce_cli.reproduce, args=([first], [0, 1, 2], QUICK, out, tmp_path / "a.md"), name="A"
    )
    a.start()
    assert a_read.wait(120)
    reproduce_cli.reproduce([second], [0, 1, 2], QUICK, out, tmp_path / "b.md")
    b_done.set()
    a.join(120)
    assert not a.is_alive()
    assert sorted(json.loads((out / "results.json").read_text())["claims"]) == sorted([first, second])


def test_a_running_suites_lock_does_not_hold_up_a_report(tmp_path):
    """A suite holds its RunLock for hours while it runs; a suite whose runs are all cached, or `--no-run`, waits
    only for another suite's write of the results, never for its runs."""
    from rpgrl.trainer.rundir import RunLock

    out = tmp_path / "suite"
    claim = list(CLAIMS)[0]
    _cached_suite(out, claim, [0, 1, 2])
    with RunLock(out):
        for run in (True, False):
            reproduce_cli.reproduce([claim], [0, 1, 2], QUICK, out, tmp_path / f"{run}.md", run=run)
    assert claim in json.loads((out / "results.json").read_text())["claims"]


def test_a_results_write_that_never_ends_is_named(tmp_path, monkeypatch):
    """A suite waits for another one's write of the results (seconds), not forever: past `ResultsLock.TRIES` it is
    one line naming the writer's PID, and the results stay as they were."""
    from rpgrl.trainer.rundir import ResultsLock

    out = tmp_path / "suite"
    claim = list(CLAIMS)[0]
    _cached_suite(out, claim, [0, 1, 2])
    monkeypatch.setattr(ResultsLock, "TRIES", 3)
    with ResultsLock(out), pytest.raises(UsageError) as info:
        reproduce_cli.reproduce([claim], [0, 1, 2], QUICK, out, tmp_path / "r.md")
    assert str(info.value).startswith(f"another rpgrl reproduce (PID {os.getpid()}) has been writing the results in")
    assert "\n" not in str(info.value) and not (out / "results.json").exists()


def _refused(capsys, argv, needle):
    capsys.readouterr()
    assert rpgrl_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and needle in err, err


def test_no_run_names_a_record_it_cannot_use(tmp_path, capsys):
    """--no-run left a record.json cut short out of the report without a word (the arm had a seed fewer), and took
    one copied from another seed's run as this one's: each is named in one line and left out."""
    suite = tmp_path / "suite"
    _cached_suite(suite, "token-vs-sequence", [0, 1, 2])
    base, warm = base_config(QUICK), reproduce_cli.warm_start_config(QUICK)
    arms = CLAIMS["token-vs-sequence"].arms
    token, sequence, sequence2 = (run_dir(suite, Job(a.config(base), s, config_key(warm, s)))
                                  for a, s in ((arms[0], 1), (arms[1], 1), (arms[1], 2)))  # fmt: skip
    (token / "record.json").write_text('{"start": 0.4, "fin')  # cut short
    shutil.copyfile(sequence2 / "record.json", sequence / "record.json")  # seed 2's result in seed 1's run
    argv = ["reproduce", "token-vs-sequence", "--quick", "--seeds", "3", "--out", str(suite), "--no-run"]
    capsys.readouterr()
    assert rpgrl_main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    for line, path, why in ((err[0], token, "does not read as JSON"), (err[1], sequence, "records seed 2")):
        assert line.startswith(f"rpgrl reproduce: {path / 'record.json'} cannot be used (") and why in line, line
        assert line.endswith("not read; run without --no-run to run it again")
    arms = json.loads((suite / "results.json").read_text())["claims"]["token-vs-sequence"]["arms"]
    assert [a["seeds"] for a in arms] == [[0, 2], [0, 2]]


def test_a_full_disk_at_the_report_is_one_line(tmp_path, capsys, monkeypatch):
    """results.json or the report failing for want of space was a traceback (exit 1): one line, exit 2, the
    records kept and the earlier results.json as it was."""
    from rpgrl.trainer import checkpoint

    suite = tmp_path / "suite"
    _cached_suite(suite, "token-vs-sequence", [0])
    (suite / "results.json").write_text("{}\n")

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint, "write_text_atomic", full)
    capsys.readouterr()
    argv = ["reproduce", "token-vs-sequence", "--quick", "--seeds", "1", "--out", str(suite), "--no-run"]
    assert rpgrl_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert err.startswith(f"rpgrl reproduce: error: cannot write the results ({suite / 'results.json'}): No space")
    assert (suite / "results.json").read_text() == "{}\n" and len(list(suite.glob("runs/*/record.json"))) == 2


def test_report_overwrites_only_an_earlier_report_and_its_plots(capsys, tmp_path):
    """--report on a file that is not an earlier report (a training run's metrics.jsonl) is refused with one line and
    nothing written (it was replaced by the report, with a metrics/ folder of plots beside it); an earlier report is
    rewritten. The plots' folder, named after the report, may not be a file nor hold plots without a report."""
    suite = tmp_path / "suite"
    _cached_suite(suite, "clip-range", [0])
    argv = ["reproduce", "clip-range", "--quick", "--seeds", "1", "--out", str(suite), "--no-run", "--report"]
    run = tmp_path / "r1"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    _refused(capsys, [*argv, str(run / "metrics.jsonl")], "it exists and is not a report written by `rpgrl reproduce`")
    assert [p.name for p in run.iterdir()] == ["metrics.jsonl"]
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'

    report = tmp_path / "docs" / "results.md"
    for _ in range(2):  # a new report, then the same one again: rewritten
        assert rpgrl_main([*argv, str(report)]) == 0
        assert report.read_text().startswith(reproduce_cli.REPORT_TITLE + "\n")
        assert (tmp_path / "docs" / "results" / "clip-range.png").stat().st_size > 1000

    (tmp_path / "a").write_text("not a folder")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "clip-range.png").write_bytes(b"someone else's plot")
    for name, needle in [("a.md", f"its plot folder {tmp_path / 'a'}: it is a file, not a directory"),
                         ("b.md", "already holds clip-range.png, and no earlier report is beside it"),
                         ("c", "it has no suffix, so its plot folder would be the file itself")]:  # fmt: skip
        _refused(capsys, [*argv, str(tmp_path / name)], needle)
        assert not (tmp_path / name).exists()
    _refused(capsys, [*argv, str(suite / "results.json")], "it is the suite's results.json")
    assert json.loads((suite / "results.json").read_text())["claims"]["clip-range"]["complete"]
    assert (tmp_path / "a").read_text() == "not a folder"
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["clip-range.png"]
    assert (tmp_path / "b" / "clip-range.png").read_bytes() == b"someone else's plot"


def test_report_and_results_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A write that fails midway (a full disk) leaves the earlier report as it was, and no temporary file."""
    from rpgrl.trainer import checkpoint

    report = tmp_path / "r.md"
    report.write_text("earlier report\n")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint.os, "fsync", full_disk)
    with pytest.raises(OSError):
        checkpoint.write_text_atomic(report, "new report")
    monkeypatch.undo()
    assert report.read_text() == "earlier report\n" and [q.name for q in tmp_path.iterdir()] == ["r.md"]
    checkpoint.write_text_atomic(report, "new report")
    assert report.read_text() == "new report" and [q.name for q in tmp_path.iterdir()] == ["r.md"]


def test_no_run_on_some_claims_keeps_the_others_records(tmp_path, capsys):
    """`--no-run` without a run cache reads the records in OUT/results.json, then rewrote that file with the named
    claims only: `rpgrl reproduce methods --no-run --out docs/results` deleted the records of the four other claims,
    kept nowhere else (a review's probe). They stay as they were; `all` afterwards reports what it did before."""
    committed = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results", "results.json")
    suite = tmp_path / "suite"
    suite.mkdir()
    with open(committed) as f:
        stored = json.load(f)
    (suite / "results.json").write_text(json.dumps(stored))
    assert len(stored["claims"]) == len(CLAIMS) > 1
    flags = ["--no-run", "--out", str(suite), "--report"]
    assert rpgrl_main(["reproduce", "methods", *flags, str(tmp_path / "one.md")]) == 0
    after = json.loads((suite / "results.json").read_text())
    assert list(after["claims"]) == list(stored["claims"])
    for name in CLAIMS:
        if name != "methods":
            assert after["claims"][name] == stored["claims"][name], name
    # the named claim as it was, Holm's correction included: it was taken over the named claims' comparisons only
    # (a family of 5 where the file's others had 13; a review's)
    assert after["claims"]["methods"] == stored["claims"]["methods"]
    n = sum(len(r["comparisons"]) for r in stored["claims"].values())
    assert (
        f"The suite makes {n} comparisons (this report shows 1 of its {len(CLAIMS)} claims)"
        in (tmp_path / "one.md").read_text()
    )
    capsys.readouterr()
    assert rpgrl_main(["reproduce", "all", *flags, str(tmp_path / "all.md")]) == 0
    printed = capsys.readouterr().out
    for name, claim in stored["claims"].items():
        assert f"  {name}: {claim['verdict']}\n" in printed, name


def test_a_run_cache_of_one_claim_keeps_the_other_claims_records(tmp_path, capsys):
    """With a run cache for the named claim (e.g. `rpgrl reproduce methods --out docs/results` run here), the
    records of the claims not named were dropped from OUT/results.json all the same (only the cache-less --no-run
    kept them). They stay as they were."""
    from rpgrl.reproduce.claims import warm_start_config

    committed = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results", "results.json")
    with open(committed) as f:
        stored = json.load(f)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "results.json").write_text(json.dumps(stored))
    scale = QUICK if stored["header"]["scale"] == QUICK.__dict__ else FULL
    seeds = sorted(int(s) for s in stored["header"]["seeds"])
    arm = CLAIMS["methods"].arms[0]
    record = next(a for a in stored["claims"]["methods"]["arms"] if a["name"] == arm.name)["runs"][str(seeds[0])]
    job = Job(arm.config(base_config(scale)), seeds[0], config_key(warm_start_config(scale), seeds[0]))
    run_dir(suite, job).mkdir(parents=True)
    (run_dir(suite, job) / "record.json").write_text(json.dumps(record))  # the cache holds one run of one claim
    flags = ["--no-run", "--out", str(suite), "--report", str(tmp_path / "one.md"), "--seeds", str(len(seeds))]
    assert rpgrl_main(["reproduce", "methods", *flags, *(["--quick"] if scale is QUICK else [])]) == 0
    after = json.loads((suite / "results.json").read_text())
    assert list(after["claims"]) == list(stored["claims"])
    for name in CLAIMS:
        if name != "methods":
            assert after["claims"][name] == stored["claims"][name], name
    # ... and the named claim's own records where the cache has fewer (one run cached of all those stored: the
    # report said "No data yet" and results.json kept that one run; a review's)
    methods = {a["name"]: a for a in after["claims"]["methods"]["arms"]}
    for arm_before in stored["claims"]["methods"]["arms"]:
        assert methods[arm_before["name"]]["runs"] == arm_before["runs"], arm_before["name"]
        assert methods[arm_before["name"]]["curves"] == arm_before["curves"], arm_before["name"]
    assert after["claims"]["methods"]["verdict"] == stored["claims"]["methods"]["verdict"]


def test_a_suite_at_another_scale_keeps_the_results_json_it_replaces(tmp_path, capsys):
    """A --quick cache in a folder whose results.json holds the full suite (docs/results: no run cache) rewrote it
    with the quick suite's one claim: five claims' records, kept nowhere else, were gone, where the same command
    without a cache is refused. The file it replaces is kept beside it, and said."""
    committed = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results", "results.json")
    suite = tmp_path / "suite"
    suite.mkdir()
    with open(committed) as f:
        before = f.read()
    (suite / "results.json").write_text(before)
    _cached_suite(suite, "clip-range", [0])
    argv = ["reproduce", "clip-range", "--quick", "--seeds", "1", "--out", str(suite), "--no-run"]
    assert rpgrl_main([*argv, "--report", str(tmp_path / "r.md")]) == 0
    assert "kept as" in capsys.readouterr().out
    assert (suite / "results-previous.json").read_text() == before
    assert list(json.loads((suite / "results.json").read_text())["claims"]) == ["clip-range"]
    assert rpgrl_main([*argv, "--report", str(tmp_path / "r.md")]) == 0  # the same suite again: nothing to keep
    assert not (suite / "results-previous-2.json").exists()


def test_no_run_merges_an_arms_stored_seeds_with_the_cached_ones(tmp_path):
    """results.json holding seeds 0 and 1 of each arm (copied from a machine that ran them) beside a cache holding
    seed 2 only: the file's two records replaced the cache's one, and seed 2, run and cached here, was left out of
    the report. Now each arm has all three, the cached seed's record as cached, and its mean curves over the three."""
    suite = tmp_path / "suite"
    _cached_suite(suite, "clip-range", [0, 1, 2])
    argv = ["reproduce", "clip-range", "--quick", "--seeds", "3", "--out", str(suite), "--no-run", "--report",
            str(tmp_path / "r.md")]  # fmt: skip
    assert rpgrl_main(argv) == 0
    stored = json.loads((suite / "results.json").read_text())
    for arm in stored["claims"]["clip-range"]["arms"]:
        del arm["runs"]["2"]
        arm["curves"] = {"reward": [0.2, 0.6], "entropy": [1.0, 1.0], "length": [8.0, 8.0]}  # over seeds 0 and 1
    (suite / "results.json").write_text(json.dumps(stored))
    base, warm = base_config(QUICK), reproduce_cli.warm_start_config(QUICK)
    for seed in (0, 1):
        for arm in CLAIMS["clip-range"].arms:
            record = run_dir(suite, Job(arm.config(base), seed, config_key(warm, seed))) / "record.json"
            record.unlink()
    assert rpgrl_main(argv) == 0
    after = json.loads((suite / "results.json").read_text())
    for arm in after["claims"]["clip-range"]["arms"]:
        assert sorted(arm["runs"]) == ["0", "1", "2"], arm["name"]
        assert arm["curves"]["reward"] == pytest.approx([(2 * 0.2 + 0.1) / 3, (2 * 0.6 + 0.3) / 3]), arm["name"]
