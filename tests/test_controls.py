"""Synthetic controls: every generated dataset gets its known answer."""

from __future__ import annotations

import pytest

from stats import gates
from stats.controls import all_ok, run_controls
from stats.gates import GateConfig


def test_all_controls_pass_with_reference_campaign_settings():
    results = run_controls(GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}, draws=20000, seed=20261022))
    names = [r.name for r in results]
    assert len(results) >= 8 and len(set(names)) == len(names)
    assert {"identical-arms", "wer-beyond-margin", "sim-beyond-margin", "mos-beyond-margin", "inside-margins",
            "missing-id", "scorer-unavailable", "single-outlier", "same-seed"} <= set(names)
    bad = [(r.name, r.detail) for r in results if not r.ok]
    assert not bad
    assert all_ok(results)


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_controls_bca_and_wide_margins():
    assert all_ok(run_controls(GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}, draws=2000, seed=1, method="bca")))
    assert all_ok(run_controls(GateConfig(margins={"wer": 5.0, "sim": 2.0, "mos": 0.3}, draws=2000, seed=1)))


@pytest.mark.parametrize("broken,expect_failing", [
    (lambda bound, margin: gates.PASS if bound <= margin else gates.FAIL, {"bound-equals-margin"}),
    (lambda bound, margin: gates.PASS, {"wer-beyond-margin", "sim-beyond-margin", "mos-beyond-margin",
                                        "single-outlier", "bound-equals-margin"}),
])
def test_controls_catch_a_broken_gate(monkeypatch, broken, expect_failing):
    """Fault injection: a gate with a wrong decision rule must not get past the controls."""
    monkeypatch.setattr(gates, "decide", lambda bound, margin: gates.INCONCLUSIVE if bound is None else broken(bound, margin))
    results = run_controls(GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}, draws=1000, seed=1))
    assert {r.name for r in results if not r.ok} == expect_failing


def test_gate_refuses_when_controls_fail(monkeypatch, tmp_path, capsys):
    from console.cli import main
    from stats.controls import baseline_table, with_candidate

    csv = tmp_path / "s.csv"
    with_candidate(baseline_table(n_ids=10)).to_csv(csv, index=False)
    monkeypatch.setattr(gates, "decide", lambda bound, margin: gates.PASS)
    db = tmp_path / "c.duckdb"
    code = main(["gate", "--scores", str(csv), "--wer-margin", "0.2", "--sim-margin", "0.5", "--mos-margin", "0.05",
                 "--draws", "500", "--issue", "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and "synthetic controls failed" in err and "refuses to issue" in err
    assert not db.exists() or __import__("data.store", fromlist=["Store"]).Store(db).scalar("SELECT count(*) FROM verdicts") == 0


REPEAT_CONTROLS = ("candidate-missing-repeats", "baseline-missing-repeats", "one-id-missing-one-repeat")


@pytest.fixture(scope="module")
def reference_results():
    return {r.name: r for r in run_controls(GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}, draws=2000,
                                                       seed=20261022))}


@pytest.mark.parametrize("name", REPEAT_CONTROLS)
def test_unequal_repeat_controls_are_inconclusive(reference_results, name):
    r = reference_results[name]
    assert r.expected == r.observed == "INCONCLUSIVE" and r.ok, r.detail


def test_unequal_repeat_controls_name_ids_and_repeats(reference_results):
    assert "candidate lacks repeats 1, 2" in reference_results["candidate-missing-repeats"].detail
    assert "baseline lacks repeats 1, 2" in reference_results["baseline-missing-repeats"].detail
    assert "spk02-utt0030 (candidate lacks repeat 2)" in reference_results["one-id-missing-one-repeat"].detail


def test_unequal_repeat_controls_catch_a_gate_that_checks_each_arm_on_its_own(monkeypatch):
    """Fault injection: the old coverage rule (each arm against its own repeat count) fails them."""
    import numpy as np

    real = gates.aggregate_cell

    def per_arm(df_c, concurrency, repeats=None):
        cov = real(df_c, concurrency, repeats)
        arm_reps = {a: sorted(set(df_c.loc[df_c["arm"] == a, "repeat"])) for a in gates.ARMS}
        covered = {}
        for m in gates.METRICS:
            ok = np.ones(len(cov.ids), bool)
            for arm, cols in gates.METRIC_COLUMNS[m].items():
                cols_idx = np.isin(cov.seen_repeats, arm_reps[arm])
                for c in cols:
                    ok &= np.all(cov.counts[(arm, c)][:, cols_idx] == 1, axis=1)
            covered[m] = ok
        return gates.CellCoverage(cov.concurrency, cov.ids, cov.arrays, covered, cov.gaps, cov.repeats,
                                  cov.seen_repeats, cov.counts)

    monkeypatch.setattr(gates, "aggregate_cell", per_arm)
    results = run_controls(GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}, draws=1000, seed=1))
    assert {"candidate-missing-repeats", "baseline-missing-repeats"} <= {r.name for r in results if not r.ok}


@pytest.mark.parametrize("concurrencies,repeats", [((1, 4), (0, 1, 2)), ((1,), (0, 1)), ((1,), (0,))])
def test_controls_follow_the_plans_concurrencies_and_repeats(concurrencies, repeats):
    cfg = GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}, draws=2000, seed=20261022,
                     concurrencies=concurrencies, repeats=repeats)
    results = run_controls(cfg)
    assert all_ok(results), [(r.name, r.detail) for r in results if not r.ok]
    assert set(REPEAT_CONTROLS) <= {r.name for r in results}
    for r in results:
        assert "C16" not in r.detail and "C32" not in r.detail  # the data lies at the plan's concurrencies


@pytest.mark.slow  # the built-in controls, gated three times
def test_gate_reuses_the_controls_of_the_same_settings_and_reruns_on_any_change(tmp_path):
    """The controls ran on every gate call (5 s of an 8 s gate): a second `gate --scores` with the
    same settings reuses them from the file beside the store; a changed seed, draws, margin or
    concurrency runs them again, and an edited cache entry is not trusted."""
    import json
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from data.store import Store
    from stats.controls import baseline_table, with_candidate
    from stats.controls_cache import cache_path

    root = Path(__file__).resolve().parents[1]
    csv, db = tmp_path / "s.csv", tmp_path / "c.duckdb"
    with_candidate(baseline_table(n_ids=8, repeats=2)).to_csv(csv, index=False)
    with Store(db):
        pass

    def gate(*extra: str) -> str:
        r = subprocess.run([sys.executable, "-m", "console.cli", "gate", "--scores", str(csv), "--wer-margin", "0.2",
                            "--sim-margin", "0.5", "--mos-margin", "0.05", "--draws", "500", *extra, "--db", str(db)],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300,
                           env={**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"})
        assert r.returncode == 0, r.stdout + r.stderr
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith("synthetic controls:"))
        return re.sub(r"\s+", " ", line)

    first = gate()
    assert "ran now, kept in c.duckdb.controls-cache.json" in first
    kept = cache_path(db).read_bytes()
    second = gate()
    assert "reused: the same settings and code ran them at" in second and second.endswith(first[-18:])
    assert cache_path(db).read_bytes() == kept  # nothing ran, nothing rewritten
    for changed in (["--seed", "7"], ["--draws", "501"], ["--concurrencies", "1,16"],
                    ["--mos-margin", "0.06"]):
        assert "ran now" in gate(*changed), changed
    assert "reused" in gate()  # the original settings' entry is still there
    doc = json.loads(cache_path(db).read_text())
    key = re.search(r"key ([0-9a-f]{12})", first).group(1)
    entry = next(v for k, v in doc["entries"].items() if k.startswith(key))
    entry["settings"]["gate"]["draws"] = 20000  # an entry whose settings are not the ones its key was made from
    cache_path(db).write_text(json.dumps(doc))
    assert "ran now" in gate()
    cache_path(db).write_text("[" * 100_000)  # a damaged cache file is only a miss
    assert "ran now" in gate()
