"""Seed-TTS normalisation and WER counts against hand-computed alignments."""

import math

import pytest

from stats.quality.text import normalize_text
from stats.quality.wer import corpus_wer, seed_tts_wer, wer_counts


@pytest.mark.parametrize("raw, expected", [
    ("Hello, World!", "hello world"),
    ("Don't stop — it's fine.", "don't stop it's fine"),           # apostrophes kept, em dash separates
    ("Don’t say “no”, isn’t it?", "don't say no isn't it"),        # curly apostrophe and quotes
    ("'Quoted,' she said; the dogs' bones.", "quoted she said the dogs bones"),  # edge apostrophes are quotes
    ("A well-known, twenty‐one–year‐old", "a well known twenty one year old"),  # - ‐ – are all dashes
    ("It costs 1,000 dollars, or 3.5 percent: 42.", "it costs 1000 dollars or 3.5 percent 42"),
    ("Wait… what...? Yes!!", "wait what yes"),
    ("  spaced\tout\u00a0text\n", "spaced out text"),
    ("ＦＵＬＬ width ﬁne", "full width fine"),                       # NFKC
    ("U.S.A. & co. (ltd) #1 @home 50%", "usa co ltd 1 home 50"),
    ("rock ’n’ roll", "rock n roll"),
    ("", ""),
])
def test_normaliser(raw, expected):
    assert normalize_text(raw) == expected


def test_normaliser_is_idempotent():
    for s in ["Don’t — stop, 3.5 well-known…", "'a' b's c"]:
        once = normalize_text(s)
        assert normalize_text(once) == once


def test_wer_counts_hand_alignment():
    # ref: the quick brown fox jumps (5) / hyp: the brown fax jumps high
    # only minimal alignment: the=the, quick->(D), brown=brown, fox->fax (S), jumps=jumps, +high (I)
    c = wer_counts("The quick brown fox jumps.", "the brown fax jumps high")
    assert (c.substitutions, c.deletions, c.insertions, c.ref_words) == (1, 1, 1, 5)
    assert c.errors == 3 and c.wer == pytest.approx(0.6)
    assert c.ref_norm == "the quick brown fox jumps" and c.hyp_norm == "the brown fax jumps high"
    # pure substitutions when lengths match
    c = wer_counts("one two three four", "one too three for")
    assert (c.substitutions, c.deletions, c.insertions, c.ref_words) == (2, 0, 0, 4)


def test_wer_counts_normalisation_removes_false_errors():
    c = wer_counts("It’s a well-known fact, isn't it?", "its a well known fact isn't it")
    # only it's vs its differs (apostrophe is kept, so that is one substitution)
    assert (c.substitutions, c.deletions, c.insertions, c.ref_words) == (1, 0, 0, 7)


def test_wer_counts_empty_sides():
    c = wer_counts("one two three", "")
    assert (c.substitutions, c.deletions, c.insertions, c.ref_words) == (0, 3, 0, 3) and c.wer == 1.0
    c = wer_counts("...", "hello there")
    assert (c.insertions, c.ref_words) == (2, 0) and math.isnan(c.wer)
    c = wer_counts("a b", "x y z w")
    assert (c.substitutions, c.deletions, c.insertions, c.ref_words) == (2, 0, 2, 2)


def test_headline_and_corpus_wer_differ_as_defined():
    per_utt = [(1, 10), (2, 2), (0, 8)]  # ratios 0.1, 1.0, 0.0
    assert seed_tts_wer(per_utt) == pytest.approx((0.1 + 1.0 + 0.0) / 3)
    assert corpus_wer(per_utt) == pytest.approx(3 / 20)
    assert seed_tts_wer([(3, 0), (1, 4)]) == pytest.approx(0.25)  # no-word refs are skipped
    assert math.isnan(corpus_wer([]))
