"""Playback-stall simulation against hand-computed cases and its closed-form property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stats.playback import simulate_playback


def test_one_stall_hand_computed():
    # 1 s chunks at 0, 0.5, 2.5, 3.0: buffer runs dry at 2.0, next chunk at 2.5 -> one 0.5 s stall
    r = simulate_playback([0.0, 0.5, 2.5, 3.0], [1.0, 1.0, 1.0, 1.0])
    assert r.stall_count == 1
    assert r.stall_total_s == pytest.approx(0.5)
    assert r.longest_stall_s == pytest.approx(0.5)
    assert r.max_deficit_s == pytest.approx(0.5)
    assert r.audio_s == pytest.approx(4.0)
    assert not r.continuity_ok(0.1) and r.continuity_ok(0.5)


def test_two_stalls_and_preroll():
    # 0.5 s chunks at 0, 1, 3: dry at 0.5 (stall 0.5), dry at 1.5 (stall 1.5)
    r = simulate_playback([0.0, 1.0, 3.0], [0.5, 0.5, 0.5])
    assert (r.stall_count, r.stall_total_s, r.longest_stall_s) == (2, pytest.approx(2.0), pytest.approx(1.5))
    assert r.max_deficit_s == pytest.approx(2.0)
    # pre-roll 1 s: start at 1.0 with 1.0 s buffered -> dry at 2.0, next at 3.0 -> one 1 s stall
    p = simulate_playback([0.0, 1.0, 3.0], [0.5, 0.5, 0.5], preroll_s=1.0)
    assert (p.stall_count, p.stall_total_s) == (1, pytest.approx(1.0))
    assert p.max_deficit_s == pytest.approx(2.0)  # deficit does not depend on pre-roll


def test_smooth_stream_whole_waveform_and_empty():
    assert simulate_playback([0.1, 0.2, 0.3], [0.5, 0.5, 0.5]).stall_count == 0
    one = simulate_playback([5.0], [3.0])  # SGLang-Omni style: one delta with the whole waveform
    assert (one.stall_count, one.max_deficit_s, one.audio_s) == (0, 0.0, 3.0)
    empty = simulate_playback([], [])
    assert (empty.stall_count, empty.audio_s) == (0, 0.0)
    # zero-length chunks carry no audio: they neither start the player nor end a stall
    z = simulate_playback([0.0, 2.0, 3.0], [0.0, 1.0, 1.0])
    assert z.stall_count == 0


def test_bad_input_is_rejected():
    with pytest.raises(ValueError):
        simulate_playback([0.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        simulate_playback([0.0], [1.0], preroll_s=-1)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 5), st.floats(0.001, 2)), min_size=1, max_size=30),
    st.floats(0, 5),
)
def test_total_stall_is_deficit_minus_preroll(gaps_durs, preroll):
    """Closed form: total stall = max(0, max_deficit - preroll); stalls are non-negative."""
    t, arrivals, durs = 0.0, [], []
    for gap, d in gaps_durs:
        t += gap
        arrivals.append(t)
        durs.append(d)
    r = simulate_playback(arrivals, durs, preroll_s=preroll)
    assert r.stall_total_s == pytest.approx(max(0.0, r.max_deficit_s - preroll), abs=1e-6)
    assert 0 <= r.longest_stall_s <= r.stall_total_s + 1e-12
    assert r.stall_count <= len(arrivals) - 1


def test_open_stream_has_an_open_stall_and_a_buffer():
    # 1 s of audio at t=0, then 0.5 s at t=0.6: buffered until t=1.5
    arrivals, durations = [0.0, 0.6], [1.0, 0.5]
    playing = simulate_playback(arrivals, durations, now_s=1.2)
    assert playing.stall_count == 0 and playing.buffer_s == pytest.approx(0.3)
    stalled = simulate_playback(arrivals, durations, now_s=2.0)
    assert stalled.stall_count == 1 and stalled.stall_total_s == pytest.approx(0.5) and stalled.buffer_s == 0.0
    # ended streams never stall after their last chunk
    assert simulate_playback(arrivals, durations).stall_count == 0
    # pre-roll not over yet: everything received is ahead of the player
    assert simulate_playback(arrivals, durations, preroll_s=1.0, now_s=0.8).buffer_s == pytest.approx(1.5)
    assert simulate_playback([], [], now_s=3.0).buffer_s == 0.0


@given(st.lists(st.tuples(st.floats(0, 2), st.floats(0.01, 2)), min_size=1, max_size=20), st.floats(0, 5))
def test_open_stream_is_the_closed_one_plus_at_most_one_open_stall(gaps_durs, wait):
    arrivals, t = [], 0.0
    for gap, _ in gaps_durs:
        t += gap
        arrivals.append(t)
    durations = [d for _, d in gaps_durs]
    closed = simulate_playback(arrivals, durations)
    open_ = simulate_playback(arrivals, durations, now_s=arrivals[-1] + wait)
    assert open_.stall_count - closed.stall_count in (0, 1)
    assert open_.stall_total_s >= closed.stall_total_s - 1e-9
    if open_.stall_count > closed.stall_count:  # stalled now: nothing buffered
        assert open_.buffer_s == 0.0
    if open_.buffer_s > 0:  # still playing: no open stall
        assert open_.stall_count == closed.stall_count
