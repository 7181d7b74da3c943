"""The `pocketsphinx-domain` scorer (docs/quality.md, "pocketsphinx-domain"): its ARPA LM is a
proper backoff model, its dictionary pronounces or lists every workload word, its identity follows
the texts, and on the reference engine's espeak speech (real HTTP, real decoder) its WER is low
while words the engine did not say raise it."""

from __future__ import annotations

import math
import socket
from collections import defaultdict
from pathlib import Path

import pocketsphinx
import pytest

from console.recording import launch_engine, record_run, stop_engine
from data.plan_model import EngineSpec
from data.workload import load_workload
from engine_adapters.driver import DriveSpec, RequestSpec
from stats.quality.base import ScoreItem
from stats.quality.domain_lm import BOS, EOS, build
from stats.quality.registry import make_scorer
from stats.quality.scoring import score_files
from stats.quality.wer import corpus_wer

CMUDICT = Path(pocketsphinx.get_model_path()) / "en-us" / "cmudict-en-us.dict"
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_workload"
BASELINE_BOUND = 0.35  # corpus WER of the domain model on baseline speech (measured 0.242 here, 0.285 on the demo holdout)
N_UTTS = 12


def _parse_arpa(text: str) -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]:
    """(log10 prob, log10 backoff) per n-gram of an ARPA file."""
    prob, bow = {}, {}
    section = 0
    for line in text.splitlines():
        if line.startswith("\\") and line.endswith("-grams:"):
            section = int(line[1])
            continue
        parts = line.split("\t")
        if section and len(parts) >= 2:
            gram = tuple(parts[1].split())
            prob[gram] = float(parts[0])
            if len(parts) == 3:
                bow[gram] = float(parts[2])
    return prob, bow


def _p(prob, bow, h: tuple[str, ...], w: str) -> float:
    """p(w | h) by the ARPA backoff rule."""
    if (*h, w) in prob:
        return 10 ** prob[(*h, w)]
    if not h:
        return 0.0
    return 10 ** bow.get(h, 0.0) * _p(prob, bow, h[1:], w)


def test_lm_is_a_normalised_backoff_model():
    texts = [u.target_text for u in load_workload(SAMPLE).utterances]
    model = build(texts, CMUDICT)
    assert build(texts, CMUDICT) == model  # deterministic: same texts, same bytes
    prob, bow = _parse_arpa(model.arpa)
    vocab = [*model.words, EOS]
    histories = [h for h in bow if h != (EOS,)]
    assert len(histories) > 500
    for h in [(BOS,), *histories[::25]]:
        total = sum(_p(prob, bow, h, w) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-4), (h, total)
    # a word sequence the texts never contain still has a probability: a deletion can be decoded
    assert _p(prob, bow, ("the", "museum"), "lunch") > 0


def test_dictionary_pronounces_or_lists_every_word():
    model = build(["The organised team met the zorblaxian visitors.", "The team met again."], CMUDICT)
    entries = defaultdict(list)
    for line in model.dictionary.splitlines():
        head, phones = line.split(" ", 1)
        entries[head.split("(")[0]].append(phones)
    assert entries["organised"] == ["AO R G AH N AY Z D"]  # cmudict's `organized` (SPELLING_RULES)
    assert model.missing == ("zorblaxian",)
    assert "zorblaxian" not in model.arpa and "zorblaxian" not in entries
    prob, _ = _parse_arpa(model.arpa)
    # the sentence is split at the missing word: no n-gram joins the words around it
    assert ("met", "the", "visitors") not in prob and ("the", "visitors") not in prob
    assert ("organised", "team") in prob


def test_identity_follows_the_texts_and_says_domain(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_CAMPAIGN_CACHE", str(tmp_path / "cache"))
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("The museum opens at ten.\nPlease water the tomatoes.\n")
    b.write_text("The museum opens at nine.\nPlease water the tomatoes.\n")
    one, again, other = (make_scorer("pocketsphinx-domain", {"pocketsphinx-domain": str(p)}) for p in (a, a, b))
    assert one.available() == (True, "ok")
    assert one.model_hash == again.model_hash != other.model_hash
    assert one.scorer_id == "pocketsphinx-domain-lm" and "domain" in one.label and "not a general ASR" in one.label
    assert "domain LM" in one.version and "8 workload words" in one.version
    monkeypatch.delenv("CAMPAIGN_DOMAIN_LM_TEXTS", raising=False)
    ok, why = make_scorer("pocketsphinx-domain").available()
    assert not ok and "quality.model_paths.pocketsphinx-domain" in why
    ok, why = make_scorer("pocketsphinx-domain", {"pocketsphinx-domain": str(tmp_path / "nope")}).available()
    assert not ok and "do not exist" in why


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _without_every_fifth_word(text: str) -> tuple[str, int]:
    words = text.split()
    kept = [w for i, w in enumerate(words) if i % 5 != 2]
    return " ".join(kept), len(words) - len(kept)


@pytest.mark.slow
def test_domain_wer_is_low_on_engine_speech_and_sees_dropped_words(store, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_CAMPAIGN_CACHE", str(tmp_path / "cache"))
    utts = load_workload(SAMPLE).pool("holdout")[:N_UTTS]
    dropped = {u.utt_id: _without_every_fifth_word(u.target_text) for u in utts}
    art = tmp_path / "artifacts"
    eng = launch_engine(store, EngineSpec("ref-baseline", "reference", "vllm-omni", port=_port(), health_timeout_s=90,
                                          profile="baseline"), log_dir=tmp_path / "logs")
    try:
        for run, spoken in (("full", {u.utt_id: u.target_text for u in utts}),
                            ("dropped", {k: v[0] for k, v in dropped.items()})):
            reqs = [RequestSpec(u.utt_id, spoken[u.utt_id], u.prompt_wav, u.prompt_text) for u in utts]
            record_run(store, DriveSpec(run, eng.spec.url, "vllm-omni", 4, reqs, timeout_s=120, artifacts_dir=art,
                                        sampling={"seed": 42, "temperature": 0.0}),
                       engine="ref-baseline", kind="measured", launch_id=eng.launch_id, telemetry=False)
    finally:
        stop_engine(store, eng, grace_s=2)
    rows = store.query("SELECT run_id, request_index, utt_id, outcome, audio_path FROM requests WHERE NOT is_warmup "
                       "ORDER BY run_id, request_index")
    assert all(r["outcome"] == "ok" for r in rows), rows
    ref = {u.utt_id: u.target_text for u in utts}  # both runs are scored against the full text
    scorer = make_scorer("pocketsphinx-domain", {"pocketsphinx-domain": str(SAMPLE)}, workers=2)
    try:
        results = score_files(scorer, [ScoreItem(r["run_id"], r["request_index"], r["utt_id"], art / r["audio_path"],
                                                 ref[r["utt_id"]], None) for r in rows])
    finally:
        scorer.close()
    assert all(r.status == "ok" for r in results), [r.error for r in results]
    by_run: dict[str, list] = defaultdict(list)
    for row, res in zip(rows, results):
        by_run[row["run_id"]].append(res.wer)
    full, drop = by_run["full"], by_run["dropped"]
    wer_full = corpus_wer((c.errors, c.ref_words) for c in full)
    wer_drop = corpus_wer((c.errors, c.ref_words) for c in drop)
    n_dropped = sum(v[1] for v in dropped.values())
    words = sum(c.ref_words for c in full)
    print(f"domain LM corpus WER: full {wer_full:.3f}, every 5th word dropped ({n_dropped}/{words}) {wer_drop:.3f}")
    assert wer_full < BASELINE_BOUND
    # the words the engine did not say show up: most of them as added errors, at least half as deletions
    assert wer_drop - wer_full >= 0.75 * n_dropped / words  # measured: +0.242 for 26/128 words dropped
    assert sum(c.deletions for c in drop) - sum(c.deletions for c in full) >= 0.5 * n_dropped
    assert not math.isnan(wer_full)


def test_cli_lists_it_unavailable_until_told_its_texts(tmp_path, monkeypatch, capsys):
    from console.cli import main

    monkeypatch.setenv("OMNI_CAMPAIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("CAMPAIGN_DOMAIN_LM_TEXTS", raising=False)
    assert main(["scorers"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "pocketsphinx-domain-lm" in ln)
    assert "unavailable: no LM texts configured" in line and "$CAMPAIGN_DOMAIN_LM_TEXTS" in line
    monkeypatch.setenv("CAMPAIGN_DOMAIN_LM_TEXTS", str(SAMPLE))
    assert main(["scorers"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "pocketsphinx-domain-lm" in ln)
    expected = make_scorer("pocketsphinx-domain", {"pocketsphinx-domain": str(SAMPLE)}).model_hash[:16]
    assert "available" in line and "unavailable" not in line and expected in line
