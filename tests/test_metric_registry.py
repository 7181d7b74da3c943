"""The metric registry is the only place a run metric exists (docs/metrics.md, "The registry").

A metric added to `stats.metrics.registry.METRICS` in the test, and nowhere else, shows up in the TUI
runs table, the report table and its figure, the `run_summary` view, the exports and a newly issued
verdict document; the checked-in verdict schema and docs agree with the registry; and
`campaign sql` answers the README's query over `run_summary` on a real store."""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from results_store import build_campaign
from textual.widgets import DataTable

from console.cli import main
from data.metric_params import MetricParams
from data.plan_loading import plan_from_store
from data.store import Store
from stats.metrics import metrics_for_runs, registry
from stats.metrics.registry import METRICS_BY_NAME, SURFACES, check_registry
from stats.verdict_doc import load_schema, throughput_repeat_schema

ROOT = Path(__file__).resolve().parents[1]

E2E_P99 = registry.MetricDef(
    "e2e_p99_s", "e2e p99", "ms", ".1f", False, True, 1000.0,
    "t_end − t_send (request completion), 99th percentile over ok requests", source="e2e_s", reduce="p99",
    on=frozenset(SURFACES), figure="latency", column="e2e_p99_ms")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    db, plan = build_campaign(root, concurrencies=(1, 2), repeats=2, requests=6, holdout=4)
    return root, db, plan


def _p99_by_run(db: Path) -> dict[str, float]:
    """The e2e p99 of every run straight from its request rows (DuckDB's quantile_cont is numpy's
    'linear' method), in ms: the figure every surface must show."""
    with Store(db, read_only=True) as s:
        rows = s.con.execute(
            "SELECT run_id, 1000 * quantile_cont((t_end_ns - t_send_ns) / 1e9, 0.99) FROM requests "
            "WHERE NOT is_warmup AND outcome = 'ok' AND t_end_ns IS NOT NULL GROUP BY run_id").fetchall()
    return {r: v for r, v in rows}


def test_a_metric_added_to_the_registry_appears_everywhere(campaign, monkeypatch, tmp_path):
    root, db, plan_path = campaign
    monkeypatch.setattr(registry, "METRICS", registry.METRICS + (E2E_P99,))
    expected = _p99_by_run(db)
    assert len(expected) >= 8

    # the report table (text and machine-readable), its definitions, the latency figure's panels
    from console.commands.report import table_rows
    from console.figures import latency_figure
    from console.html_report import definitions, report_tables
    from stats.results.plan_results import load_plan_results

    with Store(db) as store:  # writable: the stored metrics lacking the new one are recomputed and stored
        plan = plan_from_store(store, _plan_hash(store))
        res = load_plan_results(store, plan)
        cols, rows = table_rows(res)
        assert "e2e_p99_s_median" in cols
        cell = next(c for c in res.cells if c.runs)
        med = float(np.median([expected[x.run_id] for x in cell.runs]))
        row = next(r for r in rows if r[0] == cell.engine and r[1] == cell.concurrency)
        assert row[cols.index("e2e_p99_s_median")] * 1000 == pytest.approx(med)
        assert "e2e p99 (ms)" in report_tables(res)
        assert "<code>e2e_p99_ms</code>" in definitions() and E2E_P99.doc in definitions()
        fig = latency_figure(res)
        assert [ax.get_title() for ax in fig.figure.axes] == ["TTFA p50", "TTFA p95", "e2e p50", "e2e p99"]
        # the report stored the sweep runs' metrics; the holdout runs' are stored by any view of them
        runs = store.query("SELECT run_id, status, params_json FROM runs")
        metrics_for_runs(store, runs, lambda r: MetricParams.from_run_json(r["params_json"]))

    # run_summary on a read-only reader (what `campaign sql` and the TUI open)
    with Store(db, read_only=True) as store:
        got = dict(store.con.execute("SELECT run_id, e2e_p99_ms FROM run_summary WHERE metrics_stored").fetchall())
    assert set(got) == set(expected)
    for rid, v in expected.items():
        assert got[rid] == pytest.approx(v), rid

    # the export: one row per run, the new column in it
    out = tmp_path / "summary.csv"
    assert main(["export", "runs", "--summary", "-o", str(out), "--db", str(db)]) == 0
    exported = {r["run_id"]: r for r in csv.DictReader(out.open())}
    for rid, v in expected.items():
        assert float(exported[rid]["e2e_p99_ms"]) == pytest.approx(v)

    # a verdict document issued now carries it per repeat, and exports (schema-validated)
    main(["gate", str(plan_path), "--db", str(db)])
    with Store(db, read_only=True) as store:
        vid, doc = store.con.execute("SELECT verdict_id, document_json FROM verdicts WHERE kind = 'throughput' "
                                     "ORDER BY created_at DESC, verdict_id DESC LIMIT 1").fetchall()[0]
    repeats = [r for row in json.loads(doc)["throughput"] for r in row["repeats"]]
    assert repeats and all(r["e2e_p99_s"] * 1000 == pytest.approx(expected[r["run_id"]]) for r in repeats)
    assert all("e2e_p99_s" in row["spread"] for row in json.loads(doc)["throughput"])
    assert main(["export", "verdict", vid, "-o", str(tmp_path / "v.json"), "--db", str(db)]) == 0

    # the TUI runs table: a column by the registry's header, each run's value formatted by it
    from console.tui.app import CampaignApp

    async def runs_table() -> tuple[list[str], dict[str, str]]:
        app = CampaignApp(db)
        async with app.run_test(size=(220, 45)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            table = app.query_one("#runs-table", DataTable)
            labels = [str(c.label) for c in table.columns.values()]
            i = labels.index("e2e p99 (ms)")
            return labels, {str(k.value): str(table.get_row(k)[i]) for k in table.rows}

    labels, cells = asyncio.run(runs_table())
    assert labels.index("e2e p99 (ms)") < labels.index("started (UTC)")
    for rid, v in expected.items():
        assert cells[rid] == E2E_P99.format(v / 1000), rid


def _plan_hash(store: Store) -> str:
    return store.scalar("SELECT plan_hash FROM plans WHERE kind = 'plan'")


def test_the_registry_is_consistent_and_every_metric_is_defined():
    assert check_registry(registry.METRICS) == []
    broken = (replace(E2E_P99, doc=""), replace(E2E_P99, name="x", column="x", source=""),
              replace(E2E_P99, name="y", column="y", on=frozenset({"nowhere"})),
              replace(E2E_P99, name="z", column="e2e_p50_ms"), replace(E2E_P99, name="w", column="w", reduce="p"))
    assert check_registry(registry.METRICS + broken) == [
        "duplicate column 'e2e_p50_ms'", "e2e_p99_s: no definition (doc)", "x: reduction 'p99' needs a source field",
        "y: unknown surface(s) nowhere", "w: unknown reduction 'p'"]


def test_the_verdict_schema_is_the_registry():
    node = load_schema()["properties"]["throughput"]["items"]["properties"]["repeats"]["items"]
    assert node == throughput_repeat_schema(), json.dumps(throughput_repeat_schema(), ensure_ascii=False)


def test_labels_agree_everywhere():
    """The report, the runs table and the detail screen label a metric as the registry does
    (the report once said "failures" where the registry says "failed")."""
    from console.tui.app import run_columns
    from stats.results.report import column_label, columns

    assert [column_label(n) for n in columns()] == [METRICS_BY_NAME[n].header() for n in columns()]
    assert column_label("failed") == "failed"
    head, numeric = run_columns()
    for d in registry.metrics_on(registry.RUNS):
        assert d.short_header() in head and d.short_header() in numeric


def test_run_summary_answers_the_readme_query(campaign):
    """`campaign sql` (a subprocess, a read-only reader) over run_summary: the medians per cell equal
    the report's."""
    _, db, _ = campaign
    q = ("SELECT engine, concurrency, median(throughput) AS tput, median(ttfa_p50_ms) AS ttfa FROM run_summary "
         "WHERE kind = 'measured' AND status = 'complete' AND NOT excluded AND pool = 'tuning' GROUP BY ALL ORDER BY ALL")
    r = subprocess.run([sys.executable, "-m", "console.cli", "sql", q, "--format", "json", "--db", str(db)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 4
    from stats.results.plan_results import load_plan_results

    with Store(db, read_only=True) as store:
        res = load_plan_results(store, plan_from_store(store, _plan_hash(store)))
    for c in res.cells:
        row = next(x for x in rows if x["engine"] == c.engine and x["concurrency"] == c.concurrency)
        assert row["tput"] == pytest.approx(c.spreads["throughput"].median)
        assert row["ttfa"] == pytest.approx(c.spreads["ttfa_p50_s"].median * 1000)
    # the TUI's SQL tab (its own reader) has the same views
    from console.tui.panes.sql import run_query

    res_tui = run_query(db, q)
    assert [dict(zip(res_tui.columns, r)) for r in res_tui.rows] == rows
    assert run_query(db, "SELECT count(*) FROM quality_summary WHERE metric = 'mos'").rows[0][0] > 0
