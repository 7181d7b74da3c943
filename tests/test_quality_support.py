"""Shared builders for the quality tests (no tests here): a tiny Seed-TTS-format workload with
espeak-ng prompt wavs, outputs synthesised in the prompt speakers' voices, and a run store
holding measured runs that point at them, as the driver would have written them."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import soundfile as sf

from data.audit import append_event
from data.plan_model import plan_from_dict

SPEAKERS = {  # speaker id -> espeak voice parameters (clearly different voices)
    "spk1": dict(voice="en-us+m3", pitch=35, rate=160),
    "spk2": dict(voice="en-us+f4", pitch=80, rate=150),
}
TARGETS = {
    "t1": "The birch canoe slid on the smooth planks.",
    "t2": "Glue the sheet to the dark blue background.",
}
PROMPTS = {"spk1": "Rice is often served in round bowls.", "spk2": "The juice of lemons makes fine punch."}


def synth(text: str, **voice) -> tuple[np.ndarray, int]:
    from engine_adapters.reference.espeak import EspeakSynth, VoiceParams

    syn = EspeakSynth.shared()
    return syn.synthesize(text, VoiceParams(**voice)), syn.sample_rate


def make_workload(root: Path) -> Path:
    """<root>/en/meta.lst + prompt wavs + pools.json (pool 'holdout' = all four utterances)."""
    en = root / "en"
    (en / "prompt-wavs").mkdir(parents=True, exist_ok=True)
    lines, ids = [], []
    for spk, voice in SPEAKERS.items():
        pcm, sr = synth(PROMPTS[spk], **voice)
        sf.write(en / "prompt-wavs" / f"{spk}.wav", pcm, sr, subtype="PCM_16")
        for tid, text in TARGETS.items():
            uid = f"{spk}-{tid}"
            ids.append(uid)
            lines.append(f"{uid}|{PROMPTS[spk]}|prompt-wavs/{spk}.wav|{text}")
    (en / "meta.lst").write_text("\n".join(lines) + "\n")
    (root / "pools.json").write_text(json.dumps({"holdout": ids}))
    return root


def plan_for(workload_root: Path, *, baseline="ref-base", candidate="ref-cand", concurrencies=(1,),
             repeats=1, scorers=None, model_paths=None, plan_hash="f" * 64, name="quality-test"):
    engines = [{"name": n, "adapter": "reference", "dialect": "vllm-omni", "port": 9000 + i, "profile": "baseline"}
               for i, n in enumerate(dict.fromkeys([baseline, candidate]))]
    raw = {"schema": "omni-campaign-plan/1", "name": name,
           "model": {"id": "test"}, "engines": engines,
           "workload": {"root": str(workload_root), "locale": "en", "pool": "holdout"},
           "sweep": {"concurrencies": list(concurrencies), "requests_per_run": 4, "measured_repeats": repeats},
           "quality": {"baseline": baseline, "candidate": candidate, "concurrencies": list(concurrencies),
                       "pool": "holdout",
                       "scorers": scorers or {"wer": "pocketsphinx", "sim": "resemblyzer", "mos": "dnsmos"},
                       "model_paths": model_paths or {}}}
    return plan_from_dict(raw, hash=plan_hash)


def frozen_plan(store, path: Path, workload_root: Path, **kw):
    """Write the plan JSON to `path`, freeze it in `store` and return the frozen Plan."""
    from data.plan_freeze import freeze
    from data.plan_loading import plan_from_store

    path.write_text(json.dumps(plan_for(workload_root, **kw).document(), indent=1))
    return plan_from_store(store, freeze(store, path).hash)


def campaign_setup(tmp: Path, **plan_kw):
    """(store, frozen plan, workload, artifacts dir) under `tmp`: the bundled-style workload, a
    real DuckDB store and a plan frozen in it (`plan_kw` as for plan_for)."""
    from data.store import Store
    from data.workload import load_workload

    wl_root = make_workload(tmp / "workload")
    store = Store(tmp / "campaign.duckdb")
    plan = frozen_plan(store, tmp / "plan.json", wl_root, **plan_kw)
    return store, plan, load_workload(wl_root, "en"), tmp / "artifacts"


def noisy(clip: np.ndarray, amount: float, seed: int) -> np.ndarray:
    """`clip` plus white noise of standard deviation `amount`, clipped to [-1, 1]."""
    noise = amount * np.random.default_rng(seed).standard_normal(len(clip)).astype(np.float32)
    return np.clip(clip + noise, -1, 1)


def add_run(store, plan, run_id: str, engine: str, artifacts: Path, workload, *, concurrency=1, repeat=0,
            fail: dict[str, str] | None = None, audio: dict[str, np.ndarray] | None = None, kind="measured",
            status="complete"):
    """A run row plus one request per pool utterance; `fail` maps utt_id -> failure class;
    `audio` overrides the synthesised output of an utterance (e.g. a noisy copy)."""
    now = datetime.now(timezone.utc)
    store.insert("runs", {"run_id": run_id, "plan_hash": plan.hash, "engine": engine, "dialect": "vllm-omni",
                          "concurrency": concurrency, "repeat_index": repeat, "kind": kind, "status": status,
                          "pool": "holdout", "started_at": now})
    # what the recorder appends with the row (console/recording.py): reuse is ordered by it
    append_event(store, "run_started", plan_hash=plan.hash, subject=run_id, payload={"engine": engine})
    fail, audio = fail or {}, audio or {}
    by_id = workload.by_id
    for i, uid in enumerate(workload.pools["holdout"]):
        row = {"run_id": run_id, "request_index": i, "utt_id": uid, "is_warmup": False, "t_send_ns": i}
        if uid in fail:
            row.update(outcome=fail[uid], error_detail=f"{fail[uid]} in test")
        else:
            if uid in audio:
                pcm, sr = audio[uid], 16000
            else:
                pcm, sr = synth(by_id[uid].target_text, **SPEAKERS[by_id[uid].speaker])
            rel = f"{run_id}/{i}-{uid}.wav"
            (artifacts / run_id).mkdir(parents=True, exist_ok=True)
            sf.write(artifacts / rel, pcm, sr, subtype="PCM_16")
            row.update(outcome="ok", audio_path=rel,
                       audio_sha256=hashlib.sha256((artifacts / rel).read_bytes()).hexdigest())
        store.insert("requests", row)
