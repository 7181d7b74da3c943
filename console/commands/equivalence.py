"""`campaign equivalence PLAN`: does each candidate of the plan's `equivalence` section compute
the same audio as its reference? One insert-only verdict of kind `equivalence` per pair
(docs/equivalence.md).

    campaign equivalence plan.json [--pair NAME ...] [--dry-run] [--artifacts DIR] [--db DB]

Exit status: 0 every pair PASS, 1 any FAIL, 3 otherwise INCONCLUSIVE; 2 refused before running
anything (no section, unfrozen plan, unknown pair).
"""

from __future__ import annotations

from pathlib import Path

from console.commands.db import add_db_arg


def register(sub) -> None:
    p = sub.add_parser("equivalence", help="numerical equivalence of engine pairs on identical requests -> verdicts",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("plan", help="frozen plan file (or hash prefix) with an `equivalence` section")
    p.add_argument("--pair", action="append", default=None,
                   help="only this pair ('CANDIDATE vs REFERENCE', or the candidate's name); repeatable")
    p.add_argument("--dry-run", action="store_true", help="run and compare, print, issue no verdict")
    p.add_argument("--artifacts", help="folder for output audio, tensors and engine logs (default: next to the database)")
    add_db_arg(p)
    p.set_defaults(func=cmd_equivalence)


def cmd_equivalence(args) -> int:
    from rich.console import Console

    from console.commands.gate import exit_status
    from console.commands.plan import plan_for_arg
    from console.equivalence import print_outcomes, run_equivalence
    from data.store import open_store

    console = Console(width=max(Console().width, 140))
    with open_store(args.db) as store:
        plan = plan_for_arg(store, args.plan)
        artifacts = Path(args.artifacts) if args.artifacts else store.path.resolve().parent / "artifacts"
        outcomes = run_equivalence(store, plan, artifacts, log=lambda m: console.print(m, markup=False, highlight=False),
                                   issue=not args.dry_run, only=args.pair)
    print_outcomes(console, outcomes)
    if args.dry_run:
        console.print("dry run: nothing issued")
    return exit_status([o.result.verdict for o in outcomes])
