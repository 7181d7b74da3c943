"""Scoring-pass speed: reuse by content and the DNSMOS computation, with ratios from the same run.

Drives the real reference engine (profiles `baseline` and `fast`, which return byte-identical
audio) over N holdout utterances at C4, `--repeats` measured runs each, then:

1. times `score_plan` (pocketsphinx, resemblyzer, dnsmos): rows written, distinct computations,
   reused rows, seconds; and, as the no-reuse baseline, the same scorer over every row's audio
   (what a pass without reuse computes), with the ratio;
2. times our DNSMOS OVRL against speechmos' own `dnsmos.run` on the same clips (per clip, after
   warm-up, both in-process with all cores) and prints the largest difference (expected 0).

    .venv/bin/python bench/bench_quality_scoring.py [--n 16] [--repeats 2] [--dnsmos-clips 8]
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate(root: Path, n: int, repeats: int):
    """Record measured runs of ref-baseline and ref-fast; returns (store, plan, artifacts dir)."""
    from console.recording import launch_engine, record_run, stop_engine
    from data.plan_model import plan_from_dict
    from data.store import Store
    from data.workload import load_workload
    from engine_adapters.driver import DriveSpec, RequestSpec
    from data.plan_model import EngineSpec

    store = Store(root / "bench.duckdb")
    utts = load_workload(None, "en").pool("holdout")[:n]
    reqs = [RequestSpec(u.utt_id, u.target_text, u.prompt_wav, u.prompt_text) for u in utts]
    art, plan_hash = root / "artifacts", "b" * 64
    for profile in ("baseline", "fast"):
        port = _port()
        # no argv: the reference adapter builds it from the spec (dialect, profile, port)
        eng = launch_engine(store, EngineSpec(f"ref-{profile}", "reference", "vllm-omni", port=port,
                                              health_timeout_s=120, profile=profile), log_dir=root / "logs")
        try:
            for rep in range(repeats):
                spec = DriveSpec(f"{profile}-r{rep}", eng.spec.url, "vllm-omni", 4, reqs, timeout_s=120,
                                 artifacts_dir=art, sampling={"seed": 42, "temperature": 0.0})
                record_run(store, spec, engine=f"ref-{profile}", kind="measured", plan_hash=plan_hash, pool="holdout",
                           launch_id=eng.launch_id, repeat_index=rep, telemetry=False)
        finally:
            stop_engine(store, eng, grace_s=2)
    engines = [{"name": f"ref-{p}", "adapter": "reference", "dialect": "vllm-omni", "port": 1, "profile": p}
               for p in ("baseline", "fast")]
    raw = {"schema": "omni-campaign-plan/1", "name": "bench", "model": {"id": "reference"}, "engines": engines,
           "workload": {"root": "data/sample_workload", "locale": "en", "pool": "holdout"},
           "sweep": {"concurrencies": [4], "requests_per_run": n, "measured_repeats": repeats},
           "quality": {"baseline": "ref-baseline", "candidate": "ref-fast", "concurrencies": [4], "pool": "holdout",
                       "scorers": {"wer": "pocketsphinx", "sim": "resemblyzer", "mos": "dnsmos"}}}
    return store, plan_from_dict(raw, hash=plan_hash), art


def no_reuse_seconds(store, plan, art, name: str) -> float:
    """Seconds for the scorer over every expected row's audio, one computation per row."""
    from data.workload import load_workload
    from stats.quality.base import ScoreItem
    from stats.quality.registry import make_scorer
    from stats.quality.scoring import expected_outputs, resolve_audio

    by_id = load_workload(None, "en").by_id
    items = [ScoreItem(e.run_id, e.request_index, e.utt_id, resolve_audio(art, e.audio_path),
                       by_id[e.utt_id].target_text, by_id[e.utt_id].prompt_wav)
             for e in expected_outputs(store, plan) if e.outcome == "ok"]
    scorer = make_scorer(name)
    t0 = time.perf_counter()
    try:
        scorer.ensure_loaded()
        for start in range(0, len(items), scorer.batch_size):
            scorer.score_batch(items[start:start + scorer.batch_size])
    finally:
        scorer.close()
    return time.perf_counter() - t0


def dnsmos_compare(art: Path, clips: int) -> None:
    from speechmos import dnsmos as speechmos_dnsmos

    from stats.quality.audio import load_audio
    from stats.quality.dnsmos import dnsmos_ovrl

    wavs = [load_audio(p) for p in sorted(art.glob("baseline-r0/*.wav"))[:clips]]
    dnsmos_ovrl(wavs[0]), speechmos_dnsmos.run(wavs[0], 16000)  # warm-up: sessions and imports
    t0 = time.perf_counter()
    ours = [dnsmos_ovrl(w) for w in wavs]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = [float(speechmos_dnsmos.run(w, 16000)["ovrl_mos"]) for w in wavs]
    t_theirs = time.perf_counter() - t0
    secs = sum(len(w) for w in wavs) / 16000
    print(f"DNSMOS over {len(wavs)} clips ({secs:.1f} s audio): ours {t_ours / len(wavs):.3f} s/clip, speechmos "
          f"{t_theirs / len(wavs):.3f} s/clip, ratio {t_theirs / t_ours:.2f}x; max |diff| "
          f"{max(abs(a - b) for a, b in zip(ours, theirs)):.2e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16, help="utterances per run")
    ap.add_argument("--repeats", type=int, default=2, help="measured runs per profile")
    ap.add_argument("--dnsmos-clips", type=int, default=8)
    args = ap.parse_args()
    from stats.quality.scoring import score_plan

    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        t0 = time.perf_counter()
        store, plan, art = generate(Path(tmp), args.n, args.repeats)
        print(f"generated {2 * args.repeats} runs x {args.n} outputs in {time.perf_counter() - t0:.1f} s")
        for s in score_plan(store, plan, artifacts_dir=art):
            base = no_reuse_seconds(store, plan, art, {"pocketsphinx-en": "pocketsphinx"}.get(s.scorer_id, s.scorer_id))
            print(f"{s.scorer_id:16s} rows {s.scored_ok + s.scored_error:4d}  computed {s.computed:4d}  reused "
                  f"{s.reused_pass + s.reused_stored:4d}  pass {s.seconds:6.1f} s  no-reuse {base:6.1f} s  "
                  f"ratio {base / max(s.seconds, 1e-9):.2f}x")
        dnsmos_compare(art, args.dnsmos_clips)
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
