"""Stream parsers against fixture streams written from the wire facts in docs/engines.md."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data.records import CHUNK_KINDS, OUTCOMES
from engine_adapters.dialects import DIALECTS, get_dialect
from engine_adapters.dialects.base import SSEFramer
from engine_adapters.dialects.wav import WavError, decode_wav, encode_wav

SR = 24_000


def wav(n: int, rate: int = SR) -> bytes:
    return encode_wav(struct.pack(f"<{n}h", *([1000] * n)), rate)


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def sse(*objs) -> bytes:
    out = b""
    for o in objs:
        out += b"data: " + (o.encode() if isinstance(o, str) else json.dumps(o).encode()) + b"\n\n"
    return out


def v_audio(n, emit=None, finish=None, fmt_bytes=None):
    o = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "modality": "audio",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": b64(fmt_bytes or wav(n))},
                      "finish_reason": finish}]}
    if emit is not None:
        o["emit_ns"] = emit
    return o


V_TEXT = {"id": "chatcmpl-1", "modality": "text", "choices": [{"index": 0, "delta": {"content": "Hello there."}}]}
V_USAGE = {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 50}}


def s_audio(n, raw=None):
    return {"id": "c", "choices": [{"index": 0, "delta": {"audio": {"id": "a0", "data": b64(raw or wav(n))}}}]}


S_ROLE = {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
S_FINAL = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"completion_tokens": 5}}


def run(dialect, stream: bytes, pieces=(7, 64, 1), **opts):
    """Feed `stream` in irregular reads stamped 1, 2, 3 ...; return (parser, events, read stamps)."""
    p = get_dialect(dialect).new_parser(opts)
    events, pos, t = [], 0, 0
    sizes = list(pieces)
    while pos < len(stream) and not p.done:
        n = sizes[t % len(sizes)]
        t += 1
        events += p.feed(stream[pos:pos + n], t)
        pos += n
    if not p.done:
        p.eof()
    return p, events


def test_vllm_omni_audio_text_usage_done():
    stream = sse(V_TEXT, v_audio(2400, emit=111, finish="stop"), v_audio(4800, finish="stop"), V_USAGE, "[DONE]")
    p, ev = run("vllm-omni", stream, pieces=(1000,))
    assert p.outcome() == ("ok", None)
    assert [e.kind for e in ev] == ["text", "audio", "audio", "usage"]
    assert [e.samples for e in ev] == [0, 2400, 4800, 0]
    assert ev[1].server_emit_ns == 111
    assert p.state.samples == 7200 and p.state.sample_rate == SR and p.state.audio_chunks == 2
    assert p.state.text == "Hello there."
    # finish_reason "stop" on every audio chunk does not end the stream: only [DONE] does
    assert p.state.end_marker


def test_arrival_is_stamp_of_first_byte_read():
    one = sse(v_audio(240))
    stream = one + one + sse("[DONE]")
    p = get_dialect("vllm-omni").new_parser()
    # read 1: the first 10 bytes of event A; read 2: rest of A and first 5 bytes of B; read 3: the rest
    e1 = p.feed(stream[:10], 100)
    e2 = p.feed(stream[10:len(one) + 5], 200)
    e3 = p.feed(stream[len(one) + 5:], 300)
    assert e1 == [] and [e.t_arrival_ns for e in e2] == [100] and [e.t_arrival_ns for e in e3] == [200]
    assert p.outcome()[0] == "ok"


def test_vllm_omni_pcm_format():
    raw = struct.pack("<480h", *range(480))
    obj = v_audio(0, fmt_bytes=raw)
    p, ev = run("vllm-omni", sse(obj, "[DONE]"), audio_format="pcm")
    assert p.outcome()[0] == "ok" and ev[0].samples == 480 and ev[0].pcm == raw


def test_in_stream_error_then_done_is_failure():
    err = {"error": {"message": "engine died\nstack...", "type": "InternalError", "code": 500}}
    p, ev = run("vllm-omni", sse(v_audio(240), err, "[DONE]"))
    cls, detail = p.outcome()
    assert cls == "in_stream_error" and "engine died" in detail and "\n" not in detail
    assert [e.kind for e in ev] == ["audio", "error"]


def test_missing_done_is_no_end_marker():
    p, _ = run("vllm-omni", sse(v_audio(240)))
    assert p.outcome()[0] == "no_end_marker"
    p, _ = run("sglang-omni", sse(S_ROLE, s_audio(240)))
    assert p.outcome()[0] == "no_end_marker"


def test_no_audio():
    p, _ = run("vllm-omni", sse(V_TEXT, V_USAGE, "[DONE]"))
    assert p.outcome()[0] == "no_audio"


@pytest.mark.parametrize("dialect,mk", [("vllm-omni", lambda raw: v_audio(0, fmt_bytes=raw)),
                                        ("sglang-omni", lambda raw: s_audio(0, raw=raw))])
def test_truncated_wav_is_decode_error(dialect, mk):
    p, _ = run(dialect, sse(mk(wav(2400)[:-100]), "[DONE]"))
    cls, detail = p.outcome()
    assert cls == "decode_error" and "truncated" in detail


def test_wrong_wav_encoding_and_rate_change():
    stereo = bytearray(wav(100))
    stereo[22:24] = struct.pack("<H", 2)
    p, _ = run("sglang-omni", sse(s_audio(0, raw=bytes(stereo)), "[DONE]"))
    assert p.outcome()[0] == "decode_error" and "mono" in p.outcome()[1]
    p, _ = run("sglang-omni", sse(s_audio(100), s_audio(0, raw=wav(100, rate=16000)), "[DONE]"))
    assert p.outcome()[0] == "decode_error" and "sample rate" in p.outcome()[1]


def test_bad_base64_and_bad_json():
    bad = {"modality": "audio", "choices": [{"delta": {"content": "!!!not base64!!!"}}]}
    p, _ = run("vllm-omni", sse(bad, "[DONE]"))
    assert p.outcome()[0] == "decode_error" and "base64" in p.outcome()[1]
    p, _ = run("sglang-omni", b'data: {"choices": [\n\ndata: [DONE]\n\n')
    assert p.outcome()[0] == "decode_error" and "JSON" in p.outcome()[1]


def test_oversized_event_is_bounded():
    p = get_dialect("vllm-omni").new_parser({"max_event_bytes": 1024})
    big = b"data: " + b"A" * 600
    assert p.feed(big, 1) == [] and not p.done
    p.feed(big, 2)  # > 1024 bytes pending without a separator
    assert p.done and p.outcome()[0] == "decode_error" and "exceeds" in p.outcome()[1]
    assert p.feed(b"more", 3) == []


def test_sglang_full_stream():
    stream = sse(S_ROLE, s_audio(24000), {"id": "c", "choices": [{"delta": {"content": "hi"}}]}, S_FINAL, "[DONE]")
    p, ev = run("sglang-omni", stream)
    assert p.outcome() == ("ok", None)
    assert [e.kind for e in ev] == ["other", "audio", "text", "usage"]
    assert p.state.samples == 24000 and p.state.text == "hi"


def test_pcm_stream_and_odd_bytes():
    raw = struct.pack("<1001h", *range(1001))
    p, ev = run("pcm", raw, pieces=(333, 100, 7))
    assert p.outcome() == ("ok", None) and p.state.samples == 1001
    assert b"".join(e.pcm for e in ev) == raw
    p, _ = run("pcm", raw + b"\x01")
    assert p.outcome()[0] == "decode_error"
    p, _ = run("pcm", b"")
    assert p.outcome()[0] == "no_audio"


def test_sse_separators_crlf_and_split():
    f = SSEFramer()
    out = f.feed(b"data: a\r\n\r", 1) + f.feed(b"\ndata: b\n", 2) + f.feed(b"\ndata: c", 3)
    assert [(t, raw) for t, raw, _ in out] == [(1, b"data: a"), (2, b"data: b")]
    assert f.pending == len(b"data: c")


def test_decode_wav_rejects_junk():
    for junk in (b"", b"RIFF", b"RIFF\x00\x00\x00\x00WAVEjunk", b"OggS" + bytes(40)):
        with pytest.raises(WavError):
            decode_wav(junk)
    assert decode_wav(wav(10)).samples == 10


def test_request_bodies(tmp_path):
    prompt = tmp_path / "p.wav"
    prompt.write_bytes(wav(10))
    uri = "data:audio/wav;base64," + b64(prompt.read_bytes())
    samp = {"seed": 42, "temperature": 0.0, "max_tokens": None}
    v = get_dialect("vllm-omni").build_body("Say this.", str(prompt), "ref", sampling=samp)
    # vllm-omni >= 0.28: the voice goes top-level (ref_audio + ref_text), never into the messages
    assert v["messages"][0]["content"] == [{"type": "text", "text": "Say this."}]
    assert v["ref_audio"] == uri and v["ref_text"] == "ref"
    a = get_dialect("vllm-omni").build_body("Say this.", str(prompt), "ref", sampling=samp,
                                            options={"voice_prompt": "audio_url"})
    parts = a["messages"][0]["content"]
    assert parts[0] == {"type": "audio_url", "audio_url": {"url": uri}} and "ref_audio" not in a
    assert parts[1] == {"type": "text", "text": "Say this."}
    assert v["modalities"] == ["text", "audio"] and v["stream"] is True
    assert v["chat_template_kwargs"] == {"use_tts_template": True, "enable_thinking": False}
    assert v["stream_options"] == {"include_usage": True}
    assert v["seed"] == 42 and v["temperature"] == 0.0 and "max_tokens" not in v
    s = get_dialect("sglang-omni").build_body("Say this.", str(prompt), "ref", sampling=samp)
    assert s["audio"] == {"format": "wav", "ref_audio": uri} and s["seed"] == 42
    pcm = get_dialect("pcm").build_body("x", str(prompt), None, options={"voice_prompt": "ref_audio"})
    assert pcm["audio"] == {"format": "pcm", "ref_audio": uri}
    none = get_dialect("vllm-omni").build_body("x", str(prompt), None, options={"voice_prompt": "none"})
    assert len(none["messages"][0]["content"]) == 1 and "ref_audio" not in none


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dialect=st.sampled_from(DIALECTS), chunks=st.lists(st.binary(max_size=300), max_size=12))
def test_arbitrary_bytes_never_crash(dialect, chunks):
    p = get_dialect(dialect).new_parser({"max_event_bytes": 4096})
    for i, c in enumerate(chunks):
        for e in p.feed(c, i):
            assert e.kind in CHUNK_KINDS and e.samples >= 0
    p.eof()
    assert p.outcome()[0] in OUTCOMES


@settings(max_examples=60, deadline=None)
@given(dialect=st.sampled_from(("vllm-omni", "sglang-omni")), cut=st.integers(0, 4000),
       junk=st.binary(max_size=50))
def test_mutated_valid_streams_end_in_an_outcome(dialect, cut, junk):
    good = sse(V_TEXT, v_audio(500), V_USAGE, "[DONE]") if dialect == "vllm-omni" else sse(S_ROLE, s_audio(500), S_FINAL, "[DONE]")
    stream = good[:cut] + junk + good[cut:]
    p, _ = run(dialect, stream, pieces=(13, 200))
    assert p.outcome()[0] in OUTCOMES


@pytest.mark.parametrize("dialect, ctype, enc, expect", [
    ("vllm-omni", "text/event-stream; charset=utf-8", None, None),
    ("vllm-omni", None, "identity", None),  # no declared type says nothing: decoded as usual
    ("sglang-omni", "application/octet-stream", None, None),
    ("pcm", "audio/pcm", None, None),
    ("pcm", "audio/L16; rate=24000", None, None),
    ("vllm-omni", "application/json", None, "server answered application/json (a non-streaming answer), not text/event-stream"),
    ("pcm", "application/problem+json", None, "server answered application/problem+json (a non-streaming answer), not audio/pcm"),
    ("pcm", "text/event-stream", None, "server answered text/event-stream, not audio/pcm"),
    ("sglang-omni", "audio/wav", None, "server answered audio/wav, not text/event-stream"),
    ("vllm-omni", "text/html", None, "server answered text/html, not text/event-stream"),
    ("vllm-omni", "text/event-stream", "GZIP", "gzip-encoded body: the driver does not decode compressed streams"),
    ("pcm", "audio/pcm", "br", "br-encoded body: the driver does not decode compressed streams"),
])
def test_response_headers_say_what_arrived(dialect, ctype, enc, expect):
    from engine_adapters.dialects import get_dialect

    got = get_dialect(dialect).check_response(ctype, enc)
    if expect is None:
        assert got is None
    else:
        assert got is not None and got.detail.startswith(expect) and got.readable == ("encoded" not in expect)
