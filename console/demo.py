"""`make demo` / `campaign demo`: a whole acceptance campaign against the embedded reference engine,
told with the real commands.

Every step is the `campaign` command a user would type (printed before it runs), against a fresh
store in its own folder `demo/<timestamp>/` (a second demo is a new campaign; the first stays as
it was). The campaign (`campaign plan init --demo`):

- `ref-baseline` is the quality reference; `ref-fast` (lossless: byte-identical audio, cheaper
  steps) and `ref-lossy` (band-limited, noisy, drops words) are the candidates, each judged by its
  own quality verdict on the reserved holdout;
- `ref-peer` is the throughput target: the decision rule "fast exceeds peer at C16 and C32";
- the holdout is defined (`campaign workload pools`), reserved at freeze, opened by an audit
  event after the sweep, then used by the quality arms;
- one sweep run is excluded with its reason (it stands for a run measured under a profiler);
- one outside figure is imported (`campaign import results`): shown marked "imported, not
  measured", in no aggregate or verdict;
- one probe of a configuration the plan lacks (the reference engine's `empty_deltas` profile) runs
  inside a profiler window (`campaign profile start|stop`), so its run is excluded as profiled; it
  draws from the tuning pool, leaving out the reserved holdout, so the quality verdicts stay on
  untouched prompts;
- before the holdout opens, on tuning prompts, the equivalence runs, and ref-fast is selected on its
  bit-exact equivalence PASS (`selection: required`: the holdout does not open without it);
- the plan's validator, the reference engine's self-check (synthesise one utterance, decode it,
  check it is voiced speech), runs with `campaign validate` after the last launches and before the
  gate: a PASS counts only validator runs after the freeze and the candidate's latest launch.

The plan also holds `ref-precision` (baseline's audio through a float16 output path) and an
`equivalence` section: before the holdout opens, `campaign equivalence` at C=1 on 4 utterances gives fast vs
baseline PASS (bit-exact), precision vs baseline PASS with its distances, lossy vs baseline FAIL
naming its measures (docs/equivalence.md).

It ends with the verdicts (fast PASS, lossy FAIL with its failing checks named, the throughput
rule, the three equivalence verdicts), where the store, the HTML report and the evidence bundle are, and queries to try.
`--quick` is the same story on a smaller sweep for the test suite's console tests: a 4-id holdout,
and none of what no console screen shows (the HTML report, the evidence bundle and the exported
verdict documents: the ending prints the commands that make them; `audit verify` checks the
store without exported documents).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.rule import Rule

REPO = Path(__file__).resolve().parents[1]
DEMO_ROOT = Path("demo")  # relative to the repository root: commands read as a user types them
HOLDOUT_IDS = 24  # prompts reserved for the quality verdicts (of the sample's 128)
QUICK_HOLDOUT_IDS = 4  # --quick: enough for lossy's checks to fail and fast's to pass (fast is byte-identical)
EXCLUDED = ("ref-lossy", 16)  # engine, concurrency of the run excluded as "profiled"
EXCLUDE_REASON = ("profiled: stands for a repeat measured with a profiler attached to the engine "
                  "(the demo's example); profiled timings never enter aggregates")

console = Console()


@dataclass(frozen=True)
class Layout:
    """Where one demo campaign lives."""
    folder: Path

    @property
    def db(self) -> Path:
        return self.folder / "campaign.duckdb"

    @property
    def plan(self) -> Path:
        return self.folder / "plan.json"

    @property
    def pools(self) -> Path:
        return self.folder / "pools.json"

    @property
    def report_html(self) -> Path:
        return self.folder / "report.html"

    @property
    def evidence(self) -> Path:
        return self.folder / "evidence"


def new_layout(root: Path = DEMO_ROOT) -> Layout:
    """A folder no earlier demo used: demo/<local time>[-n]."""
    base = root / datetime.now().strftime("%Y%m%d-%H%M%S")
    folder, n = base, 1
    while (REPO / folder).exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    (REPO / folder).mkdir(parents=True)
    return Layout(folder)


def shown(args: tuple[str, ...]) -> str:
    """The arguments as a shell would take them back (copy, paste, run)."""
    return " ".join(a if re.fullmatch(r"[\w./=:@,-]+", a) else shlex.quote(a) for a in args)


def echo(command: str) -> None:
    """An echoed command, whole: a rule, then the command on its own line, never cut with "…" (the
    terminal wraps it) so that it can be copied and run again."""
    console.print(Rule(style="cyan"))
    console.print(f"$ {command}", style="bold", markup=False, highlight=False, soft_wrap=True)


def campaign(*args: str, ok_codes: tuple[int, ...] = (0,), quiet: bool = False) -> str:
    """Run one `campaign` command as a user would, echo it, stream its output, return it."""
    echo(f"campaign {shown(args)}")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if not quiet:
            sys.stdout.write(line)
        lines.append(line)
    code = proc.wait()
    console.print(f"[dim]exit {code} after {time.perf_counter() - t0:.1f} s[/dim]")
    if code not in ok_codes:
        if quiet:
            sys.stdout.write("".join(lines[-20:]))
        raise SystemExit(f"demo: `campaign {shown(args)}` exited {code}")
    return "".join(lines)


def edit_plan(path: Path, changes: dict[str, object]) -> None:
    """Edit the generated plan before freezing, as a user would in an editor (printed)."""
    doc = json.loads((REPO / path).read_text())
    for dotted, value in changes.items():
        node = doc
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(leaf) if isinstance(node, list) else leaf] = value
        console.print(f"[dim]edit {path}: {dotted} = {json.dumps(value)}[/dim]")
    (REPO / path).write_text(json.dumps(doc, indent=2) + "\n")


QUICK_QUALITY_CONCURRENCIES = (16,)
QUICK_CHANGES = {  # the same campaign on a sweep small enough for the test suite
    "sweep.concurrencies": [16, 32], "sweep.measured_repeats": 2, "sweep.requests_per_run": 8,
    "sweep.requests_per_slot": 1, "sweep.warmup_requests": 1, "sweep.restart": "per_cell",
    "sweep.interleave": "sequential", "quality.concurrencies": list(QUICK_QUALITY_CONCURRENCIES),
    "bootstrap.draws": 2000,
}


RECORD_CHANGES = {  # the candidates' hypotheses (docs/results.md, "Candidates")
    "engines.1.hypothesis": "fewer decode steps keep the audio byte-identical and raise throughput past the peer's",
    "engines.2.hypothesis": "band-limited, noisier decoding is cheaper still; expected to cost quality",
}


def claims(quick: bool) -> dict:
    """The claim the acceptance carries (docs/plans.md, "Claims"), scoped to what the demo checks:
    the full demo's quality at C1, C16 and C32, the quick one's at C16 only."""
    concs: list[int] = list(QUICK_QUALITY_CONCURRENCIES) if quick else [1, 16, 32]
    where = ", ".join(f"C{c}" for c in concs)
    return {"status": "draft", "concurrencies": concs,
            "scope": f"reference engine on the bundled sample: ref-fast keeps quality at {where} ({3 * len(concs)} "
                     "checks) and exceeds ref-peer's throughput at C16 and C32",
            "non_claims": ["no optimality claim: only the configurations listed by `campaign candidates` were tried",
                           "no claim about real engines or GPUs: the reference engine stands in for them"]
            + (["no claim at C1: the quick demo checks quality at C16 only"] if quick else [])}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_plan(lay: Layout, quick: bool) -> dict:
    campaign("plan", "init", "--demo", "-o", str(lay.plan))
    holdout = QUICK_HOLDOUT_IDS if quick else HOLDOUT_IDS
    campaign("workload", "pools", "data/sample_workload", "--shuffle", "20261022",
             "--define", f"holdout=0:{holdout}", "--define", f"tuning={holdout}:128", "-o", str(lay.pools))
    ports = {f"engines.{i}.port": free_port() for i in range(4)}  # the template's 8091.. may be taken here
    # the validator runs with this interpreter (the one that has the engine), wherever PATH points
    edit_plan(lay.plan, {"workload.pools_file": lay.pools.name, **ports, "validators.0.argv.0": sys.executable,
                         **(QUICK_CHANGES if quick else {}), **RECORD_CHANGES, "claims": claims(quick)})
    add_equivalence(lay)
    plan = json.loads((REPO / lay.plan).read_text())
    sw, q = plan["sweep"], plan["quality"]
    console.print(f"[dim]plan {plan['name']}: engines {[e['name'] for e in plan['engines']]}; sweep C={sw['concurrencies']}, "
                  f"max({sw['requests_per_run']}, {sw.get('requests_per_slot', 0)} x C) requests/run after "
                  f"{sw.get('warmup_requests', 0)} warmup requests, {sw['measured_repeats']} measured repeats, engine "
                  f"restart {sw['restart']}; quality: {q['candidates']} vs {q['baseline']} at C={q['concurrencies']} on "
                  f"the reserved pool {q['pool']!r}; rule {plan['decision_rules'][0]['name']}[/dim]")
    return plan


def excluded_run_id(lay: Layout) -> str:
    """The run to exclude, found the way a user would: with `campaign sql`."""
    engine, c = EXCLUDED
    out = campaign("sql", f"SELECT run_id FROM runs WHERE engine = '{engine}' AND concurrency = {c} AND kind = "
                          "'measured' AND status = 'complete' ORDER BY repeat_index DESC LIMIT 1",
                   "--format", "csv", "--db", str(lay.db))
    ids = [ln.strip() for ln in out.splitlines()[1:] if ln.strip()]
    if not ids:
        raise SystemExit(f"demo: no complete measured run of {engine} at C={c} to exclude")
    return ids[0]


# -- issue 28: an imported figure, and a profiled probe --------------------------------------
IMPORTED_CSV = ("engine,concurrency,metric,value,unit\n"
                "ref-peer (its README),16,throughput,95.0,audio tok/s\n")
PROBE = ("ref-probe-empty-deltas", "empty_deltas")  # engine label, reference profile: a configuration the plan lacks


def import_figure(lay: Layout) -> None:
    """An outside figure, stored as imported (a hypothesis), never as a measurement."""
    path = lay.folder / "imported.csv"
    (REPO / path).write_text(IMPORTED_CSV)
    console.print(f"[dim]wrote {path}: one published figure to test, not to trust[/dim]")
    campaign("import", "results", str(path), "--source", "demo: stands for a peer engine's published figure",
             "--ref", "demo example, not a real publication", "--db", str(lay.db))


def profiled_probe(lay: Layout) -> None:
    """A probe of an extra configuration inside a profiler window: the window's start and stop
    events enclose the probe's run events, so the run is excluded as 'profiled: window W'."""
    import urllib.request

    label, profile = PROBE
    port = free_port()
    args = ("engine", "reference", "--dialect", "vllm-omni", "--profile", profile, "--port", str(port))
    echo(f"campaign {shown(args)} &")
    engine = subprocess.Popen([sys.executable, "-m", "console.cli", *args], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        db = ["--db", str(lay.db)]
        campaign("profile", "start", "--engine", label, "--tool", "demo: stands for py-spy attached to the engine",
                 *db)
        campaign("probe", "--url", f"http://127.0.0.1:{port}", "--dialect", "vllm-omni", "-c", "4", "-n", "8",
                 "--engine", label, "--artifacts", str(lay.folder / "artifacts"), "--no-telemetry", *db)
        campaign("profile", "stop", *db)
    finally:
        engine.terminate()
        engine.wait(timeout=30)


# -- equivalence (docs/equivalence.md) ---------------------------------------------------------
EQUIVALENCE_UTTERANCES = 4  # at C=1: about 30 s of the demo's time on the development machine
EQUIVALENCE_TOLERANCES = {"max_length_diff": 0, "max_abs": 0.01, "min_snr_db": 40.0, "max_log_mel_db": 1.0}


def add_equivalence(lay: Layout) -> None:
    """The plan gains `ref-precision` (baseline's audio through a float16 output path) and the
    `equivalence` section: fast, precision and lossy each against baseline at C=1 on the first
    utterances of the tuning pool (an edit before freezing, printed like the others). In the
    plan itself rather than an addendum: the TUI's Gates and Plan tabs show the newest frozen
    plan, and an addendum holds none of the sweep's runs. The price: ref-precision is swept too."""
    plan = json.loads((REPO / lay.plan).read_text())
    base = plan["engines"][0]
    plan["engines"].append({**base, "name": "ref-precision", "profile": "precision", "port": free_port()})
    plan["equivalence"] = {
        "_comment": "C=1: every request computed alone, the same batch composition in both arms (docs/equivalence.md)",
        "pairs": [{"reference": base["name"], "candidate": c} for c in ("ref-fast", "ref-precision", "ref-lossy")],
        "utterances": EQUIVALENCE_UTTERANCES, "concurrency": 1, "repeats": 1, "tolerances": EQUIVALENCE_TOLERANCES}
    (REPO / lay.plan).write_text(json.dumps(plan, indent=2) + "\n")
    console.print(f"[dim]edit {lay.plan}: engines += ref-precision (profile precision); equivalence = "
                  f"{json.dumps({k: v for k, v in plan['equivalence'].items() if not k.startswith('_')})}[/dim]")


# -- the issue-14 artefacts -------------------------------------------------------------------
def artefact_commands(lay: Layout) -> list[tuple[str, ...]]:
    """The HTML report and the evidence bundle of the demo's plan."""
    return [("report", str(lay.plan), "--html", str(lay.report_html), "--db", str(lay.db)),
            ("export", "evidence", str(lay.plan), str(lay.evidence), "--db", str(lay.db))]


def artefacts(lay: Layout) -> bool:
    """Produce the HTML report and the evidence bundle."""
    for cmd in artefact_commands(lay):
        campaign(*cmd)
    return True


# -- the ending -------------------------------------------------------------------------------
def verdict_lines(lay: Layout) -> list[str]:
    """One line per verdict of the campaign, as its kind labels it (console/verdicts/), with the
    lines its kind prints under it (a failing quality verdict's checks, a rule's ratios ...)."""
    from console.verdicts import kind_of
    from data.store import Store

    with Store(REPO / lay.db, read_only=True) as store:
        rows = store.query("SELECT verdict_id, kind, name, verdict, checks_json, attribution_json, document_json "
                           "FROM verdicts ORDER BY created_at, verdict_id")
        shown = [(r, kind.label(r), kind.detail_lines(store, r)) for r in rows for kind in [kind_of(r["kind"])]]
    width = max([12, *(len(label) for _, label, _ in shown)])  # the label column fits the longest
    pad = " " * (width + 12)
    lines = []
    for r, label, details in shown:
        style = {"PASS": "bold green", "FAIL": "bold red"}.get(r["verdict"], "yellow")
        lines.append(f"[{style}]{label:<{width}}[/] {r['kind']:<10} {r['name']}" + "".join(f"\n{pad}{d}" for d in details))
    return lines


QUERIES = (  # three `campaign sql` queries over the demo's store (docs/schema.md); each gives the report's numbers
    "SELECT engine, concurrency, runs, round(throughput, 1) AS throughput, round(ttfa_p50_ms) AS ttfa_p50_ms "
    "FROM cell_summary WHERE phase = 'sweep' ORDER BY ALL",
    "SELECT engine, concurrency, scorer, round(100 * sum(wer_errors) / sum(wer_words), 2) AS corpus_wer_pct, "
    "count(*) AS outputs FROM quality_summary WHERE metric = 'wer' AND phase = 'quality' AND in_aggregates "
    "AND status = 'ok' GROUP BY ALL ORDER BY ALL",
    "SELECT x.run_id, r.engine, r.concurrency, x.reason, a.seq AS audit_seq FROM exclusions x JOIN runs r "
    "USING (run_id) JOIN audit_events a ON a.seq = x.audit_seq",
)


def queries(lay: Layout) -> list[str]:
    return [f".venv/bin/campaign sql {json.dumps(q)} --db {lay.db}" for q in QUERIES]


def ending(lay: Layout, produced: bool, elapsed_s: float, quick: bool = False) -> None:
    console.print(Rule("[bold green]demo complete[/bold green]", style="green"))
    console.print(f"{elapsed_s:.0f} s.  Verdicts:")
    for line in verdict_lines(lay):  # in a pipe at natural width: a verdict line is never broken
        console.print("  " + line, highlight=False, soft_wrap=not console.is_terminal)
    console.print(f"\nstore:           {lay.db}\nplan:            {lay.plan}", highlight=False)
    if produced:
        console.print(f"HTML report:     {lay.report_html}\nevidence bundle: {lay.evidence}", highlight=False)
    else:
        console.print("HTML report and evidence bundle: " + ("skipped by --quick; make them with:" if quick else
                      "not produced by this console version; with issue 14's commands:"), highlight=False)
        for cmd in artefact_commands(lay):
            console.print(f"  .venv/bin/campaign {shown(cmd)}", highlight=False, soft_wrap=True)
    console.print(f"\nbrowse it:  .venv/bin/campaign tui --db {lay.db}\nthree queries to try:", highlight=False)
    for q in queries(lay):
        console.print("  " + q, highlight=False, soft_wrap=True)


def select_on_tuning(lay: Layout) -> None:
    """Before the holdout opens, on tuning prompts only: the equivalence runs (C=1 on the first
    tuning utterances: fast bit-exact, precision within tolerance, lossy drifts), then the
    selection of ref-fast on its equivalence PASS as `campaign verdicts` lists it. Equivalence is
    deterministic, so the selection does not hang on the sweep's noise; the throughput rule is
    judged by the final gate, and a FAIL there shows in the acceptance."""
    db = ("--db", str(lay.db))
    # exit 1 (lossy's FAIL) is the story, not an error; before the gate, which caps a
    # precision-changing candidate without an equivalence PASS
    campaign("equivalence", str(lay.plan), *db, ok_codes=(0, 1, 3))
    verdicts = json.loads(campaign("verdicts", "--format", "json", *db, quiet=True))
    passed = [v["verdict_id"] for v in verdicts if v["kind"] == "equivalence" and v["name"] == "ref-fast vs ref-baseline"
              and v["verdict"] == "PASS"]
    if not passed:
        raise SystemExit("demo: ref-fast has no PASS verdict on tuning data to be selected on (its equivalence "
                         "verdict is not PASS); the holdout stays closed")
    campaign("candidates", "select", "ref-fast", "--because", *passed, "--note",
             "bit-exact against the baseline on tuning prompts", *db)


def decide(lay: Layout) -> None:
    """Issue ref-fast's acceptance verdict and list every candidate with its fate."""
    db = ("--db", str(lay.db))
    campaign("accept", str(lay.plan), "--candidate", "ref-fast", "--requester", "demo requester", "--statement",
             "draft acceptance reviewed; not final", *db, ok_codes=(0, 1, 3))
    campaign("candidates", *db)


def run_demo(quick: bool = False, root: Path = DEMO_ROOT) -> Layout:
    lay = new_layout(root)
    db = ["--db", str(lay.db)]
    t0 = time.perf_counter()
    console.print(f"[bold]demo campaign in {lay.folder}/[/bold] (earlier demos stay as they are)")
    write_plan(lay, quick)
    campaign("plan", "freeze", str(lay.plan), *db)
    campaign("controls")
    import_figure(lay)  # issue 28: kept apart from every aggregate and verdict
    campaign("run", str(lay.plan), *db)
    campaign("runs", "exclude", excluded_run_id(lay), "--reason", EXCLUDE_REASON, *db)
    profiled_probe(lay)  # issue 28: profile before candidate selection; the probe's run is excluded
    select_on_tuning(lay)  # the selection comes before the holdout opens (docs/results.md)
    campaign("plan", "open-holdout", str(lay.plan), "--reason", "demo: candidates chosen on tuning data only", *db)
    campaign("run", str(lay.plan), "--holdout", *db)
    campaign("score", str(lay.plan), *db)
    # after the last launches: a PASS counts only validator runs later than the candidate's launch
    campaign("validate", str(lay.plan), *db)
    # exit 1 = a FAIL, 3 = INCONCLUSIVE: verdicts, not demo errors (lossy is meant to fail)
    gate = campaign("gate", str(lay.plan), *db, ok_codes=(0, 1, 3))
    decide(lay)  # the acceptance verdict and every candidate's fate (issue 28)
    campaign("report", str(lay.plan), *db)
    produced = False if quick else artefacts(lay)  # --quick: no screen shows them (the ending says how)
    exported: list[str] = []
    for verdict_id in [] if quick else re.findall(r"verdict issued: (\S+)", gate):
        exported += ["--against", str(lay.folder / f"{verdict_id}.json")]
        campaign("export", "verdict", verdict_id, "-o", exported[-1], *db, quiet=True)
    campaign("audit", "verify", *exported, *db)
    ending(lay, produced, time.perf_counter() - t0, quick)
    return lay


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m console.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the same story on a small sweep (about a minute)")
    args = p.parse_args(argv)
    run_demo(quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
