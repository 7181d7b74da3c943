"""A synthetic campaign store for the results-layer tests and bench/bench_results.py (helper "results").

Real plan freeze, real audit events, real `campaign gate` verdicts (quality noninferiority and a
throughput decision rule) through the project's own code; only the measurement rows are generated
(bulk inserts, deterministic numbers), so a store of real-campaign size builds in seconds.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import soundfile as sf

from plans_helpers import make_workload, plan_dict

from data.audit import append_event
from data.digest import DIGEST_VERSION, RUN_TABLES, digestible_columns, run_digests
from data.plan_freeze import freeze
from data.score_digest import announce
from data.store import Store

RATE = 24_000
BASE_NS = 1_000_000_000_000
ENGINES = ("ref-baseline", "ref-fast")
SCORERS = {"wer": "pocketsphinx-en", "sim": "resemblyzer", "mos": "dnsmos"}


def _insert_frame(store: Store, table: str, df: pd.DataFrame) -> None:
    store.con.register("_frame", df)
    try:
        store.con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _frame")
    finally:
        store.con.unregister("_frame")


def _run_row(plan, run_id: str, engine: str, c: int, rep: int, pool: str, n: int, started: datetime) -> dict:
    return {"run_id": run_id, "plan_hash": plan.hash, "cell_key": f"{engine}/c{c}/measured/{rep}/{pool}",
            "engine": engine, "dialect": "vllm-omni", "url": "http://127.0.0.1:8101", "concurrency": c,
            "repeat_index": rep, "kind": "measured", "status": "complete", "pool": pool, "requests_planned": n,
            "started_at": started, "ended_at": started + timedelta(seconds=30), "anchor_wall_ns": 0,
            "anchor_perf_ns": BASE_NS, "params_json": json.dumps({**plan.metrics.as_dict(), "phase": pool}),
            "telemetry_status": "ok", "metrics_version": "2"}


def _requests(rng, run_id: str, engine: str, c: int, utts: list[str], chunks: int, *, fail_every: int = 0,
              audio_dir: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """n requests in waves of c, each with `chunks` audio chunks of 0.5 s; the fast engine's chunks
    come sooner. Arrival jitter makes RTF and TTFA spread; every `fail_every`-th request fails."""
    n = len(utts)
    speed = 0.55 if engine == "ref-fast" else 0.75
    idx = np.arange(n)
    t_send = BASE_NS + (idx // c) * int(chunks * speed * 1.2e9) + idx * 1_000_000
    ttfa = (0.10 + 0.02 * np.log2(c) + rng.gamma(2.0, 0.02, n)) * (0.8 if engine == "ref-fast" else 1.0)
    gaps = rng.gamma(4.0, speed / 4.0 * 0.5, (n, max(chunks - 1, 0))) * (1 + 0.05 * np.log2(c))
    arr = t_send[:, None] + (np.concatenate([ttfa[:, None], gaps], axis=1).cumsum(axis=1) * 1e9).astype(np.int64)
    failed = (idx % fail_every == fail_every - 1) if fail_every else np.zeros(n, bool)
    kept = np.where(failed, 1, chunks)
    samples = RATE // 2
    last = arr[idx, kept - 1]
    req = pd.DataFrame({
        "run_id": run_id, "request_index": idx.astype(np.int32), "utt_id": utts, "is_warmup": False,
        "outcome": np.where(failed, "no_end_marker", "ok"), "error_detail": np.where(failed, "stream ended without [DONE]", None),
        "http_status": np.int32(200), "t_send_ns": t_send, "t_first_byte_ns": arr[:, 0] - 5_000_000,
        "t_first_audio_ns": arr[:, 0], "t_last_audio_ns": last, "t_end_ns": last + 2_000_000,
        "audio_samples": (kept * samples).astype(np.int64), "sample_rate": np.int32(RATE),
        "audio_chunks": kept.astype(np.int32), "events": (kept + 1).astype(np.int32),
        "bytes_received": (kept * samples * 2).astype(np.int64), "finish_reason": "stop",
        "audio_path": [f"{run_id}/{i}.wav" for i in idx] if audio_dir is not None else None,
    })
    if audio_dir is not None:
        (audio_dir / run_id).mkdir(parents=True, exist_ok=True)
        for i in idx:
            sf.write(audio_dir / run_id / f"{i}.wav", np.zeros(240, "float32"), RATE)
    mask = np.arange(chunks)[None, :] < kept[:, None]
    ri, ci = np.nonzero(mask)
    ch = pd.DataFrame({"run_id": run_id, "request_index": ri.astype(np.int32), "chunk_index": ci.astype(np.int32),
                       "t_arrival_ns": arr[ri, ci], "kind": "audio", "samples": np.int32(samples),
                       "payload_bytes": np.int32(samples * 2)})
    return req, ch


def _gpu(run_id: str, seconds: float, rng) -> pd.DataFrame:
    k = np.arange(int(seconds * 10))
    util = np.clip(20 + 75 * (1 - np.exp(-k / 15)) + rng.normal(0, 3, k.size), 0, 100)
    return pd.DataFrame({"run_id": run_id, "gpu_index": np.int16(0), "t_ns": BASE_NS + k * 100_000_000,
                         "util_gpu_pct": util.astype("float32"), "power_w": (90 + 5.5 * util).astype("float32"),
                         "sm_clock_mhz": np.float32(1980.0), "temp_c": (40 + util / 4).astype("float32")})


def _scores(rng, run_id: str, utts: list[str], arm: str, rep: int, c: int = 1) -> pd.DataFrame:
    rows = []
    now = datetime(2025, 12, 1, 12, 0, tzinfo=timezone.utc)
    for i, u in enumerate(utts):
        words = 8 + (i % 5)
        errs = int(rng.integers(0, 2)) + (1 if arm == "candidate" and i % 4 == 0 else 0)
        errs += int(np.log2(c)) * (i % 2)  # more errors under load (quality under load)
        rows.append({"run_id": run_id, "request_index": i, "utt_id": u, "metric": "wer", "scorer_id": SCORERS["wer"],
                     "status": "ok", "value": errs / words, "wer_substitutions": errs, "wer_deletions": 0,
                     "wer_insertions": 0, "wer_ref_words": words, "scored_at": now})
        rows.append({"run_id": run_id, "request_index": i, "utt_id": u, "metric": "sim", "scorer_id": SCORERS["sim"],
                     "status": "ok", "value": 70 + rng.normal(0, 2) - (0.1 if arm == "candidate" else 0), "scored_at": now})
        rows.append({"run_id": run_id, "request_index": i, "utt_id": u, "metric": "mos", "scorer_id": SCORERS["mos"],
                     "status": "ok", "value": 3.6 + rng.normal(0, 0.1), "scored_at": now})
    return pd.DataFrame(rows)


def announce_runs(store: Store, plan_hash: str, run_ids: list[str]) -> None:
    """The events the recorder appends around runs inserted by hand (console/recording.py):
    run_started, then run_ended with the run's digest, so `audit verify` and `evidence verify`
    hold on such a store."""
    columns = {table: digestible_columns(table) for table, _ in RUN_TABLES}
    digests = run_digests(store, run_ids, columns)
    for run_id in run_ids:
        r = store.query("SELECT * FROM runs WHERE run_id = ?", [run_id])[0]
        append_event(store, "run_started", plan_hash=plan_hash, subject=run_id,
                     payload={"engine": r["engine"], "kind": r["kind"], "concurrency": r["concurrency"],
                              "cell_key": r["cell_key"], "requests_planned": r["requests_planned"], "url": r["url"]})
        append_event(store, "run_ended", plan_hash=plan_hash, subject=run_id, payload={
            "status": r["status"], "requests_stored": store.scalar("SELECT count(*) FROM requests WHERE run_id = ?", [run_id]),
            "digest": {"v": DIGEST_VERSION, "columns": columns, "tables": digests[run_id]}})


def _announce(store: Store, plan, runs: list[dict], scores: pd.DataFrame) -> None:
    """announce_runs, then what the scorer appends (stats/quality/scoring.py): scores_stored with
    each scorer's digest."""
    announce_runs(store, plan.hash, [r["run_id"] for r in runs])
    for scorer_id, rows in scores.groupby("scorer_id"):
        stored = announce(store, str(scorer_id), rows[["run_id", "request_index"]].to_dict("records"))
        append_event(store, "scores_stored", plan_hash=plan.hash, subject=str(scorer_id), payload=stored.payload())


def build_campaign(root: Path, *, concurrencies=(1, 2, 4), repeats: int = 3, requests: int = 8, chunks: int = 4,
                   holdout: int = 6, gpu: bool = True, gate: bool = True, seed: int = 7,
                   sim_gap: bool = True, quality_concurrencies=(1,),
                   gated: tuple[int, ...] | None = None, precision_change: bool = False,
                   margins: dict[str, float] | None = None, ports=(8101, 8102),
                   sections: dict | None = None) -> tuple[Path, Path]:
    """`root/campaign.duckdb` and `root/plan.json`: two engines x concurrencies x repeats of the
    sweep pool, quality runs of both arms on the holdout at each of `quality_concurrencies` (C1)
    with scores, and (gate=True) the verdicts `campaign gate plan.json` issues. `gated`: the plan's
    `quality.concurrencies` (default: `quality_concurrencies`). `sim_gap`: one candidate SIM score
    is a scorer error, so the SIM check is a coverage gap (INCONCLUSIVE) while WER and MOS are decided.
    `precision_change`: the candidate engine declares one (docs/equivalence.md). `margins`: the
    plan's quality margins (wide ones let the candidate PASS). `ports`: the engines' (real engines
    are launched only by commands that run them, e.g. `campaign equivalence`); `sections`: plan
    sections set as given (e.g. an `equivalence` section)."""
    rng = np.random.default_rng(seed)
    wl = make_workload(root / "wl", n=12 + holdout, n_holdout=holdout)
    doc = plan_dict(wl, concurrencies=concurrencies, requests=requests, repeats=repeats, ports=list(ports))
    doc.update(sections or {})
    doc["decision_rules"] = [{"name": "fast-exceeds-baseline", "kind": "throughput_exceeds", "candidate": "ref-fast",
                              "reference": "ref-baseline", "concurrencies": [max(concurrencies)], "confidence": 0.95}]
    doc["quality"]["concurrencies"] = list(quality_concurrencies if gated is None else gated)
    if precision_change:
        doc["engines"][1]["precision_change"] = True
    if margins is not None:
        doc["quality"]["margins"] = margins
    plan_path = root / "plan.json"
    plan_path.write_text(json.dumps(doc, indent=2))
    db = root / "campaign.duckdb"
    pools = json.loads((wl / "pools.json").read_text())
    tuning, hold = pools["tuning"], pools["holdout"]
    with Store(db) as store:
        plan = freeze(store, plan_path).plan
        runs, reqs, chs, gpus, scores = [], [], [], [], []
        started = datetime(2025, 12, 1, 10, 0, tzinfo=timezone.utc)
        for rep in range(repeats):
            for c in concurrencies:
                for engine in ENGINES:
                    rid = f"{engine[4:]}-c{c}-r{rep}"
                    utts = [tuning[i % len(tuning)] for i in range(requests)]
                    runs.append(_run_row(plan, rid, engine, c, rep, "tuning", requests, started))
                    started += timedelta(minutes=1)
                    q, ch = _requests(rng, rid, engine, c, utts, chunks,
                                      fail_every=(5 if engine == "ref-fast" and c == max(concurrencies) else 0))
                    reqs.append(q)
                    chs.append(ch)
                    if gpu and rep == 0:
                        gpus.append(_gpu(rid, 6.0, rng))
            for (arm, engine), qc in ((a, c) for a in (("baseline", ENGINES[0]), ("candidate", ENGINES[1]))
                                      for c in quality_concurrencies):
                rid = f"{engine[4:]}-q{qc}-r{rep}"
                runs.append(_run_row(plan, rid, engine, qc, rep, "holdout", len(hold), started))
                started += timedelta(minutes=1)
                q, ch = _requests(rng, rid, engine, qc, hold, chunks, audio_dir=root / "artifacts")
                reqs.append(q)
                chs.append(ch)
                sc = _scores(rng, rid, hold, arm, rep, qc)
                if sim_gap and arm == "candidate" and rep == 0 and qc == quality_concurrencies[0]:
                    bad = (sc["metric"] == "sim") & (sc["request_index"] == 0)
                    sc.loc[bad, ["status", "value", "error"]] = ["error", None, "scorer failed: empty embedding"]
                scores.append(sc)
        _insert_frame(store, "runs", pd.DataFrame(runs))
        _insert_frame(store, "requests", pd.concat(reqs, ignore_index=True))
        _insert_frame(store, "chunks", pd.concat(chs, ignore_index=True))
        if gpus:
            _insert_frame(store, "gpu_samples", pd.concat(gpus, ignore_index=True))
        all_scores = pd.concat(scores, ignore_index=True)
        _insert_frame(store, "quality_scores", all_scores)
        _announce(store, plan, runs, all_scores)
    if gate:
        from console.cli import main
        main(["gate", str(plan_path), "--db", str(db)])
    return db, plan_path
