"""From run records to the suite's results: per-arm intervals, paired comparisons, verdicts, JSON, Markdown, plots.

Everything in `docs/results.md` is generated here from the records; nothing is typed by hand. A comparison's
status follows from its 95% t interval of the per-seed difference and what the paper leads one to expect (below
MIN_SEEDS paired seeds it is unresolved whatever the interval; with every per-seed difference equal, it is resolved
only by the exact sign-flip test, from 6 seeds on, `status`):
    higher   contradicts when the interval lies below 0; falls short when it lies below +margin (it rules out an
             advantage of the size that would reproduce the claim, even if one smaller than that is resolved);
             supports when it lies above 0; else unresolved
    similar  consistent when the interval lies within +-margin, contradicts when it lies wholly outside, else
             unresolved (an equivalence test: a small but resolved difference is still "similar")
    differs  supports when the interval lies beyond +-margin, contradicts when it lies within it (then the two do
             not differ by the claimed size), else unresolved
and a claim's verdict from its comparisons' statuses (`verdict`). Each status rests on a t test (`status_p`), and
the comparisons of the whole suite are one family of tests: each also gets Holm's adjustment over the family
(`add_multiplicity`), and each claim a second verdict in which a status that does not survive it is unresolved.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from rpgrl.config import Config, config_to_dict
from rpgrl.reproduce.claims import Claim
from rpgrl.reproduce.stats import (
    LEVEL,
    MIN_SEEDS,
    Interval,
    holm,
    mean_interval,
    p_side,
    paired_difference,
    zero_spread,
)

LABELS = {
    "final": "greedy Last",
    "best": "greedy Best",
    "sampled": "sampled mean@k",
    "entropy": "entropy",
    "reward": "reward",
    "length": "length",
    "max_log_w": "max abs log w",
    "collapsed": "collapsed",
}
POINTS = {"final", "best", "sampled", "reward"}  # fractions shown as percentage points


def metric_values(runs: dict[int, dict], metric: str) -> dict[int, float]:
    """Per seed, the metric's value (collapsed as 0/1); seeds where it is missing or NaN are left out, and so are
    runs that trained on nothing (every group scored alike: they say nothing of the algorithm)."""
    out = {}
    for seed, r in runs.items():
        if untrained(r):
            continue
        v = r.get(metric)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        out[seed] = float(v)
    return out


def untrained(record: dict) -> bool:
    """The run updated the policy on no sequence (records before this was recorded count as trained)."""
    return record.get("trained") == 0


def status(diff: Interval, expect: str, margin: float = 0.0) -> str:
    """The comparison's status from its interval (the module's docstring); with no spread among the per-seed
    differences (`stats.zero_spread`), a resolved status only where its test's p (`status_p`: the sign-flip test
    there) is below ALPHA, so three equal differences are unresolved, as a zero-width interval proves nothing."""
    found = _interval_status(diff, expect, margin)
    if found in RESOLVED and zero_spread(diff) and not status_p(diff, expect, margin, found) < ALPHA:
        return "unresolved"
    return found


def _interval_status(diff: Interval, expect: str, margin: float) -> str:
    if diff.n == 0 or math.isnan(diff.mean):
        return "no data"
    if diff.n < MIN_SEEDS:
        return "unresolved"
    if expect == "higher":
        if diff.high < 0:
            return "contradicts"
        if diff.high < margin:
            return "falls short"
        return "supports" if diff.low > 0 else "unresolved"
    within = -margin <= diff.low and diff.high <= margin
    if expect == "similar":
        if within:
            return "consistent"
        return "contradicts" if diff.low > margin or diff.high < -margin else "unresolved"
    if diff.low > margin or diff.high < -margin:
        return "supports"
    return "contradicts" if margin > 0 and within else "unresolved"


ALPHA = 1 - LEVEL
RESOLVED = ("supports", "consistent", "contradicts", "falls short")
EQUAL_SEEDS = next(n for n in range(2, 64) if 2.0 ** (1 - n) < ALPHA)
"""paired seeds from which equal differences can resolve (the sign-flip test's smallest p, 2^(1 - n), below ALPHA)"""


def status_p(diff: Interval, expect: str, margin: float, status_: str) -> float:
    """The p-value of the t test `status_` rests on (each below ALPHA exactly when its interval condition holds,
    `stats.p_side`): higher: above 0 (supports), below 0 (contradicts), below +margin (falls short); similar:
    within +-margin (consistent: both one-sided tests, the larger p), beyond it (contradicts); differs: beyond
    +-margin (supports), within it (contradicts). Unresolved: the smallest p of the statuses it could have had."""
    m = margin

    def within() -> float:
        return max(p_side(diff, -m, 1), p_side(diff, m, -1))

    def beyond() -> float:
        return min(p_side(diff, m, 1), p_side(diff, -m, -1))

    if expect == "higher":
        tests = {"supports": p_side(diff, 0.0, 1), "contradicts": p_side(diff, 0.0, -1)}
        if m:
            tests["falls short"] = p_side(diff, m, -1)
    elif expect == "similar":
        tests = {"consistent": within(), "contradicts": beyond()}
    else:
        tests = {"supports": beyond(), **({"contradicts": within()} if m else {})}
    return tests[status_] if status_ in tests else min(tests.values())


def add_multiplicity(claims: dict[str, dict]) -> None:
    """Every comparison of the suite's claim results with MIN_SEEDS seeds or more gets `p` (`status_p`), `p_holm`
    (Holm's adjustment over all of them) and `family` (how many); every claim `verdict_holm`, its verdict with each
    resolved status whose adjusted p is not below ALPHA counted as unresolved."""
    comps = [c for r in claims.values() for c in r["comparisons"]]
    ps = []
    for c in comps:
        d = Interval(**c["difference"])
        ps.append(status_p(d, c["expect"], c["margin"], c["status"]) if d.n >= MIN_SEEDS else math.nan)
    family = sum(not math.isnan(p) for p in ps)
    for c, p, adjusted in zip(comps, ps, holm(ps), strict=True):
        if not math.isnan(p):
            c.update(p=p, p_holm=adjusted, family=family)
    for r in claims.values():
        statuses = [
            "unresolved" if c["status"] in RESOLVED and not c.get("p_holm", 1.0) < ALPHA else c["status"]
            for c in r["comparisons"]
        ]
        r["verdict_holm"] = verdict(statuses)


def mixed_commits(a: dict[int, dict], b: dict[int, dict], seeds: set[int]) -> list[int]:
    """The paired seeds whose two runs ran at different commits (both known): their difference may hold a code
    change as well as the arms' (the run cache is keyed by config and seed, not by commit)."""
    return sorted(s for s in seeds if (ca := a[s].get("commit")) and (cb := b[s].get("commit")) and ca != cb)


def verdict(statuses: list[str]) -> str:
    """One word-group for a claim from its comparisons' statuses."""
    good = sum(s in ("supports", "consistent") for s in statuses)
    bad = sum(s in ("contradicts", "falls short") for s in statuses)
    if not statuses or all(s == "no data" for s in statuses):
        return "No data yet"
    if bad and good:
        return "Mixed at this scale"
    if bad:
        return "Contradicted at this scale" if "contradicts" in statuses else "Not reproduced at this scale"
    if good == len(statuses):
        return "Reproduced at this scale"
    if good:
        return "Partly reproduced at this scale"
    return "Not resolved at this scale"


def config_changes(cfg: Config, base: Config) -> list[str]:
    """The `--section.field value` flags that turn `base` into `cfg`."""
    a, b = config_to_dict(cfg), config_to_dict(base)
    return [
        f"--{sec}.{k} {_flag(v)}"
        for sec in a
        for k, v in a[sec].items()
        if v != b[sec][k] and not (sec == "model" and k == "path")
    ]


def _flag(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v).lower() if isinstance(v, bool) else str(v)


def claim_result(claim: Claim, runs: dict[str, dict[int, dict]], base: Config, seeds: list[int]) -> dict:
    """`runs`: arm name -> seed -> record. The claim's JSON result: arms with intervals, comparisons, verdict."""
    arms = []
    for arm in claim.arms:
        r = runs.get(arm.name, {})
        summary = {}
        for m in {*claim.columns, "final", "start", "wall_seconds", "reward", "entropy"}:
            iv = mean_interval(list(metric_values(r, m).values()))
            summary[m] = dataclasses.asdict(iv)
        arms.append(
            {
                "name": arm.name,
                "flags": config_changes(arm.config(base), base),
                "seeds": sorted(r),
                "collapses": sum(bool(x.get("collapsed")) for x in r.values()),
                "untrained": sorted(s for s, x in r.items() if untrained(x)),
                "summary": summary,
                "runs": {str(s): {k: v for k, v in x.items() if k != "curves"} for s, x in sorted(r.items())},
                "curves": _mean_curves(list(r.values())),
            }
        )
    comps = []
    for c in claim.comparisons:
        ra, rb = runs.get(c.a, {}), runs.get(c.b, {})
        a, b = metric_values(ra, c.metric), metric_values(rb, c.metric)
        diff = paired_difference(a, b)
        comps.append(
            {
                **dataclasses.asdict(c),
                "difference": dataclasses.asdict(diff),
                "status": status(diff, c.expect, c.margin),
                "mixed_commits": mixed_commits(ra, rb, set(a) & set(b)),
            }
        )
    complete = all(len(runs.get(a.name, {})) >= len(seeds) for a in claim.arms)
    return {
        "name": claim.name,
        "title": claim.title,
        "paper": claim.paper,
        "caveat": claim.caveat,
        "columns": list(claim.columns),
        "arms": arms,
        "comparisons": comps,
        "complete": complete,
        "verdict": verdict([c["status"] for c in comps]),
    }


def _mean_curves(records: list[dict]) -> dict[str, list[float | None]]:
    """Per step, the mean over seeds of each curve (steps some runs did not reach average the others)."""
    out: dict[str, list[float | None]] = {}
    for key in ("reward", "entropy", "length"):
        curves = [r["curves"][key] for r in records if r.get("curves")]
        n = max((len(c) for c in curves), default=0)
        col = []
        for i in range(n):
            vals = [c[i] for c in curves if i < len(c) and c[i] is not None]
            col.append(sum(vals) / len(vals) if vals else None)
        out[key] = col
    return out


# ---------------------------------------------------------------------------------------------------------------
# Markdown


def _fmt(iv: dict, metric: str) -> str:
    if not iv["n"] or math.isnan(iv["mean"]):
        return "-"
    scale = 100 if metric in POINTS else 1
    digits = 1 if metric in POINTS else 2 if metric != "entropy" else 3
    m, lo, hi = (iv[k] * scale for k in ("mean", "low", "high"))
    unit = "%" if metric in POINTS else ""
    if math.isnan(lo):  # one seed: no interval
        return f"{m:.{digits}f}{unit}"
    return f"{m:.{digits}f}{unit} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _diff_text(c: dict) -> str:
    d = c["difference"]
    if not d["n"]:
        return f"{c['a']} vs {c['b']} on {LABELS[c['metric']]}: no paired seeds yet"
    pts = c["metric"] in POINTS
    scale, unit = (100, " points") if pts else (1, "")
    digits = 1 if pts else 3
    bounds = "" if math.isnan(d["low"]) else f" [{scale * d['low']:+.{digits}f}, {scale * d['high']:+.{digits}f}]"
    few = f" (fewer than {MIN_SEEDS} seeds: no verdict)" if d["n"] < MIN_SEEDS else ""
    if MIN_SEEDS <= d["n"] < EQUAL_SEEDS and c["status"] == "unresolved" and zero_spread(Interval(**d)):
        few = f" (every seed's difference is the same: no verdict below {EQUAL_SEEDS} seeds, by the sign-flip test)"
    return (
        f"{c['a']} minus {c['b']}, {LABELS[c['metric']]}: {scale * d['mean']:+.{digits}f}{unit}{bounds} over "
        f"{d['n']} seed{'s' if d['n'] > 1 else ''}, expected {c['expect']}{_margin(c, scale, unit)}: "
        f"**{c['status']}**{few}{_p_text(c)}{_mixed_text(c)}"
    )


def _p_text(c: dict) -> str:
    p, adjusted = c.get("p"), c.get("p_holm")
    if p is None or math.isnan(p):
        return ""
    return f" (p = {p:.3g}; {adjusted:.3g} after Holm's correction over the suite's {c['family']} comparisons)"


def _mixed_text(c: dict) -> str:
    seeds = c.get("mixed_commits") or []
    return (
        f" (at seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} the two runs ran at different commits)"
        if seeds
        else ""
    )


def _margin(c: dict, scale: float, unit: str) -> str:
    m = scale * c["margin"]
    if not m:
        return ""
    return {"similar": f" (within +-{m:g}{unit})", "higher": f" (by {m:g}{unit} or more)",
            "differs": f" (by more than {m:g}{unit} either way)"}[c["expect"]]  # fmt: skip


def claim_markdown(res: dict, plot_dir: str, n_seeds: int) -> str:
    cols = res["columns"]
    lines = [f"## {res['title']} (`{res['name']}`)", "", f"**Paper.** {res['paper']}", ""]
    para = f"**Verdict: {res['verdict']}.** " + " ".join(_diff_text(c) + "." for c in res["comparisons"])
    collapsed = [f"{a['name']} {a['collapses']}/{len(a['seeds'])}" for a in res["arms"] if a["collapses"]]
    para += f" Collapsed runs: {', '.join(collapsed)}." if collapsed else " No run collapsed."
    idle = [f"{a['name']} {len(a['untrained'])}/{len(a['seeds'])}" for a in res["arms"] if a.get("untrained")]
    if idle:
        para += (f" Runs that trained on no sequence (every group scored alike), left out of the numbers: "
                 f"{', '.join(idle)}.")  # fmt: skip
    if res.get("verdict_holm", res["verdict"]) != res["verdict"]:
        para += f" After Holm's correction over the suite: {res['verdict_holm']}."
    if res.get("caveat"):
        para += f" **Caveat.** {res['caveat']}"
    if not res["complete"]:
        para += f" Incomplete: not every arm has {n_seeds} seeds yet; numbers are over the seeds that ran."
    lines += [para, ""]
    lines.append("| arm | seeds | " + " | ".join(LABELS[c] for c in cols) + " | wall time per run |")
    lines.append("|---|---:|" + "---:|" * (len(cols) + 1))
    for a in res["arms"]:
        cells = [f"{a['collapses']}/{len(a['seeds'])}" if c == "collapsed" else _fmt(a["summary"][c], c) for c in cols]
        wall = a["summary"]["wall_seconds"]
        lines.append(
            f"| {a['name']} | {len(a['seeds'])} | " + " | ".join(cells) + f" | {wall['mean']:.0f} s |"
            if wall["n"]
            else f"| {a['name']} | 0 | " + " | ".join("-" for _ in cols) + " | - |"
        )
    lines += ["", f"![{res['name']}]({plot_dir}/{res['name']}.png)", ""]
    lines.append("<details><summary>flags of each arm (on top of the suite's base config)</summary>\n")
    lines += [f"- {a['name']}: `{' '.join(a['flags']) or '(the base config)'}`" for a in res["arms"]]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def plot_claim(res: dict, path: Path) -> None:
    """Final greedy accuracy per arm with its interval, and the per-step mean reward, entropy and length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    arms = res["arms"]
    names = [a["name"] for a in arms]
    finals = [a["summary"]["final"] for a in arms]
    means = [100 * f["mean"] if f["n"] else 0 for f in finals]
    err = [  # no bar for one seed: its t interval is NaN
        [100 * (f["mean"] - f["low"]) if f["n"] > 1 else 0 for f in finals],
        [100 * (f["high"] - f["mean"]) if f["n"] > 1 else 0 for f in finals],
    ]
    ax = axes[0]
    ax.barh(range(len(arms)), means, xerr=err, color="tab:blue", alpha=0.7)
    starts = [a["summary"]["start"]["mean"] for a in arms if a["summary"]["start"]["n"]]
    if starts:
        ax.axvline(100 * sum(starts) / len(starts), color="k", ls="--", lw=1, label="start of RL")
        ax.legend(loc="lower right", fontsize=7)
    ax.set_yticks(range(len(arms)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("held-out greedy accuracy at the end (%), 95% CI")
    panels = {"reward": "mean reward", "entropy": "entropy (nats/token)", "length": "response length (tokens)"}
    for ax, (key, label) in zip(axes[1:], panels.items(), strict=True):
        for a in arms:
            ys = a["curves"].get(key) or []
            pts = [(i + 1, y) for i, y in enumerate(ys) if y is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), lw=1, label=a["name"])
        ax.set_xlabel("RL step")
        ax.set_title(label + " (mean over seeds)", fontsize=9)
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle(res["title"])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
