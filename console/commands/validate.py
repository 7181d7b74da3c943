"""`campaign validate PLAN [--only NAME]`: run a frozen plan's validators and record every run
(docs/plans.md, "Validators").

Each validator's argv runs as a subprocess (never a shell) in its cwd, with its env, killed at its
timeout; each run is a `validator_runs` row with a `validator_run` audit event. Exit status: 0 when
every validator run passed; 1 when any failed (non-zero exit, timeout, missing executable or cwd),
one line each; 2 for a refusal before anything ran (plan not frozen or altered, unknown --only
name, no validators, an env value that cannot be found).
"""

from __future__ import annotations

from console.commands.db import add_db_arg
from console.commands.plan import plan_for_arg
from console.flags import add_format
from data.errors import CampaignError


def register(sub) -> None:
    p = sub.add_parser("validate", help="run the frozen plan's validators (repository checks) and record each run")
    p.add_argument("plan", help="frozen plan file (must match its frozen hash) or plan hash")
    p.add_argument("--only", metavar="NAME", action="append",
                   help="run only this validator (repeatable); default: every validator of the plan")
    add_format(p)
    add_db_arg(p)
    p.set_defaults(func=cmd_validate)


def _selected(plan, only: list[str] | None):
    names = [v.name for v in plan.validators]
    if not names:
        raise CampaignError(f"plan {plan.hash[:12]}: has no validators to run (validators[] is empty)")
    unknown = [n for n in only or [] if n not in names]
    if unknown:
        raise CampaignError(f"--only {unknown[0]}: plan {plan.hash[:12]} has no validator of that name "
                            f"(have: {', '.join(names)})")
    return [v for v in plan.validators if not only or v.name in only]


def cmd_validate(args) -> int:
    import sys

    from console.output import output_console, print_rows
    from console.validation import run_validator
    from data.plan_loading import plan_secrets, validator_environment
    from data.store import open_store
    from data.validators import PASSED, record_run

    with open_store(args.db) as store:  # refusals come before anything runs
        plan = plan_for_arg(store, args.plan)
        chosen = _selected(plan, args.only)
        envs = validator_environment(plan, plan_secrets(store, plan), {v.name for v in chosen})
    console = output_console(stderr=args.format != "table")  # csv/json: stdout holds the table alone
    rows, failed = [], []
    for v in chosen:
        console.print(f"validator {v.name}: {' '.join(v.argv)}", highlight=False, markup=False)
        outcome = run_validator(v, envs[v.name])
        # the store is open only to record: a validator may itself be a `campaign` command on this store
        with open_store(args.db) as store:
            rid, seq = record_run(store, plan, v, envs[v.name], outcome)
        rows.append((v.name, ", ".join(v.engines(plan)), outcome.status, outcome.exit_code,
                     f"{outcome.duration_ns / 1e9:.2f}", seq, rid, outcome.reason or "-"))
        if outcome.status != PASSED:
            failed.append(f"validator {v.name}: {outcome.status}: {outcome.reason} (run {rid}, audit seq {seq})")
    print_rows(["validator", "applies to", "status", "exit", "seconds", "audit seq", "run", "reason"], rows,
               args.format, console=console)
    out = sys.stdout if args.format == "table" else sys.stderr
    for line in failed:
        print(line, file=out)
    print(f"{len(rows) - len(failed)} of {len(rows)} validator(s) passed for plan {plan.hash[:12]}", file=out)
    return 1 if failed else 0
