"""`campaign demo [--quick]`: the whole acceptance campaign against the embedded reference engine
(console/demo.py), in a new folder under demo/ each time; `make demo` runs the same."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the demo acceptance campaign against the embedded reference engine")
    p.add_argument("--quick", action="store_true", help="the same story on a small sweep (about a minute)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    from console.demo import run_demo

    run_demo(quick=args.quick)
    return 0
