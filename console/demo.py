"""`make demo`: a whole campaign against the embedded reference engine, with the real commands.

Every step is the `campaign` command a user would type (printed before it runs), against a fresh
store in `demo/`: freeze a plan (baseline vs a lossless `fast` profile of the reference engine),
prove the validator on synthetic controls, sweep C = 1..32 with a warmup and two measured repeats
per cell (engine restarted between repeats), open the reserved holdout, run the quality arms on it,
score WER / speaker similarity / DNSMOS with the bundled offline scorers, issue the quality and
throughput verdicts, print the report, export the verdict JSON and verify the store against the audit chain and the exported heads.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.rule import Rule

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "demo"
# commands run from the repository root, so they read as a user would type them
DB = Path("demo") / "campaign.duckdb"
PLAN = Path("demo") / "plan.json"

console = Console()


def campaign(*args: str, ok_codes: tuple[int, ...] = (0,)) -> str:
    """Run one `campaign` command as a user would, echo it, stream its output, return it."""
    shown = " ".join(a if re.fullmatch(r"[\w./=:@-]+", a) else json.dumps(a) for a in args)
    console.print(Rule(f"[bold]$ campaign {shown}[/bold]", align="left", style="cyan"))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    code = proc.wait()
    console.print(f"[dim]exit {code} after {time.perf_counter() - t0:.1f} s[/dim]")
    if code not in ok_codes:
        raise SystemExit(f"demo: `campaign {shown}` exited {code}")
    return "".join(lines)


def write_plan() -> None:
    """The demo plan: `campaign plan init --demo`, kept as generated."""
    campaign("plan", "init", "--demo", "-o", str(PLAN))
    plan = json.loads((REPO / PLAN).read_text())
    console.print(f"[dim]plan: {plan['name']}: engines {[e['name'] for e in plan['engines']]}, "
                  f"C={plan['sweep']['concurrencies']}, {plan['sweep']['requests_per_run']} requests/run, "
                  f"{plan['sweep']['warmup_repeats']} warmup + {plan['sweep']['measured_repeats']} measured repeats, "
                  f"quality cells C={plan['quality']['concurrencies']} on pool {plan['quality']['pool']!r}[/dim]")


def main() -> int:
    if DEMO.exists():
        shutil.rmtree(DEMO)
    DEMO.mkdir()
    db = ["--db", str(DB)]
    t0 = time.perf_counter()
    write_plan()
    campaign("plan", "freeze", str(PLAN), *db)
    campaign("controls")
    campaign("run", str(PLAN), *db)
    campaign("plan", "open-holdout", str(PLAN), "--reason", "demo: candidate chosen on tuning data only", *db)
    campaign("run", str(PLAN), "--holdout", *db)
    campaign("score", str(PLAN), *db)
    # exit 1 = FAIL, 3 = INCONCLUSIVE: verdicts, not demo errors
    gate = campaign("gate", str(PLAN), *db, ok_codes=(0, 1, 3))
    campaign("report", str(PLAN), *db)
    exported = []
    for verdict_id in re.findall(r"verdict issued: (\S+)", gate):
        exported += ["--against", str(Path("demo") / f"{verdict_id}.json")]
        campaign("export", "verdict", verdict_id, "-o", exported[-1], *db)
    campaign("audit", "verify", *exported, *db)
    console.print(Rule("[bold green]demo complete[/bold green]", style="green"))
    console.print(f"{time.perf_counter() - t0:.0f} s. Everything is in {DB}; try:\n"
                  f"  .venv/bin/campaign tui --db {DB}\n"
                  f"  .venv/bin/campaign sql \"SELECT engine, concurrency, kind, count(*) FROM runs GROUP BY ALL ORDER BY ALL\" --db {DB}\n"
                  f"  .venv/bin/campaign audit log --db {DB}", soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
