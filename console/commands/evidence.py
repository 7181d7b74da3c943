"""`campaign evidence verify DIR [--head FILE|HASH]`: re-hash every file of an evidence bundle,
re-run the store's integrity checks on its rows and re-derive every verdict from the bundled data
alone (console/evidence.py); exit 1 naming the check and the first mismatch. What it proves:
docs/results.md."""

from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("evidence", help="check an evidence bundle (campaign export evidence PLAN DIR)")
    ps = p.add_subparsers(dest="evidence_command", metavar="ACTION", required=True)
    v = ps.add_parser("verify", help="re-hash every file and re-derive every verdict from the bundle alone")
    v.add_argument("dir", help="the bundle folder")
    v.add_argument("--head", action="append", default=[], metavar="FILE|HASH",
                   help="a head held outside the bundle (an anchor file, an exported verdict document or runs "
                        "export, or an event hash): the bundled chain must hold it (repeatable)")
    v.set_defaults(func=cmd_verify)


def cmd_verify(args) -> int:
    from console.evidence import EvidenceMismatch, trusted_head, verify_bundle

    trusted = [trusted_head(a) for a in args.head]  # a bad --head is refused before anything runs
    try:
        verify_bundle(Path(args.dir), on_step=lambda s: print(f"{s.status}  {s.name}: {s.detail}"), trusted=trusted)
    except EvidenceMismatch as exc:
        print(f"evidence verify FAILED: {exc.check or 'bundle'}: {exc}", file=sys.stderr)
        return 1
    print(f"{args.dir}: evidence verified")
    return 0
