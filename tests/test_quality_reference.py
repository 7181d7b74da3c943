"""Done-when check on the reference engine: over a subset of the sample workload, the `fast`
profile delivers the same audio bytes and therefore the same scores as `baseline`, and `lossy`
scores measurably worse on at least one quality metric. Real HTTP, real driver, real scorers."""

from __future__ import annotations

import math
import socket

import pytest

from console.recording import launch_engine, record_run, stop_engine
from data.plan_model import plan_from_dict
from data.workload import load_workload
from engine_adapters.driver import DriveSpec, RequestSpec
from data.plan_model import EngineSpec
from stats.quality.scoring import score_plan, scores_frame
from stats.quality.summary import summarise

N_UTTS = 4
PROFILES = ("baseline", "fast", "lossy")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plan(candidate: str, plan_hash: str):
    engines = [{"name": f"ref-{p}", "adapter": "reference", "dialect": "vllm-omni", "port": 1, "profile": p}
               for p in PROFILES]
    raw = {"schema": "omni-campaign-plan/1", "name": "lossy-check", "model": {"id": "reference"}, "engines": engines,
           "workload": {"root": "data/sample_workload", "locale": "en", "pool": "tuning"},
           "sweep": {"concurrencies": [4], "requests_per_run": N_UTTS, "measured_repeats": 1},
           "quality": {"baseline": "ref-baseline", "candidate": candidate, "concurrencies": [4], "pool": "tuning",
                       "scorers": {"wer": "pocketsphinx", "sim": "resemblyzer", "mos": "dnsmos"}}}
    return plan_from_dict(raw, hash=plan_hash)


@pytest.mark.slow
def test_lossy_scores_worse_and_fast_scores_identically(store, tmp_path):
    wl = load_workload(None, "en")
    utts = wl.pool("tuning")[:N_UTTS]
    reqs = [RequestSpec(u.utt_id, u.target_text, u.prompt_wav, u.prompt_text) for u in utts]
    plan_hash = "q" * 64
    art = tmp_path / "artifacts"
    for profile in PROFILES:
        port = _port()
        # no argv: the reference adapter builds it from the spec (dialect, profile, port)
        eng = launch_engine(store, EngineSpec(f"ref-{profile}", "reference", "vllm-omni", port=port,
                                              health_timeout_s=90, profile=profile), log_dir=tmp_path / "logs")
        try:
            spec = DriveSpec(f"run-{profile}", eng.spec.url, "vllm-omni", 4, reqs, timeout_s=90, artifacts_dir=art,
                             sampling={"seed": 42, "temperature": 0.0})
            record_run(store, spec, engine=f"ref-{profile}", kind="measured", plan_hash=plan_hash, pool="tuning",
                       launch_id=eng.launch_id, telemetry=False)
        finally:
            stop_engine(store, eng, grace_s=2)
    outcomes = store.query("SELECT run_id, outcome, count(*) n FROM requests GROUP BY ALL")
    assert all(r["outcome"] == "ok" for r in outcomes), outcomes

    # fast: byte-identical audio, utterance by utterance
    sha = {(r["run_id"], r["utt_id"]): r["audio_sha256"] for r in store.query("SELECT * FROM requests")}
    assert all(sha[("run-fast", u.utt_id)] == sha[("run-baseline", u.utt_id)] for u in utts)
    assert any(sha[("run-lossy", u.utt_id)] != sha[("run-baseline", u.utt_id)] for u in utts)

    lossy_plan, fast_plan = _plan("ref-lossy", plan_hash), _plan("ref-fast", plan_hash)
    # SIM and MOS only: pocketsphinx on espeak voices is near 90 % WER whatever the profile, and
    # it is the slowest scorer here (the WER path is covered in test_quality_scoring.py)
    scorers = ["resemblyzer", "dnsmos"]
    score_plan(store, lossy_plan, artifacts_dir=art, scorers=scorers)
    # baseline rows exist; fast's audio is baseline's bytes, so its rows are copies: nothing computed
    for s in score_plan(store, fast_plan, artifacts_dir=art, scorers=scorers):
        assert (s.existing, s.computed, s.reused_stored) == (N_UTTS, 0, N_UTTS), s
    assert store.scalar("SELECT count(*) FROM quality_scores") == 2 * 3 * N_UTTS

    fast = scores_frame(store, fast_plan, art)
    assert (fast["gap"] == "wer: not scored yet").all()
    cols = ["utt_id", "sim", "mos"]
    b = fast[fast.arm == "baseline"][cols].sort_values("utt_id").reset_index(drop=True)
    f = fast[fast.arm == "candidate"][cols].sort_values("utt_id").reset_index(drop=True)
    assert b.equals(f), (b, f)

    lossy = scores_frame(store, lossy_plan, art)
    assert lossy["sim"].notna().all() and lossy["mos"].notna().all()
    cells = {c.arm: c for c in summarise(lossy)}
    base, cand = cells["baseline"], cells["candidate"]
    print(f"baseline: SIM {base.sim:.2f} DNSMOS {base.mos:.3f}; lossy: SIM {cand.sim:.2f} DNSMOS {cand.mos:.3f}")
    worse = {"sim": base.sim - cand.sim > 2.0,
             "mos": base.mos - cand.mos > 0.2}
    assert any(worse.values()), (base, cand)
    assert not any(math.isnan(x) for x in (base.sim, cand.sim, base.mos, cand.mos))
