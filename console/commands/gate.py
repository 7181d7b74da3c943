"""`campaign gate`: the nine noninferiority checks and the plan's throughput decision rules, issued
as insert-only verdicts; `campaign verdicts`: list issued verdicts.

    campaign gate plan.json [--db DB] [--dry-run]
    campaign gate --scores FILE.csv|.parquet --wer-margin 0.2 --sim-margin 0.5 --mos-margin 0.05 \\
                  [--concurrencies 1,16,32] [--draws 20000] [--seed 20261022] [--method percentile|bca] \\
                  [--issue --db DB]

Exit status: 0 PASS, 1 FAIL, 3 INCONCLUSIVE (2 stays "usage or input error"). Plan mode issues
no verdict whose evidence is missing altogether (an arm never run or scored, a rule engine with no
complete run): it prints what is missing, and exits 2 if that leaves nothing to judge, else at
least 3 (the plan's question is not fully answered). The synthetic controls run first with the
same margins, draws, seed and method; if any control misses its known answer no verdict is issued.
A FAIL verdict rejects the candidate it judged, naming the verdict (docs/results.md, "Candidates").
In plan mode a PASS also needs the candidate's validators to have passed after the freeze and its
latest launch (data/validators.py; docs/plans.md, "Validators").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.flags import add_plan_hash
from console.commands.db import add_db_arg
from console.output import FORMATS, print_rows
from data.bootstrap_params import BOOTSTRAP_DEFAULTS as BOOT
from data.bootstrap_params import METHODS
from data.errors import CampaignError, first_line

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console


def register(sub) -> None:
    p = sub.add_parser("gate", help="noninferiority gates + decision rules -> insert-only verdicts",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("plan", nargs="?", help="frozen plan file (omit with --scores)")
    p.add_argument("--scores", help="long-format CSV or Parquet: arm, concurrency, repeat, utt_id, "
                                    "wer_errors, wer_words, sim, mos (an older table's utmos is read as mos)")
    p.add_argument("--wer-margin", type=float, help="WER margin in percentage points (--scores)")
    p.add_argument("--sim-margin", type=float, help="SIM (x100) drop margin (--scores)")
    p.add_argument("--mos-margin", "--utmos-margin", dest="mos_margin", type=float,
                   help="MOS drop margin (--scores; --utmos-margin: its older name)")
    p.add_argument("--concurrencies", type=_concurrencies, default=None, metavar="C,C,...",
                   help="--scores: the concurrencies the verdict requires in both arms (default 1,16,32); "
                        "others in the table are shown as not part of the verdict")
    p.add_argument("--draws", type=int, default=None, help=f"bootstrap draws B (--scores; default {BOOT.draws})")
    p.add_argument("--seed", type=int, default=None, help=f"bootstrap seed (--scores; default {BOOT.seed})")
    p.add_argument("--method", choices=METHODS, default=None, help=f"--scores; default {BOOT.method}")
    p.add_argument("--confidence", type=float, default=None, help=f"--scores; default {BOOT.confidence}")
    p.add_argument("--dry-run", action="store_true", help="plan mode: compute and print, issue nothing")
    p.add_argument("--issue", action="store_true", help="--scores mode: also store the verdict (needs the store)")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="table (default); csv or json: one row per check of every verdict judged on stdout, "
                        "everything else on stderr")
    add_db_arg(p)
    p.set_defaults(func=cmd_gate)

    v = sub.add_parser("verdicts", help="list issued verdicts")
    add_plan_hash(v)
    v.add_argument("--format", choices=FORMATS, default="table")
    add_db_arg(v)
    v.set_defaults(func=cmd_verdicts)


# -- input ------------------------------------------------------------------------------------

DEFAULT_CONCURRENCIES = (1, 16, 32)  # the reference campaign's quality concurrencies (docs/statistics.md)


def _concurrencies(text: str) -> tuple[int, ...]:
    """'1,16,32' -> (1, 16, 32): positive, distinct, ascending."""
    import argparse

    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers separated by commas") from None
    if not values or min(values) < 1 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected distinct positive integers separated by commas")
    return tuple(sorted(values))


# Missing-value spellings for the numeric columns only (pandas' defaults): ids and arms are read
# as written, so a prompt id `NA` or `null` is an id, never a missing value.
_NA = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
       "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


def read_scores(path: str) -> pd.DataFrame:
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise CampaignError(f"{path}: no such file")
    suffix = p.suffix.lower()
    try:
        if suffix == ".csv":
            numeric = ("concurrency", "repeat", "wer_errors", "wer_words", "sim", "mos", "utmos", "gap")
            return pd.read_csv(p, dtype={"arm": str, "utt_id": str}, keep_default_na=False,
                               na_values={c: list(_NA) for c in numeric})
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(p)
    except Exception as exc:  # pandas/pyarrow raise many parser error types; all are user input errors
        raise CampaignError(f"{path}: cannot read ({first_line(exc)})") from None
    raise CampaignError(f"{path}: unknown format {suffix or '(none)'}; use .csv or .parquet")


# -- commands ---------------------------------------------------------------------------------

def exit_status(verdicts: list[str]) -> int:
    """The exit status of the verdicts issued (module docstring): 1 if any FAILs, else the worst
    of 0 PASS and 3 INCONCLUSIVE."""
    from stats.gates import FAIL, INCONCLUSIVE, PASS

    codes = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
    return max(codes[v] for v in verdicts) if FAIL not in verdicts else codes[FAIL]


def cmd_gate(args) -> int:
    from console.gate_tables import MACHINE_COLUMNS
    from console.output import output_console

    machine: list[list[Any]] | None = None if args.format == "table" else []
    console = output_console(stderr=machine is not None)  # csv/json: stdout holds the checks alone
    if args.scores and args.plan:
        raise CampaignError("give a plan file or --scores FILE, not both")
    if args.plan and args.concurrencies:
        raise CampaignError("--concurrencies is for --scores: a plan gates its quality.concurrencies")
    if not args.scores and not args.plan:
        raise CampaignError("give a frozen plan file (campaign gate plan.json) or --scores FILE")
    status = gate_scores(args, console, machine) if args.scores else gate_plan(args, console, machine)
    if machine is not None:
        print_rows(MACHINE_COLUMNS, machine, args.format)
    return status


def gate_scores(args, console: Console, machine: list[list[Any]] | None = None) -> int:
    from console.gate_tables import print_checks, require_controls
    from data.pool_status import external_status
    from data.store import open_store, resolve_db_path
    from stats.gates import GateConfig, evaluate_gates, validate_long_frame

    missing = [f for f, v in (("--wer-margin", args.wer_margin), ("--sim-margin", args.sim_margin),
                              ("--mos-margin", args.mos_margin)) if v is None]
    if missing:
        raise CampaignError(f"--scores needs explicit margins: {', '.join(missing)} missing")
    cfg = GateConfig(margins={"wer": args.wer_margin, "sim": args.sim_margin, "mos": args.mos_margin},
                     draws=args.draws or BOOT.draws, seed=BOOT.seed if args.seed is None else args.seed,
                     method=args.method or BOOT.method, confidence=args.confidence or BOOT.confidence,
                     concurrencies=args.concurrencies or DEFAULT_CONCURRENCIES)
    frame = validate_long_frame(read_scores(args.scores), args.scores)
    controls = require_controls(console, cfg, resolve_db_path(args.db))
    result = evaluate_gates(frame, cfg, source=str(args.scores))
    evidence = external_status(str(args.scores))
    print_checks(console, result, f"noninferiority gates: {args.scores}", evidence, machine)
    if args.issue:
        from stats.metrics import METRICS_VERSION
        from stats.verdict_doc import issue_quality

        with open_store(args.db, create=True) as store:  # a table's verdict may be a store's first record
            vid = issue_quality(store, result, frame, metrics_version=METRICS_VERSION, controls=controls,
                                source=str(args.scores), pool=evidence.as_dict())
        console.print(f"verdict issued: {vid}")
    return exit_status([result.verdict])


def gate_plan(args, console: Console, machine: list[list[Any]] | None = None) -> int:
    from console.candidates import on_verdict
    from console.gate_tables import print_checks, print_rule, require_controls
    from console.verdicts import quality as quality_kind
    from console.verdicts import throughput as throughput_kind
    from data.plan_freeze import frozen_plan_for_file
    from data.pool_status import pool_status
    from data.store import open_store
    from stats.gates import FAIL, GateConfig, evaluate_gates, missing_evidence
    from stats.metrics import METRICS_VERSION
    from stats.quality.registry import scorer_status
    from stats.quality.scoring import scores_frame
    from stats.rule_noise import store_rule_noise
    from stats.throughput_rules import collect_values, missing_runs
    from stats.verdict_doc import issue_quality, issue_rule

    from data.profiler import exclude_overlapping

    with open_store(args.db) as store:
        plan = frozen_plan_for_file(store, args.plan)
        if not args.dry_run:
            exclude_overlapping(store)  # a run inside a profiler window never reaches a verdict (data/profiler.py)
        cfg = GateConfig.from_plan(plan)
        verdicts: list[str] = []
        issued: list[str] = []
        q = plan.quality
        # What there is to judge, before anything runs: a verdict about evidence never gathered
        # (no runs, no scores) is not issued (docs/statistics.md, "Nothing to judge").
        quality: list[tuple[str, Any, pd.DataFrame]] = []
        missing: list[str] = []
        if q.baseline and plan.quality_candidates:
            for candidate in plan.quality_candidates:  # one verdict per candidate, each against the baseline
                view = plan.for_candidate(candidate)
                frame = scores_frame(store, view)
                gap = missing_evidence(frame, {"baseline": str(q.baseline), "candidate": candidate})
                if gap:
                    missing.append(f"quality {candidate} vs {q.baseline}: {gap}")
                else:
                    quality.append((candidate, view, frame))
        else:
            console.print("plan has no quality baseline/candidate: no noninferiority gates")
        rules = []
        for rule in plan.decision_rules:
            if rule.kind != "throughput_exceeds":
                console.print(f"decision rule {rule.name}: kind {rule.kind!r} is not evaluated by the gate")
                continue
            values = collect_values(store, plan, rule)
            gap = missing_runs(rule, values)
            if gap:
                missing.append(f"decision rule {rule.name}: {gap}")
            else:
                rules.append((rule, values))
        for line in missing:
            console.print(f"nothing to judge, no verdict: {line}")
        if missing and not (quality or rules):
            raise CampaignError(f"plan {plan.hash[:12]}: nothing to judge ({len(missing)} verdict(s) lack all their "
                                "evidence: run the cells and `campaign score` first); no verdict issued")
        controls = require_controls(console, cfg, store.path)
        for candidate, view, frame in quality:
            status = scorer_status(view)
            result = evaluate_gates(frame, cfg, scorer_status=status, source=f"plan {plan.hash[:12]}")
            decision = quality_kind.decide(store, plan, candidate, result)  # equivalence, then validators
            result, validators = decision.result, decision.validators
            if decision.equivalence_cap is not None:
                console.print(f"{candidate}: quality PASS capped to {decision.equivalence_cap.cap}: "
                              f"{decision.equivalence_cap.reason}", markup=False, highlight=False)
            evidence = pool_status(store, view)
            print_checks(console, result, f"noninferiority gates: {plan.name} ({candidate} vs {q.baseline})",
                         evidence, machine)
            if validators.reason:
                console.print(validators.reason, highlight=False)
            verdicts.append(result.verdict)
            if not args.dry_run:
                issued.append(issue_quality(store, result, frame, plan=view, metrics_version=METRICS_VERSION,
                                            controls=controls, scorer_status=status,
                                            scorers=dict(frame.attrs.get("scorers") or {}),
                                            pool=evidence.as_dict(), validators=validators))
                on_verdict(store, plan, candidate, issued[-1], result.verdict)  # a FAIL rejects the candidate
        for rule, values in rules:
            rr, validators = throughput_kind.decide(store, plan, rule, values)  # the rule, then validators
            print_rule(console, rr, store_rule_noise(store, rr.checks_dicts(), rr.candidate, rr.reference), machine)
            if validators.reason:
                console.print(validators.reason, highlight=False)
            verdicts.append(rr.verdict)
            if not args.dry_run:
                issued.append(issue_rule(store, rr, plan=plan, metrics_version=METRICS_VERSION, validators=validators))
                on_verdict(store, plan, rule.candidate, issued[-1], rr.verdict)
    for vid in issued:
        console.print(f"verdict issued: {vid}")
    if plan.parent_hash and issued:
        print_earlier_verdicts(console, args.db, plan)
    if args.dry_run:
        console.print("dry run: nothing issued")
    if not verdicts:
        raise CampaignError(f"plan {plan.hash[:12]}: nothing to gate (no quality arms and no decision rules)")
    # a verdict not issued for want of evidence leaves the plan's question open: at least 3
    return max(exit_status(verdicts), 3) if missing and FAIL not in verdicts else exit_status(verdicts)


def print_earlier_verdicts(console: Console, db, plan) -> None:
    """An addendum never re-judges: its ancestors' verdicts stay as issued, beside the new ones."""
    from data.manifest import plan_lineage
    from data.store import open_store
    from data.verdicts import list_verdicts

    with open_store(db) as store:
        earlier = [v for h in plan_lineage(store, plan.hash)[1:] for v in list_verdicts(store, h)]
    for v in earlier:
        console.print(f"earlier verdict of parent plan {v['plan_hash'][:12]} stays as issued: {v['verdict_id']} "
                      f"({v['verdict']})")


def cmd_verdicts(args) -> int:
    from data.plan_loading import resolve_hash
    from data.pool_status import verdict_evidence
    from data.store import open_store
    from data.verdicts import list_verdicts

    with open_store(args.db) as store:
        rows = list_verdicts(store, resolve_hash(store, args.plan) if args.plan else None)
        evidence = verdict_evidence(store)
    for r in rows:
        r["evidence"] = evidence.get(r["verdict_id"], "-")
    cols = ["verdict_id", "created_at", "kind", "name", "verdict", "evidence", "method", "draws", "seed", "plan_hash"]
    print_rows(cols, [[r[c] for c in cols] for r in rows], args.format)
    return 0
