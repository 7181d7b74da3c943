"""Score reuse by content: each distinct (audio bytes, reference text / prompt wav) is computed once
per pass and copied to every (run, request) row with it, and later passes copy stored rows."""

from __future__ import annotations

import json

import pytest

from stats.quality.audio import load_audio
from stats.quality.scoring import content_key, score_plan
from test_quality_support import SPEAKERS, add_run, campaign_setup, noisy, synth


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reuse")
    store, plan, wl, art = campaign_setup(tmp, repeats=2)
    # baseline repeat 0: the synthesised outputs; candidate repeat 0: the same bytes except that
    # spk1-t1 AND spk1-t2 both carry one noisy clip (same audio, two different reference texts)
    add_run(store, plan, "base-r0", "ref-base", art, wl)
    clip = noisy(load_audio(art / "base-r0" / "0-spk1-t1.wav"), 0.05, seed=1)
    add_run(store, plan, "cand-r0", "ref-cand", art, wl, audio={"spk1-t1": clip, "spk1-t2": clip})
    yield store, plan, wl, art
    store.close()


def _rows(store, scorer_id):
    return store.query("SELECT * FROM quality_scores WHERE scorer_id = ? ORDER BY run_id, request_index", [scorer_id])


@pytest.mark.slow  # real scorers twice
def test_identical_audio_is_computed_once_different_audio_twice(setup):
    store, plan, _, art = setup
    sha = {(r["run_id"], r["utt_id"]): r["audio_sha256"] for r in store.query("SELECT * FROM requests")}
    assert sha[("base-r0", "spk2-t1")] == sha[("cand-r0", "spk2-t1")]  # lossless: same bytes
    assert sha[("base-r0", "spk1-t1")] != sha[("cand-r0", "spk1-t1")]
    # batch size 4 keeps pocketsphinx in-process (no worker pool to start in a test)
    mos, wer = score_plan(store, plan, scorers=["dnsmos", "pocketsphinx"], artifacts_dir=art, batch_size=4)
    # DNSMOS depends on the audio only: 4 baseline clips + the noisy one
    assert (mos.computed, mos.reused_pass, mos.reused_stored, mos.scored_ok) == (5, 3, 0, 8), mos
    # WER also on the reference text: the noisy clip under two targets is two computations
    assert (wer.computed, wer.reused_pass, wer.scored_ok) == (6, 2, 8), wer
    for scorer_id in ("dnsmos", "pocketsphinx-en"):
        by_sha: dict[tuple, set] = {}
        for r in _rows(store, scorer_id):
            by_sha.setdefault((r["audio_sha256"], r["ref_norm"]), set()).add(
                (r["value"], r["hypothesis"], r["wer_substitutions"], r["wer_deletions"], r["wer_insertions"]))
        assert all(len(v) == 1 for v in by_sha.values()), by_sha  # copies are exact
    dn = {(r["run_id"], r["utt_id"]): r["value"] for r in _rows(store, "dnsmos")}
    assert dn[("base-r0", "spk1-t1")] != dn[("cand-r0", "spk1-t1")]  # different audio, own score
    assert dn[("cand-r0", "spk1-t1")] == dn[("cand-r0", "spk1-t2")]
    ps = {(r["run_id"], r["utt_id"]): r for r in _rows(store, "pocketsphinx-en")}
    a, b = ps[("cand-r0", "spk1-t1")], ps[("cand-r0", "spk1-t2")]
    assert a["hypothesis"] == b["hypothesis"] and a["ref_norm"] != b["ref_norm"]
    payload = store.scalar("SELECT payload_json FROM audit_events WHERE kind = 'scores_recorded' AND subject = 'dnsmos'")
    assert json.loads(payload)["computed"] == 5 and json.loads(payload)["reused_in_pass"] == 3


@pytest.mark.slow  # reads the store the test above scored (the module's setup)
def test_later_pass_reuses_stored_rows_and_computes_only_new_audio(setup):
    store, plan, wl, art = setup
    before = store.query("SELECT * FROM quality_scores ORDER BY run_id, request_index, scorer_id")
    louder = 0.5 * synth(wl.by_id["spk2-t2"].target_text, **SPEAKERS["spk2"])[0]
    add_run(store, plan, "base-r1", "ref-base", art, wl, repeat=1)  # same bytes as base-r0
    add_run(store, plan, "cand-r1", "ref-cand", art, wl, repeat=1, audio={"spk2-t2": louder})
    (mos,) = score_plan(store, plan, scorers=["dnsmos"], artifacts_dir=art)
    assert (mos.existing, mos.computed, mos.reused_stored, mos.reused_pass, mos.scored_ok) == (8, 1, 7, 0, 8), mos
    # earlier rows untouched; copies carry the original computation's values and time
    assert store.query("SELECT * FROM quality_scores WHERE run_id IN ('base-r0', 'cand-r0') "
                       "ORDER BY run_id, request_index, scorer_id") == before
    new = {r["utt_id"]: r for r in _rows(store, "dnsmos") if r["run_id"] == "base-r1"}
    old = {r["utt_id"]: r for r in _rows(store, "dnsmos") if r["run_id"] == "base-r0"}
    assert all(new[u]["value"] == old[u]["value"] and new[u]["scored_at"] == old[u]["scored_at"] for u in old)


def test_content_key_separates_what_a_score_depends_on():
    assert content_key("mos", "a" * 64, "One.", None) == content_key("mos", "a" * 64, "Two.", "p")
    assert content_key("wer", "a" * 64, "Hello, world!", None) == content_key("wer", "a" * 64, "hello world", None)
    assert content_key("wer", "a" * 64, "One.", None) != content_key("wer", "a" * 64, "Two.", None)
    assert content_key("sim", "a" * 64, "x", "p1") != content_key("sim", "a" * 64, "x", "p2")
    assert content_key("sim", "a" * 64, "x", "p1") != content_key("sim", "b" * 64, "x", "p1")
