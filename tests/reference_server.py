"""Helpers for tests that talk to the reference engine over real HTTP.

The engine runs as a subprocess on a port the OS picks (``--port 0``; the port is
read from its ``listening on`` line), so tests never race for a port. Stream
results are collected byte-exactly so tests can check the wire framing itself.
"""

from __future__ import annotations

import base64
import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import soundfile

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PROMPTS = REPO / "data" / "sample_workload" / "en" / "prompt-wavs"


@dataclass
class EngineProcess:
    """A running engine subprocess."""

    proc: subprocess.Popen[str]
    url: str
    dialect: str
    profile: str
    output: list[str] = field(default_factory=list)


def launch_engine(dialect: str, profile: str = "baseline", *extra: str, env: dict[str, str] | None = None
                  ) -> subprocess.Popen[str]:
    """Start ``python -m engine_adapters.reference`` on a free port; does not wait."""
    argv = [sys.executable, "-m", "engine_adapters.reference", "--dialect", dialect, "--profile", profile,
            "--port", "0", *extra]
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)


def wait_ready(proc: subprocess.Popen[str], dialect: str, profile: str, timeout_s: float = 60.0) -> EngineProcess:
    """Read the engine's port from its output, then poll /health until it answers 200."""
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line.rstrip("\n"))
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    url = None
    while url is None:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"engine printed no 'listening on' line in {timeout_s}s: {output}") from None
        if line is None:
            raise RuntimeError(f"engine exited with {proc.wait()}: {output}")
        if line.startswith("listening on "):
            url = line.split()[2]
    engine = EngineProcess(proc=proc, url=url, dialect=dialect, profile=profile, output=output)
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return engine
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"engine exited with {proc.returncode}: {output}")
        time.sleep(0.05)
    stop_engine(engine)
    raise TimeoutError(f"engine not healthy within {timeout_s}s: {output}")


def stop_engine(engine: EngineProcess, grace_s: float = 5.0) -> int:
    """SIGTERM, then SIGKILL after ``grace_s``; returns the exit code."""
    if engine.proc.poll() is None:
        engine.proc.send_signal(signal.SIGTERM)
        try:
            return engine.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            engine.proc.kill()
    return engine.proc.wait()


def prompt_uri(speaker: str) -> str:
    """A sample-workload prompt wav as a data URI."""
    data = (SAMPLE_PROMPTS / f"{speaker}.wav").read_bytes()
    return "data:audio/wav;base64," + base64.b64encode(data).decode()


def chat_body(dialect: str, text: str, speaker: str | None = "spk01", **fields: Any) -> dict[str, Any]:
    """A request body in the shape each dialect's real clients send."""
    uri = prompt_uri(speaker) if speaker else None
    if dialect == "sglang-omni":
        audio: dict[str, Any] = {"format": "wav"}
        if uri:
            audio["ref_audio"] = uri
        body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "audio": audio}
    else:
        content: list[dict[str, Any]] = []
        if uri:
            content.append({"type": "audio_url", "audio_url": {"url": uri}})
        content.append({"type": "text", "text": text})
        body = {"messages": [{"role": "user", "content": content}],
                "chat_template_kwargs": {"use_tts_template": True, "enable_thinking": False}}
    body.update({"model": "reference-tts", "modalities": ["text", "audio"], "stream": True,
                 "stream_options": {"include_usage": True}})
    body.update(fields)
    return body


@dataclass
class StreamResult:
    """Everything observed about one streamed response."""

    status: int
    headers: dict[str, str]
    body: bytes  # raw body bytes as received (SSE text or PCM)
    t_send_ns: int
    arrivals_ns: list[int]  # perf_counter_ns of each read from the socket
    transport_error: str | None = None
    timed_out: bool = False
    events: list[str] = field(default_factory=list)  # SSE `data:` payloads, in order
    event_arrivals_ns: list[int] = field(default_factory=list)

    def json_events(self) -> list[dict[str, Any]]:
        return [json.loads(e) for e in self.events if e != "[DONE]"]

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1] == "[DONE]"


def _parse_sse(body: bytes, arrivals: list[tuple[int, int]]) -> tuple[list[str], list[int]]:
    """Split an SSE body into `data:` payloads; asserts the framing is exactly `data: X\\n\\n`."""
    text = body.decode("utf-8")
    events, stamps = [], []
    pos = 0
    while pos < len(text):
        end = text.find("\n\n", pos)
        assert end != -1, f"unterminated SSE event at byte {pos}: {text[pos:pos + 80]!r}"
        block = text[pos:end]
        assert block.startswith("data: ") and "\n" not in block, f"malformed SSE event: {block[:80]!r}"
        events.append(block[len("data: "):])
        # arrival of the read that delivered this event's first byte
        offset = len(text[:pos].encode())
        stamps.append(next(t for upto, t in arrivals if upto > offset))
        pos = end + 2
    return events, stamps


_shared_client: httpx.Client | None = None
_client_lock = threading.Lock()


def _client() -> httpx.Client:
    """One thread-safe client for all test requests: building a client (and its TLS context) per
    request costs tens of milliseconds of CPU, enough to smear a burst of "simultaneous" requests.
    No keep-alive, so every request gets a fresh connection as a load generator's would."""
    global _shared_client
    with _client_lock:
        if _shared_client is None:
            _shared_client = httpx.Client(limits=httpx.Limits(max_connections=256, max_keepalive_connections=0))
        return _shared_client


def stream(url: str, body: dict[str, Any] | bytes, headers: dict[str, str] | None = None,
           timeout_s: float = 30.0, sse: bool = True) -> StreamResult:
    """POST to /v1/chat/completions and read the whole stream, recording transport failures."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"content-type": "application/json", **(headers or {})}
    received = bytearray()
    arrivals: list[tuple[int, int]] = []  # (bytes received so far, perf_counter_ns)
    result = StreamResult(status=0, headers={}, body=b"", t_send_ns=0, arrivals_ns=[])
    client = _client()
    request = client.build_request("POST", f"{url}/v1/chat/completions", content=content, headers=hdrs,
                                   timeout=httpx.Timeout(timeout_s, connect=5.0))
    result.t_send_ns = time.perf_counter_ns()
    try:
        response = client.send(request, stream=True)
        try:
            result.status = response.status_code
            result.headers = dict(response.headers)
            for piece in response.iter_raw():
                received.extend(piece)
                arrivals.append((len(received), time.perf_counter_ns()))
        finally:
            response.close()
    except httpx.TimeoutException as exc:
        result.timed_out = True
        result.transport_error = type(exc).__name__
    except httpx.TransportError as exc:
        result.transport_error = type(exc).__name__
    result.body = bytes(received)
    result.arrivals_ns = [t for _, t in arrivals]
    if sse and result.status == 200 and result.headers.get("content-type", "").startswith("text/event-stream"):
        complete = result.body[: result.body.rfind(b"\n\n") + 2] if b"\n\n" in result.body else b""
        result.events, result.event_arrivals_ns = _parse_sse(complete, arrivals)
    return result


def decode_wav(data: bytes) -> tuple[np.ndarray, int, str, int]:
    """(int16 samples, sample rate, subtype, channels) of a standalone WAV file."""
    info = soundfile.info(io.BytesIO(data))
    samples, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    return samples, rate, info.subtype, info.channels


def audio_payloads(dialect: str, result: StreamResult) -> list[str]:
    """Base64 audio payloads of an SSE result, in order."""
    out = []
    for event in result.json_events():
        if dialect == "vllm-omni" and event.get("modality") == "audio":
            out.append(event["choices"][0]["delta"]["content"])
        elif dialect == "sglang-omni" and event.get("choices") and "audio" in event["choices"][0]["delta"]:
            out.append(event["choices"][0]["delta"]["audio"]["data"])
    return out


def collect_audio(dialect: str, result: StreamResult, audio_format: str = "wav") -> np.ndarray:
    """All audio of a response as int16 samples (asserting every WAV delta is 24 kHz 16-bit mono)."""
    if dialect == "pcm":
        assert len(result.body) % 2 == 0
        return np.frombuffer(result.body, dtype="<i2").astype(np.int16)
    parts = []
    for payload in audio_payloads(dialect, result):
        raw = base64.b64decode(payload, validate=True)
        if audio_format == "pcm":
            assert not raw.startswith(b"RIFF") and len(raw) % 2 == 0
            parts.append(np.frombuffer(raw, dtype="<i2"))
            continue
        samples, rate, subtype, channels = decode_wav(raw)
        assert (rate, subtype, channels) == (24000, "PCM_16", 1), (rate, subtype, channels)
        parts.append(samples)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


def median_f0(samples: np.ndarray, rate: int = 24000) -> float:
    """Median pitch of speech, measured with the engine's own analysis code."""
    from engine_adapters.reference.voice import analyze

    return analyze(samples, rate).f0_median_hz
