"""Reading the next batch's WAVs while the model runs changes no number and no error row
(stats.quality.audio.Prefetcher, stats.quality.scoring.scored_in_batches)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from stats.quality import audio
from stats.quality.base import ScoreItem
from stats.quality.registry import make_scorer
from stats.quality.scoring import score_files
from stats.quality.tiny_checkpoints import build_tiny_utmos22


def _items(tmp_path: Path) -> list[ScoreItem]:
    rng = np.random.default_rng(5)
    items = []
    for i in range(7):
        p = tmp_path / f"out{i}.wav"
        if i == 3:
            p.write_bytes(b"not a wav at all")
        else:
            sf.write(p, (0.1 * rng.standard_normal(int(24000 * (0.6 + 0.1 * i)))).astype(np.float32), 24000)
        items.append(ScoreItem("run", i, f"u{i}", p, "text", None))
    return items


def test_prefetched_batches_score_exactly_as_one_at_a_time(tmp_path, monkeypatch):
    items = _items(tmp_path)
    folder = build_tiny_utmos22(tmp_path / "utmos", seed=2)
    reads: list[str] = []
    real_read = audio.read_native  # every path reads a file through it (utmos22 at the file's rate)
    monkeypatch.setattr(audio, "read_native", lambda p, *a: (reads.append(str(p)), real_read(p, *a))[1])
    batched = score_files(make_scorer("utmos22", {"utmos22": folder}, device="cpu", batch_size=2), items)
    alone = make_scorer("utmos22", {"utmos22": folder}, device="cpu", batch_size=1)
    alone.ensure_loaded()
    single = [alone.score_batch([it])[0] for it in items]
    assert [r.status for r in batched] == [r.status for r in single]
    assert "unreadable audio" in (batched[3].error or "") and batched[3].error == single[3].error
    for b, s in zip(batched, single):
        if b.status == "ok":
            assert abs(b.value - s.value) < 1e-5
    # each file read once by the batched pass (the prefetcher's read was taken, not repeated)
    assert sorted(reads[: len(items)]) == sorted(str(it.audio_path) for it in items)
    assert audio._PREFETCH.get() is None


def test_untaken_reads_are_dropped(tmp_path):
    items = _items(tmp_path)
    with audio.prefetching() as ahead:
        ahead.submit([it.audio_path for it in items], resampler="sinc")
        ahead.forget([it.audio_path for it in items], resampler="sinc")
        assert ahead.take(items[0].audio_path, audio.SCORER_RATE, "sinc") is None


def test_next_batch_is_submitted_before_the_previous_one_is_collected(tmp_path):
    """scored_in_batches queues batch k+1 on the scorer before it collects batch k (Scorer.
    submit_batch), so the device never waits for the CPU between batches; results still come in
    order and equal scoring each batch alone."""
    from stats.quality.scoring import scored_in_batches
    from stats.quality.utmos import Utmos22Scorer

    events: list[str] = []

    class Recording(Utmos22Scorer):
        def submit_batch(self, items):
            k = items[0].request_index // 2
            events.append(f"submit {k}")
            finish = super().submit_batch(items)

            def collect():
                events.append(f"collect {k}")
                return finish()
            return collect

    items = [it for it in _items(tmp_path) if it.request_index != 3][:6]
    items = [ScoreItem("run", i, it.utt_id, it.audio_path, "text", None) for i, it in enumerate(items)]
    folder = build_tiny_utmos22(tmp_path / "utmos", seed=2)
    s = Recording(folder, device="cpu", batch_size=2)
    got = list(scored_in_batches(s, items))
    assert events == ["submit 0", "submit 1", "collect 0", "submit 2", "collect 1", "collect 2"]
    assert [k for k, _ in got] == [0, 2, 4]
    alone = Utmos22Scorer(folder, device="cpu", batch_size=2)
    for k, results in got:
        want = alone.score_batch(items[k:k + 2])
        assert [r.value for r in results] == pytest.approx([r.value for r in want], abs=1e-6)


def test_switch_interval_is_short_while_batches_run_and_restored_after(tmp_path):
    """Readers must not hold the GIL for 5 ms while the model's thread waits (scoring.py
    _short_gil_turns): 0.5 ms while a prefetching scorer's batches run, the caller's after."""
    import sys

    from stats.quality.scoring import READER_SWITCH_S, scored_in_batches
    from stats.quality.utmos import Utmos22Scorer

    seen: list[float] = []

    class Watching(Utmos22Scorer):
        def submit_batch(self, items):
            seen.append(sys.getswitchinterval())
            return super().submit_batch(items)

    items = [it for it in _items(tmp_path) if it.request_index != 3][:4]
    before = sys.getswitchinterval()
    s = Watching(build_tiny_utmos22(tmp_path / "utmos", seed=2), device="cpu", batch_size=2)
    assert len(list(scored_in_batches(s, items))) == 2
    assert seen == [READER_SWITCH_S, READER_SWITCH_S] and READER_SWITCH_S < before
    assert sys.getswitchinterval() == before
