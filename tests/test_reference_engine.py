"""Integration tests: the reference engine as a subprocess, over real HTTP, in every dialect.

All engines the module needs are launched at once (they warm up in parallel) and
stopped at the end. Faults are forced per request with the ``X-Reference-Fault``
header, which works on any profile; the ``flaky`` profile's own rate-based draws
are checked against the documented hash so the test is exact, not statistical.
"""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from engine_adapters.reference.espeak import EspeakSynth
from engine_adapters.reference.faults import draw_fault
from engine_adapters.reference.profiles import get_profile
from engine_adapters.reference.synthesis import decode_prompt, drop_words, stable_seed
from engine_adapters.reference.voice import CACHE_ENV, calibrate_cached
from reference_server import (
    SAMPLE_PROMPTS, EngineProcess, audio_payloads, chat_body, collect_audio, launch_engine, median_f0,
    stop_engine, stream, wait_ready,
)

pytestmark = pytest.mark.timeout(120)

DIALECTS = ("vllm-omni", "sglang-omni", "pcm")
TEXT = "The ferry crossing takes about forty minutes in calm weather."
SHORT = "Please close the window."

USER_PROFILES = """
[profiles.sched]
inherits = "baseline"
description = "tiny steps for the scheduler-model test"
max_num_seqs = 4
prefill_s = 0.0
step_base_s = 0.06
step_per_seq_s = 0.015
chunk_frames = 25
"""


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def engine_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reference")


@pytest.fixture(scope="module")
def engines(engine_tmp: Path, monkeypatch_module: pytest.MonkeyPatch):
    """Every engine this module uses, keyed by a short name.

    The voice calibration is computed once here, into a private cache directory the
    engines share, so nine engines do not each repeat it while starting in parallel.
    """
    tmp = engine_tmp
    monkeypatch_module.setenv(CACHE_ENV, str(tmp / "cache"))
    calibrate_cached(EspeakSynth.shared())
    user_profiles = tmp / "profiles.toml"
    user_profiles.write_text(USER_PROFILES)
    specs = {
        "vllm-omni": ("vllm-omni", "baseline", ()),
        "sglang-omni": ("sglang-omni", "baseline", ()),
        "pcm": ("pcm", "baseline", ("--emit-log", str(tmp / "emit.jsonl"))),
        "whole": ("sglang-omni", "whole", ()),
        "fast": ("vllm-omni", "fast", ()),
        "lossy": ("vllm-omni", "lossy", ()),
        "flaky": ("vllm-omni", "flaky", ()),
        "sched": ("pcm", "sched", ("--profiles-file", str(user_profiles))),
        "doomed": ("sglang-omni", "baseline", ()),
    }
    procs = {name: (launch_engine(d, p, *extra), d, p) for name, (d, p, extra) in specs.items()}
    running: dict[str, EngineProcess] = {}
    try:
        for name, (proc, dialect, profile) in procs.items():
            running[name] = wait_ready(proc, dialect, profile)
        yield running
    finally:
        for name, (proc, dialect, profile) in procs.items():
            stop_engine(running.get(name) or EngineProcess(proc, "", dialect, profile))
    # Faults, aborted connections and impatient clients are all expected; none may crash a handler.
    for name, engine in running.items():
        assert not any("Traceback" in line for line in engine.output), (name, engine.output)


def _ok(dialect: str, engine: EngineProcess, text: str = TEXT, speaker: str | None = "spk01",
        headers: dict[str, str] | None = None, **fields):
    result = stream(engine.url, chat_body(dialect, text, speaker, **fields), headers=headers)
    assert result.status == 200, result.body[:300]
    assert result.transport_error is None, result.transport_error
    return result


# ---- health, models ------------------------------------------------------------------------------

@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_health_and_models(engines, dialect):
    import httpx

    engine = engines[dialect]
    health = httpx.get(f"{engine.url}/health")
    assert health.status_code == 200 and health.json() == {"status": "healthy"}
    models = httpx.get(f"{engine.url}/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "reference-tts"
    assert models["data"][0]["reference_engine"]["dialect"] == dialect


# ---- framing -------------------------------------------------------------------------------------

def _check_emit_stamps(result) -> None:
    events = result.json_events()
    assert events and all(isinstance(e.get("emit_ns"), int) for e in events)
    for event, arrival in zip(events, result.event_arrivals_ns):
        # same host, same monotonic clock: written before it was read, and not long before
        assert 0 < arrival - event["emit_ns"] < 1_000_000_000


def test_vllm_omni_framing(engines):
    result = _ok("vllm-omni", engines["vllm-omni"])
    assert result.headers["content-type"].startswith("text/event-stream")
    assert result.done and result.events.count("[DONE]") == 1
    events = result.json_events()
    text, *audio, usage = events
    assert text["modality"] == "text" and text["object"] == "chat.completion.chunk"
    assert text["choices"][0]["delta"] == {"role": "assistant", "content": TEXT}
    assert len(audio) >= 3
    for event in audio:
        assert event["modality"] == "audio"
        assert event["choices"][0]["finish_reason"] == "stop"  # MiniCPM-o's quirk: only [DONE] ends
        assert base64.b64decode(event["choices"][0]["delta"]["content"])[:4] == b"RIFF"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    assert len({e["id"] for e in events}) == 1
    _check_emit_stamps(result)


def test_vllm_omni_pcm_audio_format(engines):
    result = _ok("vllm-omni", engines["vllm-omni"], audio={"format": "pcm"})
    pcm = collect_audio("vllm-omni", result, audio_format="pcm")
    wav = collect_audio("vllm-omni", _ok("vllm-omni", engines["vllm-omni"]))
    assert np.array_equal(pcm, wav)


def test_sglang_omni_framing(engines):
    result = _ok("sglang-omni", engines["sglang-omni"])
    assert result.headers["content-type"].startswith("text/event-stream")
    assert result.done and result.events.count("[DONE]") == 1
    first, *audio, final = result.json_events()
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert all("modality" not in e for e in result.json_events())
    assert len(audio) >= 3
    for event in audio:
        delta = event["choices"][0]["delta"]
        assert set(delta) == {"audio"} and set(delta["audio"]) == {"id", "data"}
        assert event["choices"][0]["finish_reason"] is None
    assert final["choices"][0]["finish_reason"] == "stop" and final["usage"]["total_tokens"] > 0
    _check_emit_stamps(result)


def test_pcm_framing_and_emit_log(engines, engine_tmp):
    engine = engines["pcm"]
    result = _ok("pcm", engine)
    assert result.headers["content-type"] == "audio/pcm"
    assert result.headers["x-audio-sample-rate"] == "24000"
    samples = collect_audio("pcm", result)
    log_path = engine_tmp / "emit.jsonl"
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    mine = [r for r in lines if r["request_id"] == result.headers["x-request-id"]]
    assert [r["chunk"] for r in mine] == list(range(len(mine)))
    assert sum(r["samples"] for r in mine) == len(samples)
    assert all(r["samples"] == 24000 for r in mine[:-1])  # 25 codec frames = 1 s per chunk
    assert mine[0]["emit_ns"] < result.arrivals_ns[-1]


# ---- audio ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dialect", DIALECTS)
def test_audio_is_plausible_speech(engines, dialect):
    samples = collect_audio(dialect, _ok(dialect, engines[dialect]))
    seconds = len(samples) / 24000
    words = len(TEXT.split())
    assert words * 0.2 < seconds < words * 0.7, seconds
    rms = float(np.sqrt(np.mean((samples / 32768.0) ** 2)))
    assert rms > 0.02
    assert 60 < median_f0(samples) < 400


@pytest.mark.parametrize("dialect", DIALECTS)
def test_prompt_speakers_give_different_voices(engines, dialect):
    low = collect_audio(dialect, _ok(dialect, engines[dialect], speaker="spk09"))  # low male voice
    high = collect_audio(dialect, _ok(dialect, engines[dialect], speaker="spk10"))  # high female voice
    semitones = 12 * np.log2(median_f0(high) / median_f0(low))
    assert semitones > 8, semitones
    # and each output sits near its own prompt's pitch
    for speaker, out in (("spk09", low), ("spk10", high)):
        prompt = decode_prompt((SAMPLE_PROMPTS / f"{speaker}.wav").read_bytes())
        assert abs(12 * np.log2(median_f0(out) / median_f0(prompt.samples, prompt.sample_rate))) < 2


@pytest.mark.parametrize("dialect", DIALECTS)
def test_determinism_across_runs_and_concurrency(engines, dialect):
    engine = engines[dialect]
    alone = collect_audio(dialect, _ok(dialect, engine, seed=7))
    texts = [TEXT, SHORT, "Nobody expected the small bakery to win a prize.", TEXT]
    with ThreadPoolExecutor(len(texts)) as pool:
        results = list(pool.map(lambda t: _ok(dialect, engine, text=t, seed=7), texts))
    assert np.array_equal(collect_audio(dialect, results[0]), alone)
    assert np.array_equal(collect_audio(dialect, results[3]), alone)


def test_fast_profile_same_bytes_cheaper_steps(engines):
    runs = {name: [_ok("vllm-omni", engines[name], seed=3) for _ in range(3)] for name in ("vllm-omni", "fast")}
    base, fast = runs["vllm-omni"], runs["fast"]
    assert all(audio_payloads("vllm-omni", r) == audio_payloads("vllm-omni", base[0]) for r in base + fast)

    def best_latency(results) -> int:
        return min(r.arrivals_ns[-1] - r.t_send_ns for r in results)

    assert best_latency(fast) < best_latency(base)


def test_lossy_profile_is_deterministic_and_worse(engines):
    rates = get_profile("lossy").lossy_word_drop
    digest = decode_prompt((SAMPLE_PROMPTS / "spk01.wav").read_bytes()).digest
    keeps_words = next(s for s in range(100)
                       if drop_words(TEXT, rates, np.random.default_rng(stable_seed(s, TEXT, digest))) == TEXT)
    clean = collect_audio("vllm-omni", _ok("vllm-omni", engines["vllm-omni"], seed=keeps_words)).astype(float)
    lossy_a = collect_audio("vllm-omni", _ok("vllm-omni", engines["lossy"], seed=keeps_words))
    lossy_b = collect_audio("vllm-omni", _ok("vllm-omni", engines["lossy"], seed=keeps_words))
    assert np.array_equal(lossy_a, lossy_b)
    assert len(lossy_a) == len(clean)
    snr_db = 10 * np.log10(np.sum(clean**2) / np.sum((clean - lossy_a) ** 2))
    assert snr_db < 12, snr_db  # band-limited and noisy: far from the clean waveform
    drops_words = next(s for s in range(200)
                       if drop_words(TEXT, rates, np.random.default_rng(stable_seed(s, TEXT, digest))) != TEXT)
    shorter = collect_audio("vllm-omni", _ok("vllm-omni", engines["lossy"], seed=drops_words))
    assert len(shorter) < len(clean)


def test_whole_profile_sends_one_audio_delta(engines):
    result = _ok("sglang-omni", engines["whole"])
    payloads = audio_payloads("sglang-omni", result)
    assert len(payloads) == 1
    whole = collect_audio("sglang-omni", result)
    streamed = collect_audio("sglang-omni", _ok("sglang-omni", engines["sglang-omni"]))
    assert np.array_equal(whole, streamed)
    assert result.done


# ---- malformed requests --------------------------------------------------------------------------

def _bad_requests(dialect: str) -> list[tuple[str, bytes]]:
    garbage_audio = "data:audio/wav;base64," + base64.b64encode(b"not a wav file at all").decode()
    def body(**kw) -> bytes:
        return json.dumps(chat_body(dialect, TEXT, None, **kw)).encode()
    cases = [
        ("bad json", b'{"messages": [}'),
        ("no text", json.dumps(chat_body(dialect, "   ", None)).encode()),
        ("unsupported format", body(audio={"format": "mp3"})),
        ("stream not a boolean", body(stream="yes")),
    ]
    if dialect == "pcm":
        cases.append(("not streaming", body(stream=False)))
    if dialect == "sglang-omni":
        cases += [("bad base64", body(audio={"format": "wav", "ref_audio": "data:audio/wav;base64,@@@"})),
                  ("not audio", body(audio={"format": "wav", "ref_audio": garbage_audio}))]
    else:
        def with_prompt(url: str) -> bytes:
            b = chat_body(dialect, TEXT, None)
            b["messages"][0]["content"].insert(0, {"type": "audio_url", "audio_url": {"url": url}})
            return json.dumps(b).encode()
        cases += [("bad base64", with_prompt("data:audio/wav;base64,@@@")), ("not audio", with_prompt(garbage_audio))]
    return cases


@pytest.mark.parametrize("dialect", DIALECTS)
def test_malformed_requests_get_4xx_in_dialect_shape(engines, dialect):
    engine = engines[dialect]
    for label, raw in _bad_requests(dialect):
        result = stream(engine.url, raw)
        assert 400 <= result.status < 500, (label, result.status)
        error = json.loads(result.body)
        if dialect == "vllm-omni":
            assert set(error) == {"error"} and error["error"]["code"] == result.status, label
            message = error["error"]["message"]
        else:
            assert set(error) == {"detail"}, label
            message = error["detail"]
        assert isinstance(message, str) and len(message) > 10, label
    assert collect_audio(dialect, _ok(dialect, engine, text=SHORT)).size > 0  # still serving


# ---- faults --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.slow  # 2 s in a loaded `make check`
def test_forced_faults_are_observable(engines, dialect):
    engine = engines[dialect]
    body = chat_body(dialect, TEXT)

    def run(fault: str, timeout_s: float = 30.0):
        return stream(engine.url, body, headers={"X-Reference-Fault": fault}, timeout_s=timeout_s)

    with ThreadPoolExecutor(4) as pool:
        in_stream, drop, http_500, stall = pool.map(
            lambda args: run(*args), [("in_stream_error",), ("drop",), ("http_500",), ("stall", 1.5)])

    assert http_500.status == 500
    assert ("error" if dialect == "vllm-omni" else "detail") in json.loads(http_500.body)

    assert drop.status == 200 and drop.transport_error is not None and not drop.done

    assert stall.status == 200 and stall.timed_out and not stall.done
    if dialect != "pcm":
        assert len(audio_payloads(dialect, stall)) == 1  # stalled after fault_after_chunks = 1
    else:
        assert len(stall.body) == 2 * 24000

    if dialect == "vllm-omni":
        assert in_stream.transport_error is None and in_stream.done
        assert "error" in in_stream.json_events()[-1] and in_stream.json_events()[-1]["error"]["code"] == 500
    elif dialect == "sglang-omni":
        assert in_stream.transport_error is None and not in_stream.done  # clean end, no [DONE]
        assert all("error" not in e for e in in_stream.json_events())
    else:
        assert in_stream.transport_error is not None

    assert _ok(dialect, engine, text=SHORT).status == 200  # the engine survived all of it


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_flaky_profile_draws_faults_deterministically(engines):
    engine = engines["flaky"]
    profile = get_profile("flaky")
    digest = decode_prompt((SAMPLE_PROMPTS / "spk01.wav").read_bytes()).digest
    predicted = {s: draw_fault(profile.fault_rates, stable_seed("fault", s, SHORT, digest)) for s in range(400)}
    rate = sum(v is not None for v in predicted.values()) / len(predicted)
    assert abs(rate - sum(profile.fault_rates.values())) < 0.06
    chosen: dict[str, list[int]] = {}
    for seed, fault in predicted.items():
        if len(chosen.setdefault(str(fault), [])) < 2:
            chosen[str(fault)].append(seed)
    assert set(chosen) == {"None", "in_stream_error", "drop", "http_500", "stall"}
    seeds = [s for group in chosen.values() for s in group]
    with ThreadPoolExecutor(len(seeds)) as pool:
        results = dict(zip(seeds, pool.map(
            lambda s: stream(engine.url, chat_body("vllm-omni", SHORT, seed=s), timeout_s=2.0), seeds)))
    for seed, result in results.items():
        fault = predicted[seed]
        if fault is None:
            assert result.status == 200 and result.done and "error" not in result.json_events()[-1]
        elif fault == "http_500":
            assert result.status == 500
        elif fault == "drop":
            assert result.transport_error is not None and not result.timed_out
        elif fault == "stall":
            assert result.timed_out
        else:
            assert result.done and result.json_events()[-1]["error"]["message"]


def test_fatal_fault_kills_the_engine(engines):
    import httpx

    engine = engines["doomed"]
    result = stream(engine.url, chat_body("sglang-omni", TEXT), headers={"X-Reference-Fault": "fatal"})
    assert result.status == 200 and not result.done
    health = httpx.get(f"{engine.url}/health")
    assert health.status_code == 503 and health.json()["status"] == "dead"
    after = stream(engine.url, chat_body("sglang-omni", SHORT))
    assert after.status == 503 and "dead" in json.loads(after.body)["detail"]


# ---- scheduler model -----------------------------------------------------------------------------

def _burst(url: str, concurrency: int, body: dict) -> tuple[float, float]:
    """(aggregate audio seconds per wall second, mean request RTF) for ``concurrency`` simultaneous requests."""
    start = time.perf_counter_ns()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda _: stream(url, body, sse=False), range(concurrency)))
    assert all(r.status == 200 and r.transport_error is None for r in results)
    audio_s = [len(r.body) / 2 / 24000 for r in results]
    wall_s = (max(r.arrivals_ns[-1] for r in results) - start) / 1e9
    rtf = [(r.arrivals_ns[-1] - r.t_send_ns) / 1e9 / a for r, a in zip(results, audio_s)]
    return sum(audio_s) / wall_s, float(np.mean(rtf))


@pytest.mark.slow  # 7 s in a loaded `make check`
def test_scheduler_throughput_saturates_at_max_num_seqs(engines):
    import httpx

    url = engines["sched"].url
    # a long sentence (about six 1 s chunks) in the default voice: small bodies, many steps per request
    body = chat_body("pcm", "The volunteers planted two hundred trees along the river bank before the first "
                            "heavy rain of the autumn arrived.", None)
    stream(url, body, sse=False)  # render once so every level measures scheduling only
    levels = {c: max((_burst(url, c, body) for _ in range(2)), key=lambda v: v[0]) for c in (1, 2, 4, 8)}
    thr = {c: round(v[0], 2) for c, v in levels.items()}
    rtf = {c: round(v[1], 4) for c, v in levels.items()}
    # model: each step gives every active sequence 1 s of audio and lasts (60 + 15 * active) ms;
    # at most 4 sequences are active, so 8 requests run in two waves
    assert thr[2] > 1.3 * thr[1] and thr[4] > 1.3 * thr[2], thr
    assert 0.8 * thr[4] < thr[8] < 1.2 * thr[4], thr  # saturated: no gain past max_num_seqs
    assert rtf[1] < rtf[2] < rtf[4] < rtf[8] and rtf[8] > 1.3 * rtf[4], rtf
    assert httpx.get(f"{url}/stats").json()["max_active_seen"] == 4


def test_stats_reports_the_engines_schedule_slip(engines):
    """/stats carries the engine's own schedule slip over a perf_counter_ns window, so a timing
    figure can tell engine delay from client delay (docs/performance.md)."""
    import httpx

    url = engines["vllm-omni"].url
    since = time.perf_counter_ns()
    _ok("vllm-omni", engines["vllm-omni"], SHORT)
    sched = httpx.get(f"{url}/stats", params={"since_ns": since}).json()["schedule"]
    assert sched["chunks"] >= 1 and sched["steps"] >= sched["chunks"]
    assert 0 <= sched["slip_p50_ms"] <= sched["slip_max_ms"] < 500, sched
    assert httpx.get(f"{url}/stats", params={"since_ns": time.perf_counter_ns()}).json()["schedule"]["chunks"] == 0
    bad = httpx.get(f"{url}/stats", params={"since_ns": "soon"})
    assert bad.status_code == 400 and "since_ns" in bad.json()["error"]


def test_stats_gives_the_engines_view_of_chosen_chunks(engines):
    """`/stats?emits=` looks chunks up by the emit stamps a client saw (a bench's latest events):
    each one's slip, write gap and whether bytes stayed in the engine's write buffer."""
    import httpx

    url = engines["vllm-omni"].url
    since = time.perf_counter_ns()
    audio = [e for e in _ok("vllm-omni", engines["vllm-omni"], SHORT).json_events() if e.get("modality") == "audio"]
    emits = [e["emit_ns"] for e in audio]
    sched = httpx.get(f"{url}/stats", params={"since_ns": since, "emits": ",".join(map(str, emits + [1]))}).json()
    at = sched["schedule"]["at"]
    assert sorted(at) == sorted(map(str, emits))  # every chunk found by its stamp; stamp 1 is none
    for v in at.values():
        assert v["queued"] in (True, False) and 0 <= v["write_gap_ms"] < 1000 and v["slip_ms"] > -1000, v
    assert sched["schedule"]["queued_chunks"] == sum(v["queued"] for v in at.values())
    bad = httpx.get(f"{url}/stats", params={"emits": "1,soon"})
    assert bad.status_code == 400 and "emits" in bad.json()["error"]


def test_listen_queue_holds_a_closed_loop_opening_burst(engines):
    """A closed-loop run opens C connections at once. The engine's listen queue must hold them while
    its loop is busy, as uvicorn's 2048 does for vLLM-Omni: with aiohttp's default of 128 the kernel
    dropped the rest, which then waited 1-3 s for SYN retransmits or were reset (docs/engines.md).
    With the engine stopped, the kernel completes only as many handshakes as its queue holds."""
    import os
    import resource
    import select
    import signal
    import socket

    n = 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = n + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"{n} sockets need an open-file limit of {need}; the hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())  # the kernel's cap on any backlog
    engine = engines["vllm-omni"]
    host, port = engine.url.removeprefix("http://").split(":")
    socks: list[socket.socket] = []
    os.kill(engine.proc.pid, signal.SIGSTOP)
    try:
        for _ in range(n):
            s = socket.socket()
            s.setblocking(False)
            socks.append(s)
            s.connect_ex((host, int(port)))
        time.sleep(0.5)  # loopback handshakes take microseconds; the first SYN retransmit is at 1 s
        poll = select.poll()
        for s in socks:
            poll.register(s, select.POLLOUT)
        connected = sum(1 for _, ev in poll.poll(0) if ev & select.POLLOUT and not ev & (select.POLLERR | select.POLLHUP))
    finally:
        os.kill(engine.proc.pid, signal.SIGCONT)
        for s in socks:
            s.close()
    assert connected >= min(n, somaxconn), (connected, somaxconn)
    _ok("vllm-omni", engine, SHORT)  # and it serves on
