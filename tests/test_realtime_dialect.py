"""The vllm-omni-realtime dialect (issue 41, item 5): MiniCPM-o 4.5 on vLLM-Omni's DuplexOmni server
over the WebSocket `/v1/realtime?duplex=1`.

Wire facts from the vllm-omni 0.30.0 wheel (`pip download --no-deps vllm-omni==0.30.0`; 0.32.0 and
PR #7413 were in none of the stores read) and vllm-project/vllm-omni main as the search index holds it
(docs/serving/realtime_duplex_api.md at 09c32f18141e): the route
(`vllm_omni/entrypoints/openai/api_server.py` `realtime_websocket`), the handshake and error
envelope (`entrypoints/duplex/serving.py`, `realtime_input.py`, `protocol/duplex/errors.py`), the
server events as `to_realtime()` renders them (`protocol/realtime/events.py`,
`protocol/duplex/events.py`, projected by `engine/duplex/realtime_events.py`), and the client's
session (`clients/duplex.py`, `clients/minicpmo_4_5.py`, and the Seed-TTS realtime benchmark,
`benchmarks/patch/patch.py` `async_request_openai_realtime_duplex`). docs/engines.md cites each.

The fixture tests/data/realtime_duplex_minicpmo_turn.jsonl is one seeded MiniCPM-o turn as that
source renders it (one JSON object per text frame, `server_event_seq` on each); the test frames it
with the `websockets` library as an unmasked, uncompressed server would. The end-to-end tests
drive the reference engine's WebSocket endpoint with the real driver process (record_run) and
check what the driver stored against the engine's own emit log and /stats.
"""

from __future__ import annotations

import base64
import json
import struct
import sys
from pathlib import Path

import httpx
import pytest
import soundfile as sf
from plans_helpers import free_port
from websockets.frames import Frame, Opcode

from console.recording import launch_engine, record_run, stop_engine
from data.plan_model import EngineSpec
from data.records import CHUNK_KINDS, OUTCOMES
from engine_adapters.dialects import get_dialect
from engine_adapters.dialects import vllm_omni_realtime as rt
from engine_adapters.driver import DriveSpec, RequestSpec
from stats.metrics import run_metrics

NAME = "vllm-omni-realtime"
FIXTURE = Path(__file__).parent / "data" / "realtime_duplex_minicpmo_turn.jsonl"
TEXTS = ["A short sentence for the engine.", "Another line of speech to render now.",
         "Timing every chunk as it arrives.", "The fourth request says this."]


def frame(payload: bytes | str, opcode: Opcode = Opcode.TEXT, fin: bool = True, mask: bool = False) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return Frame(opcode, data, fin).serialize(mask=mask, extensions=[])


def recorded() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def parse(stream: bytes, cuts: tuple[int, ...] = (), **options) -> tuple[rt.Parser, list]:
    """Feed `stream` as reads split at `cuts`; read k is stamped k * 1000."""
    p = get_dialect(NAME).new_parser(options)
    assert isinstance(p, rt.Parser)
    bounds = [0, *cuts, len(stream)]
    events = p.feed_reads([k * 1000 for k in range(len(bounds) - 1)],
                          [stream[a:b] for a, b in zip(bounds, bounds[1:])])
    return p, events


def test_recorded_turn_parses_into_audio_text_and_an_end():
    evs = recorded()
    stream = b"".join(frame(json.dumps(e, separators=(",", ":"))) for e in evs)
    p, events = parse(stream)
    assert p.outcome() == ("ok", None)
    assert p.state.end_marker and p.state.finish_reason == "stop"
    assert [e.kind for e in events if e.kind != "other"] == ["audio", "text", "audio", "text"]
    assert p.state.samples == 480 + 240 and p.state.audio_chunks == 2 and p.state.sample_rate == 24_000
    assert p.state.text == "It is sunny, 24 degrees."
    # the parser stops at response.done (rate_limits.updated and session.closed follow it)
    assert p.state.events == [e["type"] for e in evs].index("response.done") + 1
    pcm = b"".join(e.pcm for e in events if e.pcm)
    want = b"".join(base64.b64decode(e["delta"]) for e in evs if e["type"] == rt.AUDIO_DELTA)
    assert pcm == want
    # the JSON's spacing does not matter (json.dumps' default separators here)
    p2, _ = parse(b"".join(frame(json.dumps(e)) for e in evs))
    assert p2.outcome() == ("ok", None) and p2.state.samples == 720


def test_an_event_takes_the_stamp_of_the_read_holding_its_first_frame_byte():
    evs = recorded()
    frames = [frame(json.dumps(e)) for e in evs]
    stream = b"".join(frames)
    starts = [sum(map(len, frames[:k])) for k in range(len(frames))]
    audio_k = next(k for k, e in enumerate(evs) if e["type"] == rt.AUDIO_DELTA)
    # cut one byte into the audio delta's frame, and again in its middle: it began in the earlier read
    cuts = (starts[audio_k] + 1, starts[audio_k] + len(frames[audio_k]) // 2, starts[audio_k + 1] + 3)
    p, events = parse(stream, cuts)
    audio = [e for e in events if e.kind == "audio"]
    assert audio[0].t_arrival_ns == 0  # read 0 ends one byte into the frame: its first byte came there
    text = next(e for e in events if e.kind == "text")
    assert text.t_arrival_ns == 2000  # the transcript frame starts in read 2, which ended the audio frame
    assert p.outcome() == ("ok", None)


def test_a_fragmented_message_arrives_with_its_first_fragment():
    delta = json.dumps(recorded()[6]).encode()
    stream = frame(delta[:50], Opcode.TEXT, fin=False) + frame(delta[50:], Opcode.CONT)
    stream += frame(json.dumps({"type": "response.done", "response": {"status": "completed"}}))
    first = len(frame(delta[:50], Opcode.TEXT, fin=False))
    p, events = parse(stream, (first,))
    audio = [e for e in events if e.kind == "audio"]
    assert len(audio) == 1 and audio[0].t_arrival_ns == 0 and audio[0].samples == 480
    assert p.outcome() == ("ok", None)


DONE = {"type": "response.done", "response": {"status": "completed"}}
AUDIO = recorded()[6]


@pytest.mark.parametrize("events, outcome, detail", [
    # the Realtime error envelope (protocol/realtime/events.py ErrorEvent, codes protocol/duplex/errors.py)
    ([{"type": "error", "error": {"type": "invalid_request_error", "code": "ref_audio_required",
                                  "message": "MiniCPM-o duplex audio output requires ref_audio"}}],
     "in_stream_error", "[invalid_request_error/ref_audio_required] MiniCPM-o duplex audio output requires ref_audio"),
    # the flat handshake-stage shape (entrypoints/duplex/serving.py before the projector is bound)
    ([{"type": "error", "error": "Unknown or expired duplex session: duplex-1", "code": "session_resume_expired"}],
     "in_stream_error", "[session_resume_expired] Unknown or expired duplex session: duplex-1"),
    ([{"type": "error", "error": {"type": "rate_limit_error", "code": "resource_exhausted",
                                  "message": "duplex_session_capacity_exhausted: limit=4"}}],
     "in_stream_error", "[rate_limit_error/resource_exhausted] duplex_session_capacity_exhausted: limit=4"),
    ([AUDIO, {"type": "response.done", "response": {"status": "cancelled",
                                                     "status_details": {"type": "cancelled", "reason": "barge_in"}}}],
     "in_stream_error", "response.done with status 'cancelled' (barge_in)"),
    ([AUDIO, {"type": "session.closed", "reason": "timeout"}],
     "no_end_marker", "server closed the stream mid-response: 2 event(s) arrived, then session.closed (timeout) "
                      "without response.done"),
    ([{"type": "response.listen", "response": {"status": "listening"}}, DONE],
     "no_audio", "stream completed without any audio samples"),
    ([{**AUDIO, "delta": "not base64!"}, DONE], "decode_error", None),
    ([{**AUDIO, "sample_rate_hz": 16000}, DONE], "decode_error",
     "audio delivered at sample rate 16000 Hz; this engine is expected to deliver 24000 Hz (request.sample_rate)"),
    ([{**AUDIO, "format": "g711_ulaw"}, DONE], "decode_error", None),
    ([{**AUDIO, "emit_ns": 1 << 63}, DONE], "decode_error", None),
])
def test_failure_classes_from_the_wire(events, outcome, detail):
    p, _ = parse(b"".join(frame(json.dumps(e)) for e in events))
    got = p.outcome()
    assert got[0] == outcome, got
    if detail is not None:
        assert got[1] == detail


def test_protocol_faults_are_decode_errors_and_a_close_frame_is_no_end_marker():
    masked = frame(json.dumps(AUDIO), mask=True)  # a server must not mask (RFC 6455 5.1)
    assert parse(masked)[0].outcome()[0] == "decode_error"
    binary = frame(b"\x00\x01", Opcode.BINARY)
    assert parse(binary)[0].outcome() == ("decode_error", "binary WebSocket message of 2 bytes; the duplex "
                                                           "protocol sends JSON text")
    assert parse(frame("{not json"))[0].outcome()[0] == "decode_error"
    close = frame(json.dumps(AUDIO)) + frame(struct.pack("!H", 1011) + b"engine died", Opcode.CLOSE)
    assert parse(close)[0].outcome() == ("no_end_marker", "server closed the stream mid-response: 1 event(s) "
                                                         "arrived, then the server closed the WebSocket (code 1011: "
                                                         "engine died) without response.done")
    big = frame(json.dumps({**AUDIO, "delta": base64.b64encode(bytes(6000)).decode()}))
    assert parse(big, max_event_bytes=4096)[0].outcome()[0] == "decode_error"


def test_session_body_is_the_benchmarks_session():
    d = get_dialect(NAME)
    body = d.build_body("Read this.", str(Path(__file__).parent.parent / "data" / "sample_workload" / "en" /
                                          "prompt-wavs" / "spk01.wav"), "prompt", sampling={"temperature": 0.0, "seed": 7})
    s = body["session"]
    assert body["type"] == "session.update" and s["ref_audio"].startswith("data:audio/wav;base64,")
    assert s["extra_body"] == {"auto_response": True, "duplex_initial_user_text": "Read this.", "force_listen_count": 0}
    assert s["output_audio_format"] == "pcm16" and s["input_audio_format"] == "pcm16" and s["sample_rate_hz"] == 16000
    assert s["temperature"] == 0.0 and "seed" not in s and "seed" not in body  # the talker's seed is the deploy config's
    assert d.request_config({}).stream is True and d.transport == "websocket"
    with pytest.raises(Exception, match="request.stream"):
        d.request_config({"stream": False})
    assert get_dialect(NAME).build_body("x", None, None, options={"audio_format": "wav"})["session"][
        "output_audio_format"] == "wav"
    assert rt.event_type(b'{"type":"response.done","x":1}') == "response.done"
    assert rt.event_type(b'{"event_id":"e","type":"error"}') == "error"  # type not first: read from the JSON


def _engine(store, tmp_path, profile="fast", extra=()):
    port = free_port()
    argv = (sys.executable, "-m", "engine_adapters.reference", "--dialect", NAME, "--profile", profile,
            "--port", str(port), *extra)
    spec = EngineSpec(f"ref-{NAME}", "reference", NAME, argv=argv, port=port, health_timeout_s=90, profile=profile)
    return launch_engine(store, spec, log_dir=tmp_path / "logs")


@pytest.mark.parametrize("concurrency, n", [(1, 2), (4, 8)])
def test_driver_over_the_websocket_matches_the_engines_own_record(store, tmp_path, prompt, concurrency, n, capfd):
    emit_log = tmp_path / "emit.jsonl"
    eng = _engine(store, tmp_path, extra=("--emit-log", str(emit_log)))
    try:
        reqs = [RequestSpec(f"u{i}", TEXTS[i % 4] + f" Number {i}.", prompt, "prompt") for i in range(n)]
        spec = DriveSpec(f"rt-{concurrency}", eng.spec.url, NAME, concurrency, reqs, timeout_s=60,
                         artifacts_dir=tmp_path / "a", sampling={"seed": 42, "temperature": 0.0})
        run_id = record_run(store, spec, engine=eng.spec.name, kind="exploratory", launch_id=eng.launch_id,
                            telemetry=False)
        stats = httpx.get(f"{eng.spec.url}/stats").json()
        chat = httpx.post(f"{eng.spec.url}/v1/chat/completions", timeout=60, json=get_dialect("vllm-omni").build_body(
            reqs[0].text, str(prompt), "prompt", sampling={"seed": 42}, options={"stream": False}))
    finally:
        stop_engine(store, eng, grace_s=2)
    rows = store.query("SELECT * FROM requests WHERE run_id = ? ORDER BY request_index", [run_id])
    assert len(rows) == n and {r["outcome"] for r in rows} == {"ok"}, [r["error_detail"] for r in rows]
    written = [json.loads(line) for line in emit_log.read_text().splitlines()]
    by_emit = {w["emit_ns"]: w for w in written}
    chunks = store.query("SELECT request_index, t_arrival_ns, samples, server_emit_ns FROM chunks "
                         "WHERE run_id = ? AND kind = 'audio' ORDER BY request_index, chunk_index", [run_id])
    # every audio chunk the driver stored is one the engine wrote, with its samples; none is missing
    assert len(chunks) == len(written) == sum(r["audio_chunks"] for r in rows)
    assert all(by_emit[c["server_emit_ns"]]["samples"] == c["samples"] for c in chunks)
    assert all(0 <= c["t_arrival_ns"] - c["server_emit_ns"] < 500_000_000 for c in chunks)  # same host clock
    assert sum(r["audio_samples"] for r in rows) == sum(w["samples"] for w in written)
    assert stats["audio_s"] == pytest.approx(sum(r["audio_samples"] for r in rows) / 24_000)
    assert stats["streams"]["completed"] == n and stats["finished"] == n
    for r in rows:
        first = min(c["server_emit_ns"] for c in chunks if c["request_index"] == r["request_index"])
        assert r["t_send_ns"] < first <= r["t_first_audio_ns"]  # TTFA: the engine's first write, then its arrival
        assert r["sample_rate"] == 24_000 and r["http_status"] == 101 and r["text"] == reqs[r["request_index"]].text
    m = run_metrics(store, run_id)
    assert m.completed == n and m.throughput > 0 and m.ttfa_p50_s > 0
    assert store.scalar("SELECT client_impl FROM runs WHERE run_id = ?", [run_id]).startswith("websockets ")
    # the same synthesis as the chat dialects: the talker's seed 42 gives the chat request's audio
    wav = base64.b64decode(chat.json()["choices"][0]["message"]["audio"]["data"])
    from engine_adapters.dialects.wav import decode_wav

    assert (tmp_path / "a" / rows[0]["audio_path"]).is_file()
    stored, stored_rate = sf.read(str(tmp_path / "a" / rows[0]["audio_path"]), dtype="int16")  # lossless FLAC
    assert stored_rate == 24_000 and stored.tobytes() == decode_wav(wav).pcm
    err = capfd.readouterr().err
    assert "Task was destroyed" not in err and "Traceback" not in err, err[-2000:]


FAULTS = {"none": "ok", "in_stream_error": "in_stream_error", "drop": "transport", "http_500": "http_status",
          "stall": "timeout", "emit_ns_overflow": "decode_error", "wav_rate": "decode_error"}


def test_reference_faults_land_in_their_class(store, tmp_path, prompt):
    eng = _engine(store, tmp_path, profile="flaky")
    try:
        reqs = [RequestSpec(f"f{i}", TEXTS[i % 4] + f" Fault {i}.", prompt, headers=(("X-Reference-Fault", f),))
                for i, f in enumerate(FAULTS)]
        spec = DriveSpec("rt-faults", eng.spec.url, NAME, 4, reqs, timeout_s=3, artifacts_dir=tmp_path / "a")
        run_id = record_run(store, spec, engine=eng.spec.name, kind="exploratory", telemetry=False)
        after = httpx.get(f"{eng.spec.url}/health").status_code
    finally:
        stop_engine(store, eng, grace_s=2)
    rows = store.query("SELECT request_index, outcome, error_detail, http_status FROM requests WHERE run_id = ? "
                       "ORDER BY request_index", [run_id])
    assert [r["outcome"] for r in rows] == list(FAULTS.values()), rows
    got = {f: r for f, r in zip(FAULTS, rows)}
    assert got["http_500"]["http_status"] == 500 and got["http_500"]["error_detail"].startswith("HTTP 500: ")
    assert "runtime_data_plane_stream_failed" in got["in_stream_error"]["error_detail"]
    assert got["stall"]["error_detail"] == "no completion within 3 s"
    assert "8000 Hz" in got["wav_rate"]["error_detail"] and "emit_ns" in got["emit_ns_overflow"]["error_detail"]
    assert after == 200  # none of these kills the engine


def test_arbitrary_bytes_never_crash_the_parser():
    import random

    rng = random.Random(41)
    good = b"".join(frame(json.dumps(e)) for e in recorded())
    for _ in range(200):
        cut = rng.randrange(len(good))
        stream = good[:cut] + bytes(rng.randrange(256) for _ in range(rng.randrange(40))) + good[cut:]
        p, events = parse(stream, tuple(sorted(rng.sample(range(1, len(stream)), 3))))
        assert all(e.kind in CHUNK_KINDS for e in events) and p.outcome()[0] in OUTCOMES
