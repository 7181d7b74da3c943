"""WER of the demo's speech under the bundled ASR scorers: does the WER check see dropped words?

Drives the real reference engine (profiles `baseline` and `lossy`, espeak-ng synthesis, real
HTTP, the driver and the store as `campaign run` uses them) over the demo's workload, then scores
every output with the general `pocketsphinx` scorer (CMU en-us LM and dictionary) and the
`pocketsphinx-domain` scorer (the same acoustic model with the n-gram LM and dictionary built from
the workload's texts, docs/quality.md "pocketsphinx-domain"), and prints per (scorer, profile) the
corpus WER (ΣE/ΣN), the Seed-TTS WER (mean per utterance) and the deletions.

A third row, `baseline-dropped`, is the baseline profile asked to speak each text with the words
`lossy` would drop removed (same seeded draw as the engine: `--drop` per word) and scored against
the full text: word drops alone, without lossy's band limit and noise.

    .venv/bin/python bench/bench_demo_wer.py [--utts holdout|all] [--keep DIR]

`--utts holdout` (default) is the demo's reserved holdout (24 ids: `campaign workload pools
data/sample_workload --shuffle 20261022 --define holdout=0:24`), `all` the sample's 128 texts.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEMO_SHUFFLE, DEMO_HOLDOUT = 20261022, 24  # console/demo.py: the demo's pools
SEED = 42


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def demo_utterances(which: str):
    """The demo's holdout utterances (the ids `campaign workload pools` reserves), or all 128."""
    from data.workload import PoolSlice, define_pools, load_workload

    wl = load_workload(None, "en")
    if which == "all":
        return wl.utterances
    ids = define_pools([u.utt_id for u in wl.utterances], [PoolSlice("holdout", 0, DEMO_HOLDOUT)], DEMO_SHUFFLE)
    return [wl.by_id[i] for i in ids["holdout"]]


def dropped_text(text: str, rate: float, seed: int) -> str:
    """`text` with each word dropped with probability `rate` (numpy's seeded draw, at least one kept)."""
    import numpy as np

    words = text.split()
    keep = np.random.default_rng(seed).random(len(words)) >= rate
    if not keep.any():
        keep[0] = True
    return " ".join(w for w, k in zip(words, keep) if k)


ARMS = ("baseline", "lossy", "baseline-dropped")


def stored_outputs(store, art: Path, utts) -> dict[str, list[tuple[str, Path, str]]]:
    """arm -> [(utt_id, wav, full reference text)] of the runs in the store (a kept folder's, or this pass's)."""
    ref = {u.utt_id: u.target_text for u in utts}
    out: dict[str, list[tuple[str, Path, str]]] = {}
    for arm in ARMS:
        rows = store.query("SELECT utt_id, outcome, audio_path FROM requests WHERE run_id = ? AND NOT is_warmup "
                           "ORDER BY request_index", [f"run-{arm}"])
        bad = [r for r in rows if r["outcome"] != "ok"]
        if bad or not rows:
            raise SystemExit(f"bench: {arm}: {len(bad)} requests failed ({bad[:1]})" if bad else f"bench: no run {arm}")
        out[arm] = [(r["utt_id"], art / r["audio_path"], ref[r["utt_id"]]) for r in rows]
    return out


def synthesise(root: Path, utts, drop: float) -> dict[str, list[tuple[str, Path, str]]]:
    """Record one measured run per arm through the real engine (or reuse a kept folder's runs):
    arm -> [(utt_id, wav, full reference text)]."""
    from console.recording import launch_engine, record_run, stop_engine
    from data.plan_model import EngineSpec
    from data.store import Store
    from engine_adapters.driver import DriveSpec, RequestSpec

    kept = (root / "bench.duckdb").is_file()
    store = Store(root / "bench.duckdb")
    art = root / "artifacts"
    if kept:
        try:
            return stored_outputs(store, art, utts)
        finally:
            store.close()
    arms = {"baseline": ("baseline", {u.utt_id: u.target_text for u in utts}),
            "lossy": ("lossy", {u.utt_id: u.target_text for u in utts}),
            "baseline-dropped": ("baseline", {u.utt_id: dropped_text(u.target_text, drop, i)
                                              for i, u in enumerate(utts)})}
    try:
        for arm, (profile, spoken) in arms.items():
            eng = launch_engine(store, EngineSpec(f"ref-{arm}", "reference", "vllm-omni", port=_port(),
                                                  health_timeout_s=120, profile=profile), log_dir=root / "logs")
            try:
                reqs = [RequestSpec(u.utt_id, spoken[u.utt_id], u.prompt_wav, u.prompt_text) for u in utts]
                spec = DriveSpec(f"run-{arm}", eng.spec.url, "vllm-omni", 16, reqs, timeout_s=300,
                                 artifacts_dir=art, sampling={"seed": SEED, "temperature": 0.0})
                record_run(store, spec, engine=f"ref-{arm}", kind="measured", plan_hash="w" * 64,
                           launch_id=eng.launch_id, telemetry=False)
            finally:
                stop_engine(store, eng, grace_s=2)
        return stored_outputs(store, art, utts)
    finally:
        store.close()


def score(name: str, outputs: dict[str, list[tuple[str, Path, str]]], texts_root: str | None) -> dict[str, dict]:
    """arm -> corpus WER, Seed-TTS WER, deletions, words, seconds for one scorer."""
    from stats.quality.base import ScoreItem
    from stats.quality.registry import make_scorer
    from stats.quality.scoring import score_files
    from stats.quality.wer import corpus_wer, seed_tts_wer

    scorer = make_scorer(name, {name: texts_root} if texts_root else None)
    res: dict[str, dict] = {}
    try:
        for arm, items in outputs.items():
            t0 = time.perf_counter()
            results = score_files(scorer, [ScoreItem(arm, i, u, p, t, None) for i, (u, p, t) in enumerate(items)])
            bad = [r for r in results if r.status != "ok"]
            if bad:
                raise SystemExit(f"bench: {name} {arm}: {bad[0].error}")
            counts = [r.wer for r in results if r.wer is not None]
            pairs = [(c.errors, c.ref_words) for c in counts]
            res[arm] = {"corpus": corpus_wer(pairs), "seed": seed_tts_wer(pairs), "n": len(counts),
                        "words": sum(c.ref_words for c in counts), "del": sum(c.deletions for c in counts),
                        "sub": sum(c.substitutions for c in counts), "ins": sum(c.insertions for c in counts),
                        "seconds": time.perf_counter() - t0}
        res["_identity"] = {"version": scorer.version, "model_hash": scorer.model_hash}
    finally:
        scorer.close()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--utts", choices=("holdout", "all"), default="holdout")
    ap.add_argument("--drop", type=float, default=0.06, help="word drop rate of the baseline-dropped arm (lossy's)")
    ap.add_argument("--keep", type=Path, help="keep the store and WAVs in this folder (default: a temporary one); "
                                              "a folder kept by an earlier call is scored again, not re-synthesised")
    ap.add_argument("--scorers", nargs="+", default=["pocketsphinx", "pocketsphinx-domain"])
    args = ap.parse_args()
    from data.workload import SAMPLE_WORKLOAD

    utts = demo_utterances(args.utts)
    with tempfile.TemporaryDirectory(prefix="bench-demo-wer-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        outputs = synthesise(root, utts, args.drop)
        print(f"synthesised {len(utts)} utterances x {len(outputs)} arms through the reference engine in "
              f"{time.perf_counter() - t0:.1f} s")
        print(f"{'scorer':20s} {'arm':17s} {'corpus WER':>10s} {'Seed-TTS WER':>12s} {'S/D/I':>12s} "
              f"{'words':>6s} {'s':>6s}")
        for name in args.scorers:
            res = score(name, outputs, str(SAMPLE_WORKLOAD) if name == "pocketsphinx-domain" else None)
            ident = res.pop("_identity")
            for arm, r in res.items():
                print(f"{name:20s} {arm:17s} {100 * r['corpus']:9.1f}% {100 * r['seed']:11.1f}% "
                      f"{r['sub']:>4d}/{r['del']:>3d}/{r['ins']:>3d} {r['words']:6d} {r['seconds']:6.1f}")
            base, lossy, dropped = res["baseline"], res["lossy"], res["baseline-dropped"]
            print(f"{'':20s} lossy - baseline {100 * (lossy['corpus'] - base['corpus']):+.1f} pp, dropped - baseline "
                  f"{100 * (dropped['corpus'] - base['corpus']):+.1f} pp; {ident['version']}, model "
                  f"{ident['model_hash'][:12]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
