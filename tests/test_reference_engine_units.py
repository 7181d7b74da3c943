"""Unit tests for the reference engine's pure parts: profiles, faults, request parsing, encoders,
espeak determinism, voice analysis and the scheduler (in-process, tiny steps)."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import numpy as np
import pytest
import soundfile

from engine_adapters.reference.chat_request import RequestError, parse_request
from engine_adapters.reference.encoders import (
    Frame, PcmEncoder, SglangOmniEncoder, StreamContext, Usage, VllmOmniEncoder, stamp, wav_bytes,
)
from engine_adapters.reference.espeak import EspeakSynth, VoiceParams
from engine_adapters.reference.faults import FaultHeaderError, draw_fault, forced_fault
from engine_adapters.reference.profiles import Profile, ProfileError, get_profile, load_profiles
from engine_adapters.reference.scheduler import Admitted, BatchScheduler, Chunk
from engine_adapters.reference.synthesis import Rendered, degrade, drop_words, stable_seed
from engine_adapters.reference.voice import analyze


# ---- profiles ------------------------------------------------------------------------------------

def test_builtin_profiles_load_and_inherit():
    profiles = load_profiles()
    assert {"baseline", "fast", "lossy", "whole", "flaky"} <= set(profiles)
    base, fast = profiles["baseline"], profiles["fast"]
    assert fast.step_duration(8, 0) < base.step_duration(8, 0)
    assert (fast.audio, fast.chunk_frames, fast.lossless) == (base.audio, base.chunk_frames, True)
    assert profiles["whole"].delivery == "whole" and profiles["lossy"].audio == "lossy"
    assert sum(profiles["flaky"].fault_rates.values()) > 0
    assert base.chunk_samples == 24000


def test_user_profiles_extend_and_validate(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text('[profiles.tiny]\ninherits = "fast"\nmax_num_seqs = 2\n')
    tiny = get_profile("tiny", user)
    assert tiny.max_num_seqs == 2 and tiny.step_base_s == get_profile("fast").step_base_s
    for body, needle in [
        ('[profiles.bad]\nmax_num_seqs = 0\n', "max_num_seqs"),
        ('[profiles.bad]\nstep_base_s = "fast"\n', "must be a number"),
        ('[profiles.bad]\nwarp = 9\n', "unknown field"),
        ('[profiles.bad]\ninherits = "nope"\n', "unknown profile"),
        ('[profiles.bad.fault_rates]\nmeteor = 0.1\n', "unknown fault kind"),
        ('[profiles.bad.fault_rates]\ndrop = 0.7\nstall = 0.7\n', "sum to at most 1"),
        ('[profiles.bad\n', "invalid TOML"),
    ]:
        user.write_text(body)
        with pytest.raises(ProfileError, match=needle):
            load_profiles(user)
    with pytest.raises(ProfileError, match="available: baseline"):
        get_profile("missing")


# ---- faults --------------------------------------------------------------------------------------

def test_fault_header_and_draws():
    assert forced_fault(None) == (False, None)
    assert forced_fault("none") == (True, None)
    assert forced_fault(" Stall ") == (True, "stall")
    with pytest.raises(FaultHeaderError, match="unknown fault"):
        forced_fault("meteor")
    rates = {"drop": 0.1, "stall": 0.2}
    draws = [draw_fault(rates, stable_seed("fault", i)) for i in range(5000)]
    assert draws == [draw_fault(rates, stable_seed("fault", i)) for i in range(5000)]
    assert abs(draws.count("drop") / 5000 - 0.1) < 0.02 and abs(draws.count("stall") / 5000 - 0.2) < 0.025
    assert draw_fault({}, 123) is None


# ---- request parsing -----------------------------------------------------------------------------

def _wav_uri() -> str:
    buf = io.BytesIO()
    soundfile.write(buf, np.zeros(1600, dtype=np.int16), 16000, format="WAV", subtype="PCM_16")
    return "data:audio/wav;base64," + base64.b64encode(buf.getvalue()).decode()


def test_parse_vllm_request_takes_first_audio_url_and_last_user_text():
    uri = _wav_uri()
    body = {"stream": True, "seed": 5, "max_tokens": 50, "temperature": 0.7,
            "audio": {"format": "pcm"}, "stream_options": {"include_usage": True},
            "messages": [
                {"role": "system", "content": "You are a speaker."},
                {"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": uri}},
                                             {"type": "text", "text": "Hello"}, {"type": "text", "text": "world."}]},
            ]}
    req = parse_request(json.dumps(body).encode(), "vllm-omni")
    assert req.text == "Hello world." and req.prompt_wav == base64.b64decode(uri.split(",", 1)[1])
    assert (req.seed, req.max_tokens, req.temperature, req.audio_format, req.include_usage) == (5, 50, 0.7, "pcm", True)
    # SGLang-Omni ignores audio_url parts and reads audio.ref_audio instead
    sg = parse_request(json.dumps({**body, "audio": {"format": "wav", "ref_audio": uri}}).encode(), "sglang-omni")
    assert sg.prompt_wav == req.prompt_wav and sg.audio_format == "wav"


@pytest.mark.parametrize("raw, needle", [
    (b"{nope", "not valid JSON"),
    (b"[]", "JSON object"),
    (json.dumps({"stream": "yes", "messages": [{"role": "user", "content": "hi"}]}).encode(), "'stream' must be"),
    (json.dumps({"stream": True, "messages": []}).encode(), "non-empty list"),
    (json.dumps({"stream": True, "messages": [{"role": "assistant", "content": "hi"}]}).encode(), "no user message"),
    (json.dumps({"stream": True, "messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}]}).encode(),
     "no text content"),
    (json.dumps({"stream": True, "modalities": ["text"], "messages": [{"role": "user", "content": "hi"}]}).encode(),
     "modalities"),
    (json.dumps({"stream": True, "seed": "x", "messages": [{"role": "user", "content": "hi"}]}).encode(), "'seed'"),
    (json.dumps({"stream": True, "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]}).encode(),
     "'max_tokens'"),
    (json.dumps({"stream": True, "audio": {"format": "flac"}, "messages": [{"role": "user", "content": "hi"}]}).encode(),
     "unsupported audio format"),
    (json.dumps({"stream": True, "messages": [{"role": "user", "content": [
        {"type": "audio_url", "audio_url": {"url": "https://example.com/a.wav"}}, {"type": "text", "text": "hi"}]}]}
     ).encode(), "only data: URIs"),
    (json.dumps({"stream": True, "messages": [{"role": "user", "content": [
        {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,!!"}}, {"type": "text", "text": "hi"}]}]}
     ).encode(), "not valid base64"),
])
def test_parse_rejects_malformed(raw, needle):
    with pytest.raises(RequestError, match=needle) as info:
        parse_request(raw, "vllm-omni")
    assert info.value.status == 400


def test_pcm_dialect_only_streams():
    with pytest.raises(RequestError, match="only streams"):
        parse_request(json.dumps({"stream": False, "messages": [{"role": "user", "content": "hi"}]}).encode(), "pcm")


# ---- encoders ------------------------------------------------------------------------------------

def test_wav_bytes_is_a_standalone_24k_wav():
    samples = (np.sin(np.arange(2400) / 5) * 10000).astype(np.int16)
    data, rate = soundfile.read(io.BytesIO(wav_bytes(samples)), dtype="int16")
    assert rate == 24000 and np.array_equal(data, samples)


def test_stamp_splices_emit_ns_into_sse_json():
    ctx = StreamContext("chatcmpl-1", 0, "m", "wav", include_usage=True)
    for enc in (VllmOmniEncoder(), SglangOmniEncoder()):
        (frame,) = enc.audio(ctx, np.zeros(10, dtype=np.int16))
        data, emit_ns = stamp(frame)
        assert data.startswith(b"data: {") and data.endswith(b"}\n\n")
        obj = json.loads(data[len(b"data: "):])
        assert obj["emit_ns"] == emit_ns
    raw, _ = stamp(Frame(b"\x01\x02", sse=False))
    assert raw == b"\x01\x02"
    usage = Usage(3, 4)
    assert VllmOmniEncoder().finish(ctx, "stop", usage)[-1].body == b"data: [DONE]\n\n"
    assert SglangOmniEncoder().stream_error(ctx, "x") is None and PcmEncoder.error_aborts


# ---- audio ---------------------------------------------------------------------------------------

def test_espeak_output_is_history_independent():
    synth = EspeakSynth.shared()
    text = "A short sentence for the determinism check."
    first = synth.synthesize(text, VoiceParams("en-us+f3", pitch=60))
    synth.synthesize("Something entirely different in between.", VoiceParams("en+m1", rate=300, pitch=10))
    assert np.array_equal(first, synth.synthesize(text, VoiceParams("en-us+f3", pitch=60)))


def test_pitch_analysis_tracks_espeak_pitch():
    synth = EspeakSynth.shared()
    text = "The children built a bridge out of cardboard."
    low = analyze(synth.synthesize(text, VoiceParams("en-us+m3", pitch=10)), synth.sample_rate)
    high = analyze(synth.synthesize(text, VoiceParams("en-us+m3", pitch=90)), synth.sample_rate)
    assert 60 < low.f0_median_hz < high.f0_median_hz < 300
    assert low.speech_s > 1.5 and len(low.timbre) == 12


def test_lossy_helpers_are_seeded():
    words = "one two three four five six seven eight nine ten eleven twelve"
    a = drop_words(words, 0.3, np.random.default_rng(1))
    assert a == drop_words(words, 0.3, np.random.default_rng(1)) and len(a.split()) < 12
    assert drop_words("single", 0.99, np.random.default_rng(1)) == "single"
    tone = (np.sin(2 * np.pi * 6000 * np.arange(24000) / 24000) * 8000).astype(np.int16)
    out = degrade(tone, 3400.0, 60.0, np.random.default_rng(0))
    assert np.sqrt(np.mean(out.astype(float) ** 2)) < 0.05 * np.sqrt(np.mean(tone.astype(float) ** 2))


# ---- scheduler -----------------------------------------------------------------------------------

def test_scheduler_batches_queues_and_chunks():
    profile = Profile(name="t", max_num_seqs=2, prefill_s=0.0, step_base_s=0.002, step_per_seq_s=0.001,
                      chunk_frames=1)  # 960 samples per chunk

    async def scenario() -> tuple[list[list[object]], int]:
        sched = BatchScheduler(profile)
        sched.start()
        loop = asyncio.get_running_loop()
        seqs = []
        for n in (2000, 960, 100):
            fut = loop.create_future()
            fut.set_result(Rendered(np.arange(n, dtype=np.int16), VoiceParams(), "x", False))
            seqs.append(sched.submit(fut))
        await asyncio.sleep(0)
        assert (sched.active, sched.waiting) == (2, 1)  # two admitted at once, one queued
        logs = []
        for seq in seqs:
            events = []
            while not (events and isinstance(events[-1], Chunk) and events[-1].last):
                events.append(await asyncio.wait_for(seq.events.get(), 2))
            logs.append(events)
        await sched.stop()
        return logs, sched.stats.max_active_seen

    logs, max_active = asyncio.run(scenario())
    assert max_active == 2
    first, second, third = logs
    assert isinstance(first[0], Admitted) and [len(c.samples) for c in first[1:]] == [960, 960, 80]
    assert np.array_equal(np.concatenate([c.samples for c in first[1:]]), np.arange(2000, dtype=np.int16))
    assert [len(c.samples) for c in second[1:]] == [960] and [len(c.samples) for c in third[1:]] == [100]


# ---- command line and sample workload ------------------------------------------------------------

def test_campaign_engine_commands(capsys):
    from console.cli import build_parser, main

    assert main(["engine", "profiles"]) == 0
    assert "baseline" in capsys.readouterr().out
    args = build_parser().parse_args(["engine", "reference", "--dialect", "sglang-omni", "--profile", "whole",
                                      "--port", "0", "--device", "cpu"])
    assert (args.dialect, args.profile, args.port, args.host) == ("sglang-omni", "whole", 0, "127.0.0.1")
    assert main(["engine", "reference", "--dialect", "pcm", "--profile", "no-such-profile"]) == 2
    assert "no profile named 'no-such-profile'" in capsys.readouterr().err


@pytest.mark.slow  # imports torch in a fresh process
def test_device_cuda_without_gpu_fails_in_one_line():
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present; bench/reference_cuda_check.py exercises --device cuda")
    done = subprocess.run([sys.executable, "-m", "engine_adapters.reference", "--dialect", "pcm", "--device", "cuda",
                           "--port", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device cuda: no CUDA GPU is visible" in lines[0]


def test_sample_workload_is_reproducible():
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(repo / "scripts" / "make_sample_workload.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    from data.workload import load_workload

    workload = load_workload(repo / "data" / "sample_workload")
    assert len(workload.utterances) == 128 and len(workload.speakers) >= 16 and not workload.errors
    assert set(workload.pools["tuning"]).isdisjoint(workload.pools["holdout"])
    assert {u.speaker for u in workload.pool("holdout")} == set(workload.speakers)


def test_gpu_step_work_scales_with_the_batch():
    """The --device cuda bookkeeping, run on the CPU with tiny matrices."""
    from engine_adapters.reference.gpu import CudaStepWorker

    worker = CudaStepWorker(busy_fraction=0.8, max_num_seqs=16, dim=64, rows=32, device="cpu")
    try:
        assert worker.stats.matmul_ms > 0
        assert worker.matmuls_for(0, 0.1) == 0
        one, full, over = (worker.matmuls_for(n, 0.1) for n in (1, 16, 32))
        assert 1 <= one < full == over  # grows with the batch up to max_num_seqs, flat beyond
        assert abs(full - round(80 / worker.stats.matmul_ms)) <= 1
        asyncio.run(worker.step(4, 0.01))
        assert worker.stats.steps == 1 and worker.stats.per_batch_matmuls == {4: worker.matmuls_for(4, 0.01)}
    finally:
        worker.close()


def test_audio_template_builds_the_same_bytes_as_the_encoder():
    """The direct emission path builds audio events from a template and a pre-rendered payload;
    they must be byte-identical to what the encoder builds from the samples."""
    from engine_adapters.reference.encoders import ENCODERS, StreamContext

    x = (np.arange(4800) % 300 - 150).astype(np.int16)
    for name, encoder_cls in ENCODERS.items():
        enc = encoder_cls()
        for fmt in ("wav", "pcm"):
            ctx = StreamContext("chatcmpl-x", 1, "m", fmt, False)
            for finish in ("stop", "length"):
                built = enc.audio_template(ctx, finish).frame(enc.audio_payload(x, fmt), len(x))
                assert built == enc.audio(ctx, x, finish)[0], (name, fmt, finish)


def test_schedule_log_windows_slip_and_steps():
    from engine_adapters.reference.scheduler import ScheduleLog

    log = ScheduleLog(capacity=8)
    ms = 1_000_000
    for k in range(10):  # step k due at 10 k ms, its chunk k ms late; the oldest half goes when full
        log.chunk(10 * k * ms + k * ms + 1, 10 * k * ms + 1)  # (+1: a due time of 0 means none)
        log.step(10 * k * ms, 10 * ms, k == 6)
    log.chunk(5, 0)  # no due time (a text event): not a chunk of the schedule
    s = log.summary(since_ns=50 * ms)
    assert s["chunks"] == 5 and s["slip_max_ms"] == 9.0 and s["slip_p50_ms"] == 7.0
    assert s["write_gap_max_ms"] == 0.0  # not measured for these chunks
    assert s["steps"] == 5 and s["timeline_breaks"] == 1 and s["step_nominal_ms"] == 10.0
    assert log.summary(0, 55 * ms)["timeline_breaks"] == 0
    assert log.summary(0)["chunks"] == 6  # chunks 0-3 were dropped when the log filled
    assert log.summary(10**12)["slip_p99_ms"] is None


def test_schedule_log_reports_the_gap_from_emit_stamp_to_write_return():
    from engine_adapters.reference.scheduler import ScheduleLog

    log = ScheduleLog()
    ms = 1_000_000
    for k in range(100):  # the write returned k/10 ms after the stamp; one write blocked 25 ms
        emit = 10 * k * ms + 1
        log.chunk(emit, emit, emit + (25 * ms if k == 42 else k * ms // 10))
    s = log.summary()
    assert s["write_gap_max_ms"] == 25.0 and s["write_gap_p99_ms"] == 10.051  # numpy's linear percentile
    assert log.summary(since_ns=430 * ms)["write_gap_max_ms"] == 9.9  # the blocked write is outside


def test_schedule_log_finds_chunks_by_emit_stamp_and_counts_queued_bytes():
    from engine_adapters.reference.scheduler import ScheduleLog

    log = ScheduleLog(capacity=6)
    ms = 1_000_000
    for k in range(6):  # chunk k: emitted at k ms + 1, due 1 ms before, written k/10 ms later; odd ones left bytes queued
        emit = k * ms + 1
        log.chunk(emit, emit - ms, emit + k * ms // 10, k % 2)
    log.chunk(99 * ms, 98 * ms)  # the task path: not measured
    assert log.summary()["queued_chunks"] == 2  # chunks 0-2 went when the log filled; 3 and 5 are left
    at = log.at([5 * ms + 1, 4 * ms + 1, 1 * ms + 1, 7])
    assert at == {5 * ms + 1: {"slip_ms": 1.0, "write_gap_ms": 0.5, "queued": True},
                  4 * ms + 1: {"slip_ms": 1.0, "write_gap_ms": 0.4, "queued": False}}  # 1 ms + 1 was dropped; 7 never was
    assert log.at([99 * ms])[99 * ms]["queued"] is None


def test_scheduler_keeps_a_nominal_timeline_and_posts_to_a_sink():
    """Chunks carry their step's due time; a sink gets events inside the step (and the ones queued
    before it was attached first); a step late by writing does not push the next one back."""
    profile = Profile(name="t", max_num_seqs=4, prefill_s=0.0, step_base_s=0.02, step_per_seq_s=0.0, chunk_frames=1)

    async def scenario() -> list:
        sched = BatchScheduler(profile)
        sched.start()
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(Rendered(np.arange(960 * 6, dtype=np.int16), VoiceParams(), "x", False))
        seq = sched.submit(fut)
        await asyncio.sleep(0)  # admitted: the Admitted event is queued
        got: list = []
        done = asyncio.Event()

        def sink(ev) -> None:
            got.append((ev, time.perf_counter_ns()))
            if isinstance(ev, Chunk):
                time.sleep(0.008)  # a slow write inside the step
                if ev.last:
                    done.set()

        seq.attach(sink)
        await asyncio.wait_for(done.wait(), 5)
        await sched.stop()
        return got

    import time

    got = asyncio.run(scenario())
    assert isinstance(got[0][0], Admitted)
    chunks = [(ev, t) for ev, t in got if isinstance(ev, Chunk)]
    assert [ev.index for ev, _ in chunks] == list(range(6))
    dues = [ev.due_ns for ev, _ in chunks]
    assert all(b - a == 20_000_000 for a, b in zip(dues, dues[1:]))  # nominal: 20 ms apart despite 8 ms writes
    assert all(0 <= t - ev.due_ns < 15_000_000 for ev, t in chunks)
