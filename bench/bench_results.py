"""Results-layer timing on a store of real-campaign size (72 runs x 320 requests, ~300 k chunk rows;
2 engines x 6 concurrencies x 6 repeats of the sweep, plus 12 quality runs): `campaign report --html` and a TUI
load with stored (cached) run metrics next to the uncached path (metrics computed from requests and
chunks), measured in the same run. Targets (issue 14): report --html < 5 s, TUI load < 0.5 s cached.

    python bench/bench_results.py [--quick]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def timed(fn):
    """Seconds and result of fn(), its console output discarded."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out


def main() -> int:
    quick = "--quick" in sys.argv
    from results_store import build_campaign

    from console.cli import main as cli
    from console.tui.data import load_browser
    from data.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        concs = (1, 2, 4) if quick else (1, 2, 4, 8, 16, 32)
        # 2 engines x len(concs) x 3 repeats sweep runs, + 2 x 3 quality runs
        t_build, (db, plan) = timed(lambda: build_campaign(root, concurrencies=concs, repeats=3 if quick else 6,
                                                            requests=32 if quick else 320, chunks=13, gpu=True))
        with Store(db, read_only=True) as s:
            runs, reqs, chunks = (s.scalar(f"SELECT count(*) FROM {t}") for t in ("runs", "requests", "chunks"))
        print(f"store: {runs} runs, {reqs} requests, {chunks} chunk rows (built + gated in {t_build:.1f} s)")

        def clear() -> None:
            with Store(db) as s:
                s.con.execute("DELETE FROM run_metrics")

        def tui() -> float:
            return timed(lambda: load_browser(db))[0]

        def html(name: str) -> float:
            return timed(lambda: cli(["report", str(plan), "--db", str(db), "--html", str(root / f"{name}.html")]))[0]

        clear()
        tui_uncached = tui()  # read-only: computes every run's metrics in memory, stores none
        html_uncached = html("uncached")  # computes and stores the plan's aggregate runs
        html_cached = html("cached")
        with Store(db) as s:  # every run (quality runs too), as after a report and a gate
            from console.tui.data import run_params
            from stats.metrics import metrics_for_runs
            metrics_for_runs(s, s.query("SELECT run_id, status, params_json FROM runs"), run_params)
        tui_cached = min(tui() for _ in range(3))
    print(f"report --html: {html_cached:.2f} s with stored metrics, {html_uncached:.2f} s uncached (target < 5 s)")
    print(f"TUI load:      {tui_cached:.2f} s with stored metrics, {tui_uncached:.2f} s uncached (target < 0.5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
