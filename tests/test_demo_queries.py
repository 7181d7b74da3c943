"""Every documented query gives the report's numbers, on the quick demo's real runs: the demo's
three queries (console/demo.py QUERIES), the README's, and `cell_summary` against the report cell
for cell; a plain DuckDB client reads the views from the demo's store (docs/results.md, "Cells")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from console.demo import QUERIES
from data.plan_loading import plan_from_store
from data.store import Store
from stats.metrics.views import cell_metrics
from stats.results.plan_results import load_plan_results
from stats.results.quality_load import quality_under_load

ROOT = Path(__file__).resolve().parents[1]
# the query the README gave before `phase`: the holdout arms' runs mixed into the sweep's cells
MIXED = ("SELECT engine, concurrency, median(throughput) AS throughput FROM run_summary WHERE kind = 'measured' "
         "AND status = 'complete' AND NOT excluded GROUP BY ALL ORDER BY ALL")


def _sql(db: Path, query: str) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "console.cli", "sql", query, "--format", "json", "--db", str(db)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def readme_queries() -> list[str]:
    """The `campaign sql "..."` queries of the README, as a shell would pass them."""
    text = (ROOT / "README.md").read_text()
    return [re.sub(r"\s+", " ", q) for q in re.findall(r'\.venv/bin/campaign sql "([^"]+)"', text)]


@pytest.fixture(scope="module")
def demo(quick_demo):
    _, db = quick_demo
    with Store(db, read_only=True) as s:
        plan = plan_from_store(s, s.scalar("SELECT plan_hash FROM plans WHERE kind = 'plan'"))
        res = load_plan_results(s, plan)
        ql = quality_under_load(s, plan)
    return db, res, ql


def _report(res) -> dict[tuple[str, int], dict[str, float | None]]:
    return {(c.engine, c.concurrency): {d.sql_column: (None if c.spreads[d.name].median is None
                                                      else c.spreads[d.name].median * d.scale)
                                        for d in cell_metrics()} | {"runs": c.n} for c in res.cells}


def test_cell_summary_is_the_report_on_real_runs(demo):
    db, res, _ = demo
    report = _report(res)
    rows = _sql(db, "SELECT * FROM cell_summary WHERE phase = 'sweep' ORDER BY ALL")
    assert {(r["engine"], r["concurrency"]) for r in rows} == set(report)
    for r in rows:
        want = report[(r["engine"], r["concurrency"])]
        assert {k: r[k] for k in want} == want, (r["engine"], r["concurrency"])
    # the query the README had: the quality arms' runs at C16/C32 moved the sweep's medians
    mixed = {(r["engine"], r["concurrency"]): r["throughput"] for r in _sql(db, MIXED)}
    assert any(mixed[k] != v["throughput"] for k, v in report.items() if k in mixed)


def test_the_demo_queries_give_the_report_numbers(demo):
    db, res, ql = demo
    report = _report(res)
    cells = _sql(db, QUERIES[0])
    assert {(r["engine"], r["concurrency"]) for r in cells} == set(report)
    for r in cells:
        want = report[(r["engine"], r["concurrency"])]
        assert r["runs"] == want["runs"]
        assert r["throughput"] == pytest.approx(want["throughput"], abs=0.05 + 1e-9)
        assert r["ttfa_p50_ms"] == pytest.approx(want["ttfa_p50_ms"], abs=0.5 + 1e-9)
    wer = _sql(db, QUERIES[1])
    assert wer, "no WER rows"
    mine = [r for r in wer if r["scorer"] == ql.scorers["wer"]]
    assert mine and len(mine) == len([c for c in ql.cells if c.levels["wer"] is not None])
    for r in mine:
        level = ql.cell(r["engine"], r["concurrency"]).levels["wer"]
        assert r["corpus_wer_pct"] == pytest.approx(level.value, abs=0.005 + 1e-9)
        assert r["outputs"] == level.outputs
    exclusions = _sql(db, QUERIES[2])
    with Store(db, read_only=True) as s:
        assert len(exclusions) == s.scalar("SELECT count(*) FROM exclusions")


def test_the_readme_queries_run_and_give_the_report_numbers(demo):
    db, res, ql = demo
    queries = readme_queries()
    assert any("FROM cell_summary" in q for q in queries) and any("FROM quality_summary" in q for q in queries)
    report = _report(res)
    for q in queries:
        rows = _sql(db, q)
        assert rows, q
        if "FROM cell_summary" in q:
            assert {(r["engine"], r["concurrency"]): {k: r[k] for k in ("runs", "throughput", "ttfa_p50_ms")}
                    for r in rows} == {k: {c: v[c] for c in ("runs", "throughput", "ttfa_p50_ms")}
                                       for k, v in report.items()}
        elif "FROM quality_summary" in q:
            for r in (r for r in rows if r["scorer"] == ql.scorers["wer"]):
                assert r["wer_pct"] == pytest.approx(ql.cell(r["engine"], r["concurrency"]).levels["wer"].value,
                                                     rel=1e-12)


def test_a_plain_duckdb_client_reads_the_demo_views(demo, tmp_path):
    db, res, _ = demo
    script = ("import json, sys, duckdb; con = duckdb.connect(sys.argv[1], read_only=True); "
              "print(json.dumps({v: con.sql(f'SELECT count(*) FROM {v}').fetchall()[0][0] "
              "for v in ('run_summary', 'cell_summary', 'quality_summary')}))")
    r = subprocess.run([sys.executable, "-c", script, str(db)], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    counts = json.loads(r.stdout)
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert counts["run_summary"] == con.sql("SELECT count(*) FROM runs").fetchall()[0][0]
        assert con.sql("SELECT count(*) FROM cell_summary WHERE phase = 'sweep'").fetchall()[0][0] == len(res.cells)
        assert counts["quality_summary"] == con.sql("SELECT count(*) FROM quality_scores").fetchall()[0][0] > 0
    finally:
        con.close()
