"""`campaign accept PLAN [--candidate NAME]`: one acceptance verdict combining every piece the
candidate needs (quality, throughput, validators, equivalence, selection), each named; it carries
the plan's `claims` (docs/statistics.md, "Acceptance").

Exit status: 0 PASS, 1 FAIL, 3 INCONCLUSIVE, 2 refused before anything was issued. Earlier
acceptance verdicts stay as issued.
"""

from __future__ import annotations

from console.commands.db import add_db_arg
from console.flags import add_format
from data.errors import CampaignError


def register(sub) -> None:
    p = sub.add_parser("accept", help="issue the acceptance verdict of a candidate (every piece combined)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("plan", help="frozen plan file or hash")
    p.add_argument("--candidate", help="engine of the plan (default: its only quality candidate, else its selected one)")
    p.add_argument("--dry-run", action="store_true", help="compute and print, issue nothing")
    p.add_argument("--requester", help="with --statement: record the requester's sign-off on the verdict issued "
                                       "(an audit event; the bundle's REPRODUCE.md shows it)")
    p.add_argument("--statement", help="the requester's words, recorded with the sign-off")
    add_format(p)
    add_db_arg(p)
    p.set_defaults(func=cmd_accept)


def default_candidate(store, plan) -> str:
    """The plan's only quality candidate, else its only selected engine; refused otherwise."""
    from console.candidates import plan_selection

    if len(plan.quality_candidates) == 1:
        return plan.quality_candidates[0]
    selected = [s["candidate"] for s in plan_selection(store, plan)]
    if len(selected) == 1:
        return selected[0]
    raise CampaignError(f"plan {plan.hash[:12]}: --candidate: name one of {', '.join(e.name for e in plan.engines)} "
                        f"({len(plan.quality_candidates)} quality candidates, {len(selected)} selected)")


def cmd_accept(args) -> int:
    from console.candidates import plan_candidate
    from console.commands.gate import exit_status
    from console.commands.plan import plan_for_arg
    from console.output import output_console, print_rows
    from data.store import open_store
    from data.plan_freeze import frozen_plan_records
    from data.verdicts import sign_off
    from stats.acceptance import coverage_text, decide, issue_acceptance
    from stats.metrics import METRICS_VERSION

    if (args.requester is None) != (args.statement is None):
        raise CampaignError("--requester and --statement go together: who signs off, and what they state")
    if args.requester is not None and args.dry_run:
        raise CampaignError("--requester: a sign-off is on an issued verdict; drop --dry-run")
    console = output_console(stderr=args.format != "table")  # csv/json: stdout holds the pieces alone
    with open_store(args.db) as store:
        plan = plan_for_arg(store, args.plan)
        name = args.candidate or default_candidate(store, plan)
        plan.engine(name)  # an unknown engine: one line naming the plan's
        acc = decide(store, plan, name, plan_candidate(store, plan, name))
        vid = None if args.dry_run else issue_acceptance(store, plan, acc, METRICS_VERSION)
        signed = sign_off(store, vid, args.requester, args.statement) if vid and args.requester is not None else None
        plans = frozen_plan_records(store)
    print_rows(["piece", "status", "detail"], [(p.piece, p.status, p.detail) for p in acc.pieces], args.format,
               title=f"acceptance of {name} ({(acc.config_sha256 or '')[:12]}), plan {plan.name}", console=console)
    if plan.claims is not None:
        c = plan.claims
        console.print(f"claim ({c.status}): {c.scope}" + (f"; not claimed: {'; '.join(c.non_claims)}" if c.non_claims
                                                           else ""), highlight=False)
    console.print(f"claim {coverage_text(plan)}", highlight=False)
    console.print(f"plans frozen in this store ({len(plans)}): " + "; ".join(
        f"{p['name']} ({p['kind']} {p['plan_hash'][:12]}, seq {p['seq']})" + (" <- this plan" if p["plan_hash"] == plan.hash
                                                                              else "") for p in plans), highlight=False)
    console.print(f"acceptance {acc.verdict}" + (f": verdict issued: {vid}" if vid else " (dry run: nothing issued)"),
                  highlight=False)
    if signed is not None:
        console.print(f"signed off by {args.requester} (audit seq {signed}): {args.statement}", highlight=False)
    return exit_status([acc.verdict])
