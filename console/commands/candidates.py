"""`campaign candidates`: every configuration launched or probed, with its fate; `select` and
`reject` record a decision (docs/results.md, "Candidates").

    campaign candidates [--format table|csv|json]
    campaign candidates select NAME --because VERDICT... [--note TEXT]
    campaign candidates reject NAME --reason TEXT [--because VERDICT...]

NAME is an engine name or a config hash prefix. A selection rests on PASS verdicts; a rejected
candidate stays rejected (a later PASS is a new verdict beside the old one).
"""

from __future__ import annotations

import json

from console.commands.db import add_db_arg
from console.output import FORMATS, print_rows
from data.errors import CampaignError

COLUMNS = ("name", "config", "origin", "status", "reason", "hypothesis", "launches", "startup_failures", "runs",
           "verdicts")


def register(sub) -> None:
    p = sub.add_parser("candidates", help="every configuration tried and its fate; select or reject one",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--format", choices=FORMATS, default="table")
    add_db_arg(p)
    p.set_defaults(func=cmd_list)
    ps = p.add_subparsers(dest="candidates_command", metavar="ACTION")
    s = ps.add_parser("select", help="record the selection of a measured candidate and the verdicts behind it")
    s.add_argument("name", help="engine name or config hash prefix")
    s.add_argument("--because", nargs="+", required=True, metavar="VERDICT", help="PASS verdict id(s) it rests on")
    s.add_argument("--note", help="free text stored as the selection's reason")
    add_db_arg(s)
    s.set_defaults(func=cmd_select)
    r = ps.add_parser("reject", help="record the rejection of a candidate (final)")
    r.add_argument("name", help="engine name or config hash prefix")
    r.add_argument("--reason", required=True)
    r.add_argument("--because", nargs="*", default=[], metavar="VERDICT", help="verdict id(s) it rests on")
    add_db_arg(r)
    r.set_defaults(func=cmd_reject)


def cmd_list(args) -> int:
    from data.candidates import fates
    from data.store import open_store

    with open_store(args.db) as store:
        rows = fates(store)
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if args.format == "csv":  # every field, full hashes and run ids
        print_rows([*COLUMNS, "registered_at", "registered_by"],
                   [[r["name"], r["config_sha256"], r["origin"], r["status"], r["reason"], r["hypothesis"],
                     r["launches"], " | ".join(r["startup_failures"]), " ".join(r["runs"]), "; ".join(r["verdicts"]),
                     r["registered_at"], r["registered_by"]] for r in rows], "csv")
        return 0
    table = [[r["name"], r["config_sha256"][:12], r["origin"], r["status"], r["reason"], r["hypothesis"],
              r["launches"], len(r["startup_failures"]), len(r["runs"]), "; ".join(r["verdicts"])] for r in rows]
    print_rows(COLUMNS, table)
    return 0


def _verdicts(store, idents: list[str], need_pass: bool) -> tuple[list[str], str | None]:
    """Full verdict ids (refusing unknown ones, and with `need_pass` any that is not a PASS) and
    the plan of the first."""
    from data.verdicts import get_verdict

    out, plan = [], None
    for ident in idents:
        v = get_verdict(store, ident)
        if need_pass and v["verdict"] != "PASS":
            raise CampaignError(f"--because {ident}: verdict {v['verdict_id']} is {v['verdict']}; a selection rests on "
                                "PASS verdicts")
        out.append(v["verdict_id"])
        plan = plan or v["plan_hash"]
    return out, plan


def cmd_select(args) -> int:
    from data import candidates
    from data.store import open_store

    with open_store(args.db) as store:
        key = candidates.resolve(store, args.name)
        vids, plan = _verdicts(store, args.because, need_pass=True)
        seq = candidates.select(store, key, vids, args.note, plan_hash=plan)
    print(f"candidate {args.name} ({key[:12]}) selected because {', '.join(vids)} (audit seq {seq})")
    return 0


def cmd_reject(args) -> int:
    from data import candidates
    from data.store import open_store

    with open_store(args.db) as store:
        key = candidates.resolve(store, args.name)
        vids, plan = _verdicts(store, args.because, need_pass=False)
        c = candidates.get(store, key)
        changed = candidates.reject(store, key, args.reason, vids, plan_hash=plan or (c.plan_hash if c else None))
    if not changed:
        print(f"candidate {args.name} ({key[:12]}) was already rejected ({c.reason if c else ''}); it stays so")
        return 0
    print(f"candidate {args.name} ({key[:12]}) rejected: {args.reason}")
    return 0
