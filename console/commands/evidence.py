"""`campaign evidence verify DIR`: re-hash every file of an evidence bundle and re-derive every
verdict from the bundled data alone (console/evidence.py); exit 1 naming the first mismatch."""

from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("evidence", help="check an evidence bundle (campaign export evidence PLAN DIR)")
    ps = p.add_subparsers(dest="evidence_command", metavar="WHAT", required=True)
    v = ps.add_parser("verify", help="re-hash every file and re-derive every verdict from the bundle alone")
    v.add_argument("dir", help="the bundle folder")
    v.set_defaults(func=cmd_verify)


def cmd_verify(args) -> int:
    from console.evidence import EvidenceMismatch, verify_bundle

    try:
        verify_bundle(Path(args.dir), on_step=lambda s: print(f"ok  {s.name}: {s.detail}"))
    except EvidenceMismatch as exc:
        print(f"evidence verify: FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"{args.dir}: evidence verified")
    return 0
