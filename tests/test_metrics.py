"""Run metrics against a hand-computed run stored in a real DuckDB file."""

from __future__ import annotations

import math

import pytest

from data.errors import CampaignError
from data.records import ChunkRecord, RequestRecord
from data.store import utcnow
from data.writer import BatchWriter
from stats.metrics.registry import check_registry
from stats.metrics import METRICS, METRICS_BY_NAME, METRICS_VERSION, RunMetrics, percentile, run_metrics, spread

S = 1_000_000_000  # ns per second
SR = 24_000


def _req(i, *, warm=False, outcome="ok", send, first=None, last=None, end, samples, chunks=0):
    return RequestRecord(run_id="r1", request_index=i, utt_id=f"spk-{i}", is_warmup=warm, outcome=outcome,
                         t_send_ns=send, t_first_byte_ns=first, t_first_audio_ns=first, t_last_audio_ns=last,
                         t_end_ns=end, audio_samples=samples, sample_rate=SR, audio_chunks=chunks)


def _chunk(i, k, t, samples):
    return ChunkRecord(run_id="r1", request_index=i, chunk_index=k, t_arrival_ns=t, kind="audio",
                       samples=samples, payload_bytes=2 * samples + 44)


@pytest.fixture
def run(store):
    store.insert("runs", {"run_id": "r1", "engine": "ref", "dialect": "vllm-omni", "concurrency": 2,
                          "repeat_index": 0, "kind": "exploratory", "status": "complete", "started_at": utcnow()})
    recs = [
        # warmup: excluded from everything
        _req(0, warm=True, send=S // 10, first=S // 2, last=S // 2, end=9 * S // 10, samples=SR, chunks=1),
        _chunk(0, 0, S // 2, SR),
        # ok: 2 x 1 s, ttfa 0.2, last audio 1.5 -> rtf 0.5/2 = 0.25, no stall
        _req(1, send=S, first=12 * S // 10, last=15 * S // 10, end=16 * S // 10, samples=2 * SR, chunks=2),
        _chunk(1, 0, 12 * S // 10, SR), _chunk(1, 1, 15 * S // 10, SR),
        # ok: 2 x 0.5 s, ttfa 0.4, buffer dry at 2.0, next at 2.5 -> 0.5 s stall; rtf 1.4/1.0
        _req(2, send=11 * S // 10, first=15 * S // 10, last=25 * S // 10, end=26 * S // 10, samples=SR, chunks=2),
        _chunk(2, 0, 15 * S // 10, SR // 2), _chunk(2, 1, 25 * S // 10, SR // 2),
        # timeout after 0.5 s of audio; ends the run wall at 3.0
        _req(3, outcome="timeout", send=12 * S // 10, first=14 * S // 10, last=14 * S // 10, end=3 * S,
             samples=SR // 2, chunks=1),
        _chunk(3, 0, 14 * S // 10, SR // 2),
    ]
    with BatchWriter(store) as w:
        w.add(recs)
    return store


def test_run_metrics_hand_computed(run):
    m = run_metrics(run, "r1")
    assert isinstance(m, RunMetrics) and m.metrics_version == METRICS_VERSION
    assert (m.requests, m.warmup_requests, m.completed, m.failed) == (3, 1, 2, 1)
    assert m.failures_by_class == {"timeout": 1}
    assert m.wall_s == pytest.approx(2.0)  # 1.0 -> 3.0
    assert m.audio_s_ok == pytest.approx(3.0)
    assert m.audio_s_failed == pytest.approx(0.5)
    assert m.throughput == pytest.approx(25 * 3.0 / 2.0)
    assert m.ttfa_p50_s == pytest.approx(0.3)
    assert m.ttfa_p95_s == pytest.approx(0.2 + 0.95 * 0.2)  # numpy linear
    assert m.rtf_mean == pytest.approx((0.25 + 1.4) / 2)
    assert (m.chunks_mean, m.chunks_min, m.chunks_max) == (2.0, 2, 2)
    assert (m.stall_count, m.stall_total_s, m.stall_longest_s) == (1, pytest.approx(0.5), pytest.approx(0.5))
    assert m.stall_max_deficit_s == pytest.approx(0.5)
    assert m.continuity_ok_rate == pytest.approx(0.5)


def test_run_metrics_parameters(run):
    assert run_metrics(run, "r1", throughput_scale=1).throughput == pytest.approx(1.5)
    assert run_metrics(run, "r1", stall_threshold_s=0.6).continuity_ok_rate == 1.0
    pre = run_metrics(run, "r1", preroll_s=0.5)
    assert pre.stall_total_s == pytest.approx(0.0) and pre.stall_max_deficit_s == pytest.approx(0.5)
    d = pre.to_dict()
    assert d["preroll_s"] == 0.5 and d["failures_by_class"] == {"timeout": 1}


def test_unknown_run_is_a_user_error(store):
    with pytest.raises(CampaignError, match="no run with id 'nope'"):
        run_metrics(store, "nope")


def test_run_with_only_failures(store):
    store.insert("runs", {"run_id": "r1", "engine": "ref", "dialect": "pcm", "concurrency": 1,
                          "repeat_index": 0, "kind": "measured", "status": "complete"})
    with BatchWriter(store) as w:
        w.add([_req(0, outcome="http_status", send=S, end=2 * S, samples=0)])
    m = run_metrics(store, "r1")
    assert (m.completed, m.failed, m.failures_by_class) == (0, 1, {"http_status": 1})
    assert m.throughput == 0.0 and m.ttfa_p50_s is None and m.continuity_ok_rate is None


def test_spread_hand_computed():
    s = spread([1, 2, 3, 4])
    assert (s.min, s.median, s.max, s.n) == (1.0, 2.5, 4.0, 4)
    assert s.cv == pytest.approx(math.sqrt(5 / 3) / 2.5)
    assert spread([5.0]).cv is None and spread([5.0]).median == 5.0
    assert spread([]).n == 0 and spread([]).median is None
    assert spread([1, None, float("nan"), 3]).n == 2
    assert spread([0, 0]).cv is None


def test_percentile_is_numpy_linear():
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)
    assert percentile([], 50) is None


def test_registry_is_data(run):
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    fields = set(run_metrics(run, "r1").to_dict())
    assert set(names) <= fields
    assert check_registry(METRICS) == []
    assert METRICS_BY_NAME["ttfa_p50_s"].format(0.3) == "300.0"
    assert METRICS_BY_NAME["continuity_ok_rate"].format(None) == "-"
    assert METRICS_BY_NAME["stall_count"].format(3) == "3"
