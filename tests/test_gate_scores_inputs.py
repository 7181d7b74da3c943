"""`campaign gate --scores` never judges evidence that is not there: the required concurrencies are
explicit (a table without C16 is INCONCLUSIVE naming C16, others present are not part of the
verdict), a SIM column on the raw cosine scale is refused, prompt ids `NA` and `null` are ids, and
duplicate rows are refused naming the rows. The CLI runs as a subprocess on real CSV files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from stats.controls import baseline_table, with_candidate

ROOT = Path(__file__).resolve().parents[1]
MARGINS = ["--wer-margin", "0.2", "--sim-margin", "0.5", "--mos-margin", "0.05", "--draws", "2000"]


def campaign(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}, timeout=300)


def table(concurrencies=(1, 16, 32), n_ids: int = 8) -> pd.DataFrame:
    """Identical arms (a PASS wherever both have rows), 2 repeats."""
    return with_candidate(baseline_table(n_ids=n_ids, repeats=2, concurrencies=concurrencies))


def gate(tmp_path: Path, df: pd.DataFrame, *extra: str) -> subprocess.CompletedProcess:
    path = tmp_path / "scores.csv"
    df.to_csv(path, index=False)
    return campaign("gate", "--scores", str(path), *MARGINS, *extra, cwd=tmp_path)


@pytest.mark.slow  # 4 s in a loaded `make check`
def test_table_without_c16_is_inconclusive_naming_it(tmp_path):
    r = gate(tmp_path, table((1, 32)))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "Quality verdict: INCONCLUSIVE" in r.stdout
    assert r.stdout.count("required concurrency C16: no baseline or candidate rows") == 3


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_c16_missing_in_one_arm_is_inconclusive_naming_the_arm(tmp_path):
    df = table()
    r = gate(tmp_path, df[~((df["arm"] == "candidate") & (df["concurrency"] == 16))])
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.count("required concurrency C16: no candidate rows") == 3


@pytest.mark.slow  # a campaign gated as a user would
def test_only_c1_with_c1_required_passes_and_extra_concurrencies_are_not_judged(tmp_path):
    r = gate(tmp_path, table((1,)))
    assert r.returncode == 3 and "required concurrency C32: no baseline or candidate rows" in r.stdout
    db = tmp_path / "c.duckdb"
    r = gate(tmp_path, table((1, 4, 16)), "--concurrencies", "16,1", "--issue", "--db", str(db))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Quality verdict: PASS" in r.stdout
    assert "not part of the verdict: C4 in the table (required: C1, C16)" in r.stdout
    con = duckdb.connect(str(db), read_only=True)
    try:
        doc = json.loads(con.execute("SELECT document_json FROM verdicts").fetchone()[0])
    finally:
        con.close()
    assert doc["inputs"]["required_concurrencies"] == [1, 16] and doc["inputs"]["not_judged_concurrencies"] == [4]
    assert {c["concurrency"] for c in doc["checks"]} == {1, 16}
    assert any("--concurrencies 1,16" in c for c in doc["reproduce"]["commands"])


@pytest.mark.parametrize("bad", ["0,16", "1,x", "1,1"])
def test_bad_concurrencies_flag_is_refused(tmp_path, bad):
    r = gate(tmp_path, table(), "--concurrencies", bad)
    assert r.returncode == 2 and "--concurrencies" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow  # 6 s in a loaded `make check`
def test_raw_cosine_sim_is_refused_in_one_line(tmp_path):
    df = table()
    df["sim"] = df["sim"] / 100
    r = gate(tmp_path, df)
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "sim: all 96 values lie within [-1, 1]" in err and "x100 scale" in err
    assert "Quality verdict" not in r.stdout


@pytest.mark.slow  # a campaign gated as a user would
def test_ids_named_na_and_null_are_ids(tmp_path):
    df = table()
    ids = sorted(df["utt_id"].unique())
    df["utt_id"] = df["utt_id"].replace({ids[0]: "NA", ids[1]: "null"})
    df.loc[df.index[:5], "sim"] = None  # a missing value in a numeric column is still missing
    df.loc[df["utt_id"] == "NA", "gap"] = "NA"
    r = gate(tmp_path, df)
    assert "utt_id is empty" not in r.stderr, r.stderr
    assert r.returncode == 3, r.stdout + r.stderr  # the blanked SIM values are a coverage gap, as they must be
    assert "8/8" in r.stdout and "Quality verdict: INCONCLUSIVE" in r.stdout
    r = gate(tmp_path, table().replace({"utt_id": {ids[0]: "NA", ids[1]: "null"}}))
    assert r.returncode == 0 and "Quality verdict: PASS" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow  # 6 s in a loaded `make check`
def test_duplicate_rows_are_refused_naming_the_rows(tmp_path):
    df = table()
    df = pd.concat([df, df.iloc[[4]]], ignore_index=True)
    r = gate(tmp_path, df)
    assert r.returncode == 2, r.stdout + r.stderr
    u = df.iloc[4]
    assert r.stderr.strip() == (f"campaign: error: {tmp_path / 'scores.csv'}: rows 5 and {len(df)} are duplicates "
                                f"(arm=baseline concurrency=1 repeat=0 utt_id={u['utt_id']}): one row per arm, "
                                "concurrency, repeat and utt_id")
