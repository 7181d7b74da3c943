"""`campaign gate`: the nine noninferiority checks and the plan's throughput decision rules, issued
as insert-only verdicts; `campaign verdicts`: list issued verdicts.

    campaign gate plan.json [--db DB] [--dry-run]
    campaign gate --scores FILE.csv|.parquet --wer-margin 0.2 --sim-margin 0.5 --utmos-margin 0.05 \\
                  [--draws 20000] [--seed 20261022] [--method percentile|bca] [--issue --db DB]

Exit status: 0 PASS, 1 FAIL, 3 INCONCLUSIVE (2 stays "usage or input error"). The synthetic
controls run first with the same margins, draws, seed and method; if any control misses its known
answer no verdict is issued.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from console.commands.db import add_db_arg
from console.output import FORMATS, print_rows
from data.errors import CampaignError, first_line
from data.pool_status import external_status, pool_status
from data.store import open_store
from stats.controls import all_ok, run_controls
from stats.gates import FAIL, INCONCLUSIVE, PASS, GateConfig, evaluate_gates, validate_long_frame
from stats.results.checks import CheckRow

EXIT = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
STYLE = {PASS: "green", FAIL: "bold red", INCONCLUSIVE: "yellow"}


def register(sub) -> None:
    p = sub.add_parser("gate", help="noninferiority gates + decision rules -> insert-only verdicts",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("plan", nargs="?", help="frozen plan file (omit with --scores)")
    p.add_argument("--scores", help="long-format CSV or Parquet: arm, concurrency, repeat, utt_id, "
                                    "wer_errors, wer_words, sim, utmos")
    p.add_argument("--wer-margin", type=float, help="WER margin in percentage points (--scores)")
    p.add_argument("--sim-margin", type=float, help="SIM (x100) drop margin (--scores)")
    p.add_argument("--utmos-margin", type=float, help="UTMOS drop margin (--scores)")
    p.add_argument("--draws", type=int, default=None, help="bootstrap draws B (--scores; default 20000)")
    p.add_argument("--seed", type=int, default=None, help="bootstrap seed (--scores; default 20261022)")
    p.add_argument("--method", choices=("percentile", "bca"), default=None, help="--scores; default percentile")
    p.add_argument("--confidence", type=float, default=None, help="--scores; default 0.95")
    p.add_argument("--dry-run", action="store_true", help="plan mode: compute and print, issue nothing")
    p.add_argument("--issue", action="store_true", help="--scores mode: also store the verdict (needs the store)")
    add_db_arg(p)
    p.set_defaults(func=cmd_gate)

    v = sub.add_parser("verdicts", help="list issued verdicts")
    v.add_argument("--plan", help="plan hash (prefix)")
    v.add_argument("--format", choices=FORMATS, default="table")
    add_db_arg(v)
    v.set_defaults(func=cmd_verdicts)


# -- rendering --------------------------------------------------------------------------------

def _fmt(v, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:+.{digits}f}" if isinstance(v, float) else str(v)


def print_checks(console: Console, result, title: str, evidence=None) -> None:
    """The checks table; `evidence`: the quality pool's status (data.pool_status.PoolStatus)."""
    t = Table(title=title)
    for col in ("C", "metric", "base", "cand", "point", "upper bound", "margin", "ids", "result", "note"):
        t.add_column(col, justify="right" if col not in ("metric", "result", "note") else "left")
    for check in result.checks:
        c = CheckRow.from_quality(check.as_dict())  # the one row type, labels and units (stats/results/checks.py)
        pct = "%" if c.metric == "wer" else ""
        unit = c.unit if c.unit == "pp" else f" {c.unit}"  # '+1.6667pp', '+0.1200 x100'
        t.add_row(str(c.concurrency), c.label, "-" if c.base_value is None else f"{c.base_value:.3f}{pct}",
                  "-" if c.cand_value is None else f"{c.cand_value:.3f}{pct}", _fmt(c.point) + unit,
                  _fmt(c.bound) + unit, f"{c.margin:g}{unit}",
                  f"{c.n_ids}/{c.n_expected}", f"[{STYLE[c.status]}]{c.status}[/]",
                  ("diagnostic: " if c.diagnostic_only else "") + c.reason)
    console.print(t)
    cfg = result.config
    console.print(f"bootstrap: {cfg.method}, B={cfg.draws}, seed={cfg.seed}, one-sided {cfg.confidence:g} upper "
                  f"bound; pass iff bound < margin. Input: {result.inputs['rows']} rows, sha256 "
                  f"{result.inputs['sha256'][:16]}…")
    if result.config.repeats is not None:
        console.print(f"coverage: every id needs exactly measured repeats {', '.join(map(str, result.config.repeats))} "
                      "in both arms (the plan's sweep.measured_repeats); otherwise its checks are INCONCLUSIVE")
    else:
        console.print("coverage: every id needs the same measured repeats in both arms (every repeat the table has at "
                      "its concurrency); otherwise its checks are INCONCLUSIVE")
    if evidence is not None:
        style = {"reserved": "green", "reused": "bold yellow"}.get(evidence.status, "")
        console.print(f"evidence: [{style or 'default'}]{evidence.status}[/] — {evidence.summary}")
    for a in result.attribution:
        if not a["contributions"] or a["net_error_change"] == 0:
            continue
        top = a["contributions"][0]
        wt = a.get("without_top") or {}
        console.print(
            f"C{a['concurrency']} WER attribution: net {a['net_error_change']:+d} errors; top {top['utt_id']} "
            f"{top['delta']:+d} ({(top['share_of_net'] or 0) * 100:.0f}% of net)"
            + (f"; without it {wt['point_pp']:+.4f}pp (bound {wt['bound_pp']:+.4f}), change "
               f"{'survives' if a['survives_without_top'] else 'does not survive'}" if wt else "")
            + " [diagnostic only]")
    console.print(f"Quality verdict: [{STYLE[result.verdict]}]{result.verdict}[/]")


def print_rule(console: Console, rr) -> None:
    t = Table(title=f"decision rule {rr.name}: {rr.candidate} / {rr.reference} {rr.metric}")
    for col in ("C", "candidate repeats", "reference repeats", "cand median (CV)", "ref median (CV)",
                "ratios", "geo-mean", f"lower {rr.confidence:g}", "result", "note"):
        t.add_column(col)
    for c in rr.cells:
        rep = lambda vals: ", ".join("-" if v["value"] is None else f"{v['value']:.1f}" for v in vals)  # noqa: E731
        sp = lambda s: "-" if s["median"] is None else f"{s['median']:.1f} ({(s['cv'] or 0) * 100:.1f}%)"  # noqa: E731
        t.add_row(str(c.concurrency), rep(c.candidate), rep(c.reference), sp(c.candidate_spread),
                  sp(c.reference_spread), ", ".join(f"{p['ratio']:.3f}" for p in c.pairs),
                  _fmt(c.geo_mean_ratio, 3).lstrip("+"), _fmt(c.lower_bound_ratio, 3).lstrip("+"),
                  f"[{STYLE[c.status]}]{c.status}[/]", c.reason)
    console.print(t)
    console.print(f"bound: {rr.method}; pass iff lower bound > {rr.min_ratio:g}. "
                  f"Rule verdict: [{STYLE[rr.verdict]}]{rr.verdict}[/]")


def print_controls(console: Console, results) -> None:
    t = Table(title="synthetic controls")
    for col in ("control", "expected", "observed", "ok", "detail"):
        t.add_column(col)
    for r in results:
        t.add_row(r.name, r.expected, r.observed, "[green]yes[/]" if r.ok else "[bold red]NO[/]", r.detail)
    console.print(t)


def require_controls(console: Console, cfg: GateConfig):
    results = run_controls(cfg)
    if not all_ok(results):
        print_controls(console, results)
        bad = ", ".join(r.name for r in results if not r.ok)
        raise CampaignError(f"synthetic controls failed ({bad}): the gate refuses to issue a verdict")
    console.print(f"synthetic controls: {len(results)}/{len(results)} gave their known answer")
    return results


# -- input ------------------------------------------------------------------------------------

def read_scores(path: str) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise CampaignError(f"{path}: no such file")
    suffix = p.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(p, dtype={"arm": str, "utt_id": str})
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(p)
    except Exception as exc:  # pandas/pyarrow raise many parser error types; all are user input errors
        raise CampaignError(f"{path}: cannot read ({first_line(exc)})") from None
    raise CampaignError(f"{path}: unknown format {suffix or '(none)'}; use .csv or .parquet")


# -- commands ---------------------------------------------------------------------------------

def cmd_gate(args) -> int:
    console = Console(width=max(Console().width, 160))
    if args.scores and args.plan:
        raise CampaignError("give a plan file or --scores FILE, not both")
    if args.scores:
        return gate_scores(args, console)
    if not args.plan:
        raise CampaignError("give a frozen plan file (campaign gate plan.json) or --scores FILE")
    return gate_plan(args, console)


def gate_scores(args, console: Console) -> int:
    missing = [f for f, v in (("--wer-margin", args.wer_margin), ("--sim-margin", args.sim_margin),
                              ("--utmos-margin", args.utmos_margin)) if v is None]
    if missing:
        raise CampaignError(f"--scores needs explicit margins: {', '.join(missing)} missing")
    cfg = GateConfig(margins={"wer": args.wer_margin, "sim": args.sim_margin, "utmos": args.utmos_margin},
                     draws=args.draws or 20000, seed=20261022 if args.seed is None else args.seed,
                     method=args.method or "percentile", confidence=args.confidence or 0.95)
    frame = validate_long_frame(read_scores(args.scores), args.scores)
    controls = require_controls(console, cfg)
    result = evaluate_gates(frame, cfg, source=str(args.scores))
    evidence = external_status(str(args.scores))
    print_checks(console, result, f"noninferiority gates: {args.scores}", evidence)
    if args.issue:
        from stats.metrics import METRICS_VERSION
        from stats.verdict_doc import issue_quality

        with open_store(args.db) as store:
            vid = issue_quality(store, result, frame, metrics_version=METRICS_VERSION, controls=controls,
                                source=str(args.scores), pool=evidence.as_dict())
        console.print(f"verdict issued: {vid}")
    return EXIT[result.verdict]


def gate_plan(args, console: Console) -> int:
    from data.plans import frozen_plan_for_file
    from stats.metrics import METRICS_VERSION
    from stats.quality.registry import scorer_status
    from stats.quality.scoring import scores_frame
    from stats.throughput_rules import collect_values, evaluate_rule
    from stats.verdict_doc import issue_quality, issue_rule

    with open_store(args.db) as store:
        plan = frozen_plan_for_file(store, args.plan)
        cfg = GateConfig.from_plan(plan)
        controls = require_controls(console, cfg)
        verdicts: list[str] = []
        issued: list[str] = []
        q = plan.quality
        if q.baseline and plan.quality_candidates:
            for candidate in plan.quality_candidates:  # one verdict per candidate, each against the baseline
                view = plan.for_candidate(candidate)
                frame = scores_frame(store, view)
                status = scorer_status(view)
                if frame.empty:
                    raise CampaignError(f"plan {plan.hash[:12]}: no quality rows (run the quality cells and "
                                        "`campaign score` first)")
                result = evaluate_gates(frame, cfg, scorer_status=status, source=f"plan {plan.hash[:12]}")
                evidence = pool_status(store, view)
                print_checks(console, result, f"noninferiority gates: {plan.name} ({candidate} vs {q.baseline})",
                             evidence)
                verdicts.append(result.verdict)
                if not args.dry_run:
                    issued.append(issue_quality(store, result, frame, plan=view, metrics_version=METRICS_VERSION,
                                                controls=controls, scorer_status=status,
                                                scorers=dict(frame.attrs.get("scorers") or {}),
                                                pool=evidence.as_dict()))
        else:
            console.print("plan has no quality baseline/candidate: no noninferiority gates")
        for rule in plan.decision_rules:
            if rule.kind != "throughput_exceeds":
                console.print(f"decision rule {rule.name}: kind {rule.kind!r} is not evaluated by the gate")
                continue
            rr = evaluate_rule(rule, collect_values(store, plan, rule))
            print_rule(console, rr)
            verdicts.append(rr.verdict)
            if not args.dry_run:
                issued.append(issue_rule(store, rr, plan=plan, metrics_version=METRICS_VERSION))
    for vid in issued:
        console.print(f"verdict issued: {vid}")
    if plan.parent_hash and issued:
        print_earlier_verdicts(console, args.db, plan)
    if args.dry_run:
        console.print("dry run: nothing issued")
    if not verdicts:
        raise CampaignError(f"plan {plan.hash[:12]}: nothing to gate (no quality arms and no decision rules)")
    return max(EXIT[v] for v in verdicts) if FAIL not in verdicts else EXIT[FAIL]


def print_earlier_verdicts(console: Console, db, plan) -> None:
    """An addendum never re-judges: its ancestors' verdicts stay as issued, beside the new ones."""
    from data.manifest import plan_lineage
    from data.verdicts import list_verdicts

    with open_store(db) as store:
        earlier = [v for h in plan_lineage(store, plan.hash)[1:] for v in list_verdicts(store, h)]
    for v in earlier:
        console.print(f"earlier verdict of parent plan {v['plan_hash'][:12]} stays as issued: {v['verdict_id']} "
                      f"({v['verdict']})")


def cmd_verdicts(args) -> int:
    from data.plans import resolve_hash
    from data.pool_status import verdict_evidence
    from data.verdicts import list_verdicts

    with open_store(args.db) as store:
        rows = list_verdicts(store, resolve_hash(store, args.plan) if args.plan else None)
        evidence = verdict_evidence(store)
    for r in rows:
        r["evidence"] = evidence.get(r["verdict_id"], "-")
    cols = ["verdict_id", "created_at", "kind", "name", "verdict", "evidence", "method", "draws", "seed", "plan_hash"]
    print_rows(cols, [[r[c] for c in cols] for r in rows], args.format, console=Console(width=max(Console().width, 220)))
    return 0
