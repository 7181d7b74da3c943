"""`campaign scorers` and `campaign scorers run` through the real CLI (subprocesses), on folders
holding the published file names (tiny random checkpoints); `campaign score` stores the very
values `scorers run` prints (same code path); bad input is one line each and a non-zero exit,
and nothing stored changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from stats.quality.scoring import score_plan
from stats.quality.tiny_checkpoints import build_tiny_seedtts_sim, build_tiny_utmos22
from test_quality_support import add_run, campaign_setup

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, env=None, cwd=None):
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "console.cli", *map(str, args)], capture_output=True, text=True,
                          env=e, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return build_tiny_seedtts_sim(d / "sim", seed=11), build_tiny_utmos22(d / "mos", seed=12)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("files")
    rng = np.random.default_rng(5)
    sf.write(d / "a.wav", (0.1 * rng.standard_normal(24000)).astype(np.float32), 24000)
    sf.write(d / "b.wav", (0.1 * rng.standard_normal(20000)).astype(np.float32), 16000)
    (d / "text.wav").write_text("not audio at all")
    (d / "zero.wav").write_bytes(b"")
    return d


@pytest.mark.slow  # scorers over the CLI
def test_run_json_sim_and_mos(models, files):
    sim, mos = models
    r = cli("scorers", "run", "seedtts-sim", "--model-dir", sim, "--device", "cpu", "--json",
            f"{files / 'a.wav'}:{files / 'b.wav'}", f"{files / 'b.wav'}:{files / 'b.wav'}")
    assert r.returncode == 0, r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["status"] for x in recs] == ["ok", "ok"] and recs[1]["value"] == pytest.approx(100.0, abs=1e-6)
    assert all(x["scorer_id"] == "seedtts-sim" and len(x["model_hash"]) == 64 and "float32" in x["scorer_version"]
               for x in recs)
    r = cli("scorers", "run", "utmos22", "--model-dir", mos, "--json", "--device", "cpu", files / "a.wav")
    assert r.returncode == 0, r.stderr
    (rec,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert rec["scorer_id"] == "utmos22" and 1.0 < rec["value"] < 5.0 and "utmos22_strong_step7459_v1.pt" in rec["scorer_version"]


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_list_shows_status_folder_and_hash(models, monkeypatch, capsys):
    from console.cli import main
    sim, mos = models
    monkeypatch.setenv("CAMPAIGN_SEEDTTS_SIM_DIR", str(sim))
    monkeypatch.setenv("CAMPAIGN_UTMOS_DIR", str(mos / "absent"))
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["scorers"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(ln for ln in out if "seedtts-sim" in ln)
    assert "available" in line and str(sim) in line and "unavailable" not in line
    from stats.quality.sim import SeedTtsSimScorer
    assert SeedTtsSimScorer(sim).model_hash[:16] in line
    assert any("utmos22" in ln and "unavailable: model directory" in ln for ln in out)


@pytest.mark.slow  # scorers over the CLI
def test_bad_items_one_line_each_nonzero(models, files):
    _, mos = models
    r = cli("scorers", "run", "utmos22", "--model-dir", mos, "--device", "cpu", "--json",
            files / "missing.wav", files / "zero.wav", files / "text.wav", files / "a.wav")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 3, r.stderr
    for line, needle in zip(err, ("missing.wav: no such file", "zero.wav: empty file (0 bytes)", "unreadable audio")):
        assert needle in line
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["status"] for x in recs] == ["error", "error", "error", "ok"]


def test_other_architecture_checkpoint_is_one_line(models, files, tmp_path, capsys):
    sim, mos = models
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "wavlm_large.pt").write_bytes((mos / "utmos22_strong_step7459_v1.pt").read_bytes())
    (wrong / "wavlm_large_finetune.pth").write_bytes((sim / "wavlm_large_finetune.pth").read_bytes())
    from console.cli import main
    code = main(["scorers", "run", "seedtts-sim", "--model-dir", str(wrong), "--device", "cpu",
                 f"{files / 'a.wav'}:{files / 'b.wav'}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "unavailable" in line and "no cfg dict" in line


@pytest.mark.slow  # every scorer over the CLI
def test_score_stores_what_scorers_run_prints(tmp_path, models):
    sim, mos = models
    store, plan, wl, art = campaign_setup(tmp_path, scorers={"wer": "pocketsphinx", "sim": "seedtts-sim", "mos": "utmos22"},
                                          model_paths={"seedtts-sim": str(sim), "utmos22": str(mos)})
    try:
        add_run(store, plan, "base-c1", "ref-base", art, wl)
        summaries = score_plan(store, plan, scorers=["seedtts-sim", "utmos22"], artifacts_dir=art, device="cpu")
        assert all(s.scored_ok > 0 and s.scored_error == 0 for s in summaries)
        rows = store.query("SELECT q.scorer_id, q.value, q.utt_id, q.scorer_version, q.model_hash, r.audio_path "
                           "FROM quality_scores q JOIN requests r USING (run_id, request_index) ORDER BY q.scorer_id")
        before = store.scalar("SELECT count(*) FROM quality_scores")
    finally:
        store.close()
    sim_row = next(r for r in rows if r["scorer_id"] == "seedtts-sim")
    mos_row = next(r for r in rows if r["scorer_id"] == "utmos22")
    prompt = wl.by_id[sim_row["utt_id"]].prompt_wav
    r = cli("scorers", "run", "seedtts-sim", "--model-dir", sim, "--device", "cpu", "--json",
            f"{art / sim_row['audio_path']}:{prompt}")
    (rec,) = [json.loads(x) for x in r.stdout.splitlines()]
    assert rec["value"] == pytest.approx(sim_row["value"], abs=1e-4)
    assert (rec["scorer_version"], rec["model_hash"]) == (sim_row["scorer_version"], sim_row["model_hash"])
    r = cli("scorers", "run", "utmos22", "--model-dir", mos, "--device", "cpu", "--json", art / mos_row["audio_path"])
    (rec,) = [json.loads(x) for x in r.stdout.splitlines()]
    assert rec["value"] == pytest.approx(mos_row["value"], abs=1e-5) and rec["model_hash"] == mos_row["model_hash"]
    from data.store import Store
    with Store(tmp_path / "campaign.duckdb") as again:
        assert again.scalar("SELECT count(*) FROM quality_scores") == before


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_run_format_json_is_one_array_of_the_old_json_lines(models, files):
    """`scorers run --format json` (issue 32: --format everywhere) prints one JSON array holding the
    objects the older, hidden `--json` prints one per line; that spelling still works unchanged."""
    _, mos = models
    args = ("scorers", "run", "utmos22", "--model-dir", mos, "--device", "cpu")
    new = cli(*args, "--format", "json", files / "a.wav", files / "b.wav")
    old = cli(*args, "--json", files / "a.wav", files / "b.wav")
    assert new.returncode == old.returncode == 0, new.stderr + old.stderr
    assert json.loads(new.stdout) == [json.loads(line) for line in old.stdout.splitlines()]
    assert len(json.loads(new.stdout)) == 2
    assert "--json" not in cli("scorers", "run", "--help").stdout
