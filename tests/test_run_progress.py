"""`campaign run` says, as each cell ends, how many requests were done, the throughput and the TTFA
p50 (issue 32), figures read from the one metric implementation (stats/metrics): the printed
numbers equal what `run_metrics` computes from the stored run. The CLI runs as a subprocess
against the real reference engine and a real DuckDB file."""

from __future__ import annotations

import re

import pytest

from data.store import open_store
from stats.metrics.compute import run_metrics
from stats.metrics.registry import throughput_unit
from test_run_exit import _frozen, campaign

pytestmark = pytest.mark.timeout(240)


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_each_cell_prints_requests_throughput_and_ttfa_p50(tmp_path):
    plan, doc, db = _frozen(tmp_path, concurrencies=(1, 2), requests=3, repeats=1)
    r = campaign("run", str(plan), db=db)
    assert r.returncode == 0, r.stdout + r.stderr
    with open_store(db, read_only=True) as store:
        runs = store.query("SELECT run_id, cell_key FROM runs ORDER BY cell_key")
        assert len(runs) == 2 * len(doc["engines"])
        for run in runs:
            m = run_metrics(store, run["run_id"])
            line = (f"{run['cell_key']}: {m.completed}/{m.requests} requests done, throughput "
                    f"{m.throughput:.2f} ({throughput_unit(m.throughput_scale)}), TTFA p50 {m.ttfa_p50_s * 1000:.0f} ms")
            assert line in r.stdout, (line, r.stdout)
            assert m.completed == 3
    # one such line per cell, each after the runner's own line for that cell
    assert len(re.findall(r"requests done", r.stdout)) == len(runs)
