"""`campaign controls`: run the synthetic controls (generated data with known answers) with the
reference campaign's settings, a plan's, or flags. Exit 0 iff every control gives its answer."""

from __future__ import annotations

from console.flags import add_format
from data.bootstrap_params import BOOTSTRAP_DEFAULTS, METHODS


def register(sub) -> None:
    p = sub.add_parser("controls", help="synthetic controls: prove the gate on data with known answers")
    p.add_argument("--plan", help="take margins, draws, seed and method from this plan file")
    p.add_argument("--wer-margin", type=float, default=0.20)
    p.add_argument("--sim-margin", type=float, default=0.50)
    p.add_argument("--mos-margin", "--utmos-margin", dest="mos_margin", type=float, default=0.05,
                   help="MOS drop margin (--utmos-margin: its older name)")
    p.add_argument("--draws", type=int, default=BOOTSTRAP_DEFAULTS.draws)
    p.add_argument("--seed", type=int, default=BOOTSTRAP_DEFAULTS.seed)
    p.add_argument("--method", choices=METHODS, default=BOOTSTRAP_DEFAULTS.method)
    add_format(p)
    p.set_defaults(func=cmd_controls)


def cmd_controls(args) -> int:
    from console.gate_tables import print_controls
    from console.output import output_console
    from stats.controls import all_ok, run_controls
    from stats.gates import GateConfig

    if args.plan:
        from data.plan_loading import load_plan

        cfg = GateConfig.from_plan(load_plan(args.plan))
    else:
        cfg = GateConfig(margins={"wer": args.wer_margin, "sim": args.sim_margin, "mos": args.mos_margin},
                         draws=args.draws, seed=args.seed, method=args.method)
    console = output_console(stderr=args.format != "table")  # csv/json: stdout holds the table alone
    results = run_controls(cfg)
    print_controls(console, results, args.format)
    ok = all_ok(results)
    console.print(f"{sum(r.ok for r in results)}/{len(results)} controls gave their known answer "
                  f"({cfg.method}, B={cfg.draws}, seed={cfg.seed}): {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1
