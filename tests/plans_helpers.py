"""Helpers for the plan / audit / runner tests (owned by helper "campaign")."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import soundfile as sf

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things.",
    "A rainbow is a division of white light into many beautiful colors.",
    "She sells sea shells by the sea shore.",
    "We will meet at the station at nine tomorrow.",
    "The museum opens early on weekends.",
]

SHORT_SENTENCES = ["Good morning.", "Thank you kindly.", "See you soon.", "Hello there."]


def make_workload(root: Path, n: int = 12, n_holdout: int = 4, short: bool = False) -> Path:
    """A small Seed-TTS-format workload: voiced harmonic prompt wavs, tuning + holdout pools."""
    wav_dir = root / "en" / "prompt-wavs"
    wav_dir.mkdir(parents=True, exist_ok=True)
    lines, ids = [], []
    sr = 16000
    t = np.arange(int(1.5 * sr)) / sr
    for i in range(n):
        f0 = 110 + 25 * (i % 4)
        phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.03 * np.sin(2 * np.pi * 4 * t))) / sr
        y = sum(np.sin(k * phase) / k for k in range(1, 8)) * 0.2 * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t) ** 2)
        sf.write(wav_dir / f"p{i}.wav", y.astype("float32"), sr)
        utt = f"spk{i % 3}-{i:04d}"
        ids.append(utt)
        texts = SHORT_SENTENCES if short else SENTENCES
        lines.append(f"{utt}|prompt words {i}|prompt-wavs/p{i}.wav|{texts[i % len(texts)]}")
    (root / "en" / "meta.lst").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "pools.json").write_text(json.dumps({"tuning": ids[: n - n_holdout], "holdout": ids[n - n_holdout:]}))
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_dict(workload_root: Path, *, concurrencies=(1, 2), requests=4, warmups=0, repeats=2,
              profiles=("baseline", "fast"), restart="per_repeat", interleave="alternate", ports=None) -> dict:
    ports = ports or [free_port() for _ in profiles]
    engines = [{"name": f"ref-{p}", "adapter": "reference", "revision": "bundled", "profile": p, "dialect": "vllm-omni",
                "argv": [], "port": port, "health_timeout_s": 60} for p, port in zip(profiles, ports)]
    return {
        "_comment": "test plan",
        "schema": "omni-campaign-plan/1", "name": "test-plan", "description": "tests",
        "model": {"id": "openbmb/MiniCPM-o-4_5", "revision": "503e754", "checkpoint_paths": []},
        "gpu": {"expected_name": None},
        "engines": engines,
        "workload": {"root": str(workload_root), "locale": "en", "pool": "tuning", "holdout_pool": "holdout"},
        "sweep": {"concurrencies": list(concurrencies), "requests_per_run": requests, "warmup_repeats": warmups,
                  "measured_repeats": repeats, "restart": restart, "interleave": interleave, "timeout_s": 60,
                  "kind": "measured"},
        "sampling": {"seed": 42, "temperature": 0.0, "max_tokens": None},
        "metrics": {"throughput_scale": 25, "stall_threshold_s": 0.1, "preroll_s": 0.0},
        "quality": {"baseline": engines[0]["name"], "candidate": engines[-1]["name"], "concurrencies": [1],
                    "pool": "holdout", "margins": {"wer_pp": 0.2, "sim": 0.5, "mos": 0.05}},
        "bootstrap": {"draws": 1000, "seed": 20261022, "method": "percentile", "confidence": 0.95},
        "decision_rules": [],
        "validators": [{"name": "controls", "argv": ["campaign", "controls"]}],
    }


def minimal_plan_doc(**sections) -> dict:
    """The smallest valid plan (only the required sections), with `sections` replacing its own:
    what the code sees for every field a plan leaves out."""
    return {"schema": "omni-campaign-plan/1", "name": "minimal", "model": {"id": "m/x"},
            "engines": [{"name": "e", "adapter": "reference", "dialect": "vllm-omni", "port": 1}],
            "workload": {"root": "/nonexistent"},
            "sweep": {"concurrencies": [1], "requests_per_run": 1, "measured_repeats": 1}, **sections}


def minimal_plan(**sections):
    """minimal_plan_doc(**sections) as a typed Plan (data.plan_model.plan_from_dict)."""
    from data.plan_model import plan_from_dict

    return plan_from_dict(minimal_plan_doc(**sections))


def write_json(path: Path, doc: dict, indent: int | None = 2, reverse: bool = False) -> Path:
    """Write a plan; `reverse` writes keys in reverse order (same content, different bytes)."""
    def rev(o):
        if isinstance(o, dict):
            return {k: rev(o[k]) for k in reversed(list(o))}
        if isinstance(o, list):
            return [rev(x) for x in o]
        return o
    path.write_text(json.dumps(rev(doc) if reverse else doc, indent=indent), encoding="utf-8")
    return path


def insert_run(store, run_id: str, *, plan_hash=None, engine="e", concurrency=1, kind="measured", status="complete",
               utt_ids=(), repeat=0, cell_key=None) -> None:
    """A stored run with one ok request per utt id (for reuse-audit and aggregate tests)."""
    from data.store import utcnow

    store.insert("runs", {"run_id": run_id, "plan_hash": plan_hash, "engine": engine, "dialect": "vllm-omni",
                          "concurrency": concurrency, "repeat_index": repeat, "kind": kind, "status": status,
                          "started_at": utcnow(), "cell_key": cell_key})
    for i, u in enumerate(utt_ids):
        store.insert("requests", {"run_id": run_id, "request_index": i, "utt_id": u, "is_warmup": False,
                                  "outcome": "ok", "t_send_ns": 1000 + i})


def inproc(capsys, *args, db):
    """Run the `campaign` CLI in this process (an interpreter start per call is slow on a loaded box)."""
    import subprocess

    from console.cli import main

    capsys.readouterr()
    rc = main([*args, "--db", str(db)])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, rc, out.out, out.err)
