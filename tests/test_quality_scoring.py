"""Scoring a plan's quality cells into the run store: coverage with causes, idempotency,
the contract-7 long table, and `campaign score` end to end."""

from __future__ import annotations

import math

import pytest

from console.cli import main
from data.store import Store
from data.workload import load_workload
from stats.quality.audio import load_audio
from stats.quality.scoring import coverage, expected_outputs, score_plan, scores_frame, FRAME_COLUMNS
from test_quality_support import add_run, campaign_setup, frozen_plan, noisy

pytestmark = pytest.mark.slow  # every test reads one scored campaign (real scorers: 43 s to set up in a loaded full run)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """Baseline and candidate runs at C1 (candidate: one timed-out request, one noisy output),
    scored once with the bundled scorers."""
    tmp = tmp_path_factory.mktemp("scored")
    store, plan, wl, art = campaign_setup(tmp, repeats=1)
    add_run(store, plan, "base-c1", "ref-base", art, wl)
    clip = noisy(load_audio(art / "base-c1" / "0-spk1-t1.wav"), 0.1, seed=3)
    add_run(store, plan, "cand-c1", "ref-cand", art, wl, fail={"spk2-t2": "timeout"}, audio={"spk1-t1": clip})
    add_run(store, plan, "cand-prof", "ref-cand", art, wl, kind="profiled")  # never expected
    summaries = score_plan(store, plan, artifacts_dir=art)
    yield store, plan, art, summaries, tmp
    store.close()


def test_scoring_writes_every_scorable_output_once(scored):
    store, plan, art, summaries, _ = scored
    assert {s.scorer_id for s in summaries} == {"pocketsphinx-en", "resemblyzer", "dnsmos"}
    for s in summaries:
        assert s.expected == 8 and s.scored_ok == 7 and s.scored_error == 0, s
        # spk1-t2 and spk2-t1 are the same bytes in both runs: computed once each
        assert (s.computed, s.reused_pass, s.reused_stored) == (5, 2, 0), s
        assert s.not_scorable == {"request failed": 1}
    assert store.scalar("SELECT count(*) FROM quality_scores") == 21
    assert store.scalar("SELECT count(*) FROM quality_scores WHERE run_id = 'cand-prof'") == 0
    wer = store.query("SELECT * FROM quality_scores WHERE scorer_id = 'pocketsphinx-en' ORDER BY run_id, request_index")
    for r in wer:
        assert r["wer_ref_words"] == 8 and r["ref_norm"] and r["hypothesis"] is not None
        assert r["value"] == pytest.approx((r["wer_substitutions"] + r["wer_deletions"] + r["wer_insertions"]) / 8)
        assert len(r["model_hash"]) == 64 and r["audio_sha256"]
    events = store.query("SELECT subject FROM audit_events WHERE kind = 'scores_recorded'")
    assert sorted(e["subject"] for e in events) == ["dnsmos", "pocketsphinx-en", "resemblyzer"]


def test_scoring_twice_writes_no_duplicates(scored):
    store, plan, art, _, _ = scored
    before = store.query("SELECT * FROM quality_scores ORDER BY run_id, request_index, scorer_id")
    again = score_plan(store, plan, artifacts_dir=art)
    assert all(s.existing == 7 and s.scored_ok == s.scored_error == 0 for s in again)
    assert store.query("SELECT * FROM quality_scores ORDER BY run_id, request_index, scorer_id") == before
    assert store.scalar("SELECT count(*) FROM audit_events WHERE kind = 'scores_recorded'") == 3


def test_coverage_lists_failed_request_as_gap(scored):
    store, plan, art, _, _ = scored
    lines, gaps = coverage(store, plan, art)
    cand = [ln for ln in lines if ln.arm == "candidate"]
    assert {(ln.metric, ln.expected, ln.scored) for ln in cand} == {("wer", 4, 3), ("sim", 4, 3), ("mos", 4, 3)}
    assert all(ln.gaps == {"request failed": 1} for ln in cand)
    assert {(g["utt_id"], g["metric"], g["cause"]) for g in gaps} == {
        ("spk2-t2", m, "request failed: timeout") for m in ("wer", "sim", "mos")}


def test_scores_frame_contract(scored):
    store, plan, art, _, _ = scored
    df = scores_frame(store, plan, art)
    assert list(df.columns) == FRAME_COLUMNS
    assert len(df) == 8 and set(df["arm"]) == {"baseline", "candidate"}
    failed = df[df["utt_id"].eq("spk2-t2") & df["arm"].eq("candidate")].iloc[0]
    assert failed["gap"] == "request failed: timeout"
    assert all(math.isnan(failed[c]) for c in ("wer_errors", "wer_words", "sim", "mos"))
    ok = df[df["gap"].isna()]
    assert len(ok) == 7 and (ok["wer_words"] == 8).all() and ok["sim"].between(-100, 100.0001).all()
    assert df.attrs["scorers"] == {"wer": "pocketsphinx-en", "sim": "resemblyzer", "mos": "dnsmos"}
    assert df.attrs["labels"]["mos"].startswith("DNSMOS")
    # the noisy candidate output scores lower DNSMOS than the clean baseline of the same utterance
    b = df[(df.arm == "baseline") & (df.utt_id == "spk1-t1")]["mos"].item()
    c = df[(df.arm == "candidate") & (df.utt_id == "spk1-t1")]["mos"].item()
    assert c < b - 0.3, (b, c)


def test_missing_runs_audio_and_unavailable_scorer_are_gaps(scored, tmp_path):
    store, plan, art, _, tmp = scored
    # a plan needing two repeats at C1 and C2, whisper for WER (its folder gone since the freeze,
    # which refuses a folder that does not exist: data/plan_paths.py), same store
    gone = tmp_path / "no-whisper-here"
    gone.mkdir()
    # a second plan of the same store, so a name of its own (one name, one frozen plan)
    p2 = frozen_plan(store, tmp / "plan2.json", tmp / "workload", repeats=2, concurrencies=(1,), name="quality-test-2",
                     scorers={"wer": "whisper", "sim": "resemblyzer", "mos": "dnsmos"},
                     model_paths={"whisper": str(gone)})
    gone.rmdir()
    wl = load_workload(tmp / "workload", "en")
    add_run(store, p2, "p2-base", "ref-base", art, wl)
    (art / "p2-base" / "1-spk1-t2.wav").unlink()
    df = scores_frame(store, p2, art)
    assert len(df) == 16  # 2 arms x 2 repeats x 4 utterances: missing runs still have rows
    missing = df[df["run_id"].isna()]
    assert len(missing) == 12 and missing["gap"].str.startswith("run missing").all()
    gone = df[(df.run_id == "p2-base") & (df.utt_id == "spk1-t2")].iloc[0]
    assert gone["gap"].startswith("audio missing")
    other = df[(df.run_id == "p2-base") & (df.utt_id == "spk1-t1")].iloc[0]
    assert other["gap"].startswith("wer: scorer unavailable: model directory") and "sim: not scored yet" in other["gap"]
    with pytest.raises(Exception, match="unavailable"):
        score_plan(store, p2, artifacts_dir=art)
    assert len(expected_outputs(store, p2)) == 16


def test_cli_score_and_recheck(scored, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # wide enough that Rich does not wrap column titles
    store, plan, art, _, tmp = scored
    db = str(store.path)
    store.close()  # the CLI opens the file itself
    try:
        rc = main(["score", str(tmp / "plan.json"), "--db", db, "--artifacts", str(art), "--scorer", "pocketsphinx"])
        out = capsys.readouterr().out
        assert rc == 0
        assert "Seed-TTS WER" in out and "corpus WER" in out and "request failed: timeout" in out
        assert "DNSMOS" in out and "copied from earlier" in out
        rc = main(["score", "--recheck", "spk1-t2", "--run", "base-c1", "--db", db, "--artifacts", str(art)])
        out = capsys.readouterr().out
        assert rc == 0 and "1/1 stored transcripts reproduce" in out
        # stored, announced, checked (issue 28): the row, its recheck_stored event, audit verify's check
        from data.integrity_record import check_rechecks
        from data.audit import events
        with Store(db) as s:
            [row] = s.query("SELECT * FROM recheck_results")
            assert (row["run_id"], row["utt_id"], row["reproduces"], row["same_model"]) == ("base-c1", "spk1-t2", True, True)
            [ev] = events(s, kind="recheck_stored")
            assert ev["subject"] == row["recheck_id"] and f"stored as recheck {row['recheck_id']}" in out
            assert check_rechecks(s, events(s)).ok
            s.con.execute("UPDATE recheck_results SET new_errors = new_errors + 1")
            bad = check_rechecks(s, events(s))
            assert not bad.ok and "differ from the digest" in bad.message
            s.con.execute("UPDATE recheck_results SET new_errors = new_errors - 1")
        assert main(["score", "--recheck", "nobody-t9", "--db", db]) == 2
        assert main(["score", str(tmp / "nope.json"), "--db", db]) == 2
        assert main(["score", str(tmp / "plan.json"), "--db", db, "--scorer", "bogus"]) == 2
        # per-scorer batch sizes: NAME=N reaches that scorer; bad values are one line, exit 2
        rc = main(["score", str(tmp / "plan.json"), "--db", db, "--artifacts", str(art), "--scorer", "pocketsphinx",
                   "--batch-size", "4", "--batch-size", "pocketsphinx=3"])
        assert rc == 0 and "batch 3)" in capsys.readouterr().out
        for bad, needle in (("pocketsphinx=0", "must be >= 1"), ("x", "not N or NAME=N"),
                            ("utmos22=8", "utmos22 is not scored in this pass")):
            assert main(["score", str(tmp / "plan.json"), "--db", db, "--artifacts", str(art), "--scorer",
                         "pocketsphinx", "--batch-size", bad]) == 2
            err = capsys.readouterr().err
            assert needle in err and len(err.strip().splitlines()) == 1, err
    finally:
        reopened = Store(db)
        scored[0].con = reopened.con  # later tests (none today) keep a usable store


def test_cli_score_in_a_pipe_prints_progress_lines_and_an_uncut_table(tmp_path):
    """In a pipe `campaign score` says per scorer how many outputs it expects and how far it is
    (a line at each tenth and at the end; no Rich bar), and its scoring-pass table is never cut to
    `sco… met… exp…` (issue 32): in a pipe it is printed at its natural width, one line per row,
    whatever COLUMNS says (console/output.py; at a terminal it is fitted: tests/test_output_tables.py)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    store, plan, wl, art = campaign_setup(tmp_path, repeats=1)
    add_run(store, plan, "base-c1", "ref-base", art, wl)
    add_run(store, plan, "cand-c1", "ref-cand", art, wl)
    db = str(store.path)
    store.close()
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "console.cli", "score", str(tmp_path / "plan.json"), "--db", db,
                        "--artifacts", str(art), "--scorer", "pocketsphinx", "--batch-size", "1"],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(root), "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(ln.startswith("scoring pocketsphinx-en (wer, ") and ln.endswith("batch 1): 8 expected outputs")
               for ln in lines), r.stdout
    steps = [ln for ln in lines if ln.startswith("scoring pocketsphinx-en: ")]
    # base and cand carry the same bytes: 4 distinct outputs are computed for the 8 expected
    assert steps and steps[-1] == "scoring pocketsphinx-en: 4/4 distinct outputs computed", steps
    assert len(steps) == len(set(steps)) <= 11
    table = r.stdout[r.stdout.index("scoring pass"):r.stdout.index("computed: distinct outputs")]
    rows = [ln for ln in table.splitlines() if ln.startswith(("┃", "│"))]
    assert "…" not in table and len(rows) == 2, table  # the header and the one scorer's row, each on one line
    for header in ("scorer", "stored before", "copied from earlier", "not scorable"):
        assert f"┃ {header} " in rows[0], table
