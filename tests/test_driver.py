"""The load driver over real HTTP against a scripted SSE server (exact fault bytes), through
`record_run` into a real DuckDB store."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import struct
import threading

import pytest
import soundfile
from plans_helpers import free_port
from aiohttp import web

from console.recording import record_run
from data.audit import verify_chain
from engine_adapters.dialects.wav import encode_wav
from engine_adapters.driver import DriveSpec, RequestSpec, drive_in_process
from stats.metrics import run_metrics


def _wav(n):
    return encode_wav(struct.pack(f"<{n}h", *([500] * n)), 24_000)


def _frame(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def _audio(n):
    return _frame({"modality": "audio", "choices": [{"delta": {"content": base64.b64encode(_wav(n)).decode()}}]})


class Scripted:
    """A vLLM-Omni-shaped server whose behaviour is chosen by the request text ("case:NAME")."""

    def __init__(self):
        self.inflight = 0
        self.max_inflight = 0
        self.requests = 0
        self.loop = asyncio.new_event_loop()
        self.port = free_port()
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self.thread.start()
        started.wait(10)

    def _serve(self, started):
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        started.set()
        self.loop.run_forever()

    async def handle(self, request):
        body = await request.json()
        text = body["messages"][0]["content"][-1]["text"]
        case = text.split(":", 1)[1]
        self.requests += 1
        if case == "counted":  # in flight from arrival until just before the end marker
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        if case == "http500":
            return web.json_response({"detail": "engine overloaded"}, status=500)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_frame({"modality": "text", "choices": [{"delta": {"content": "hi"}}]}))
        if case == "noaudio":
            await resp.write(_frame(b"[DONE]"))
            return resp
        for _ in range(3):
            await asyncio.sleep(0.02)
            await resp.write(_audio(2400))
        if case == "error":
            await resp.write(_frame({"error": {"message": "boom", "type": "InternalError", "code": 500}}))
        elif case == "drop":
            request.transport.abort()
            return resp
        elif case == "stall":
            await asyncio.sleep(5)
        elif case == "badwav":
            await resp.write(_frame({"modality": "audio", "choices": [{"delta": {"content": base64.b64encode(_wav(100)[:-10]).decode()}}]}))
        if case == "counted":
            self.inflight -= 1
        if case != "nodone":
            await resp.write(_frame(b"[DONE]"))
        await resp.write_eof()
        return resp

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)



@pytest.fixture(scope="module")
def server():
    s = Scripted()
    yield s
    s.close()


@pytest.fixture
def prompt(tmp_path):
    p = tmp_path / "prompt.wav"
    p.write_bytes(_wav(2400))
    return p


EXPECT = {"ok": "ok", "counted": "ok", "error": "in_stream_error", "drop": "transport", "http500": "http_status",
          "stall": "timeout", "nodone": "no_end_marker", "badwav": "decode_error", "noaudio": "no_audio"}


@pytest.mark.parametrize("client", ["stamped", "aiohttp", "httpx"])
@pytest.mark.slow  # 2 s in a loaded `make check`
def test_every_fault_in_its_class_and_nothing_lost(server, prompt, tmp_path, store, client):
    cases = ["ok", "error", "ok", "drop", "http500", "ok", "stall", "nodone", "badwav", "noaudio", "ok", "ok"]
    reqs = [RequestSpec(f"spk-{i}", f"case:{c}", prompt, "p") for i, c in enumerate(cases)]
    spec = DriveSpec(run_id=f"run-{client}", url=f"http://127.0.0.1:{server.port}", dialect="vllm-omni",
                     concurrency=4, requests=reqs, warmup_requests=2, timeout_s=1.0, artifacts_dir=tmp_path / "art",
                     sampling={"seed": 42, "temperature": 0.0}, request_options={"client": client})
    progress = []
    run_id = record_run(store, spec, engine="scripted", kind="exploratory", telemetry=False,
                        on_progress=lambda d, t: progress.append((d, t)))
    rows = store.query("SELECT * FROM requests WHERE run_id = ? ORDER BY request_index", [run_id])
    assert len(rows) == len(cases) + 2  # requests sent = requests stored (2 warmups first)
    assert [r["is_warmup"] for r in rows[:2]] == [True, True]
    got = {r["utt_id"]: r["outcome"] for r in rows[2:]}
    assert got == {f"spk-{i}": EXPECT[c] for i, c in enumerate(cases)}
    by = {r["utt_id"]: r for r in rows[2:]}
    assert "engine overloaded" in by["spk-4"]["error_detail"] and by["spk-4"]["http_status"] == 500
    assert "boom" in by["spk-1"]["error_detail"]
    ok = [r for r in rows if r["outcome"] == "ok"]
    for r in ok:
        assert r["audio_samples"] == 7200 and r["audio_chunks"] == 3 and r["sample_rate"] == 24_000
        assert r["t_send_ns"] < r["t_first_byte_ns"] <= r["t_first_audio_ns"] <= r["t_last_audio_ns"] <= r["t_end_ns"]
        saved = (tmp_path / "art" / r["audio_path"]).read_bytes()  # FLAC (engine_adapters/driver/decode.py)
        samples, rate = soundfile.read(io.BytesIO(saved), dtype="int16")
        assert hashlib.sha256(saved).hexdigest() == r["audio_sha256"] and len(samples) == 7200 and rate == 24_000
        assert (samples == 500).all()  # the samples the engine sent, exactly
    assert store.scalar("SELECT count(*) FROM audio_files WHERE run_id = ?", [run_id]) == \
        store.scalar("SELECT count(*) FROM requests WHERE run_id = ? AND audio_samples > 0", [run_id])
    nchunks = store.scalar("SELECT sum(events) FROM requests WHERE run_id = ?", [run_id])
    assert store.scalar("SELECT count(*) FROM chunks WHERE run_id = ?", [run_id]) == nchunks
    run = store.query("SELECT * FROM runs WHERE run_id = ?", [run_id])[0]
    assert run["status"] == "complete" and run["loop_impl"].startswith("uvloop")
    assert run["client_impl"].startswith(client)
    overhead = json.loads(run["driver_overhead_json"])
    assert overhead["send_lag"]["n"] > 0 and overhead["loop_lag"]["n"] > 0
    assert progress[-1] == (len(cases) + 2, len(cases) + 2)
    assert verify_chain(store).ok
    m = run_metrics(store, run_id)
    assert m.completed == 5 and m.failed == 7 and m.warmup_requests == 2
    assert m.audio_s_ok == pytest.approx(5 * 0.3)


def test_ctrl_c_mid_run_stores_what_arrived_and_marks_the_run_incomplete(server, prompt, tmp_path, store):
    """Ctrl-C during record_run (here: raised where the main thread waits, in its progress
    callback): the driver cancels, every record that arrived is stored, the run is 'incomplete'
    and run_ended says how many requests were stored; then KeyboardInterrupt goes on up."""
    reqs = [RequestSpec(f"spk-{i}", "case:ok", prompt, "p") for i in range(40)]
    spec = DriveSpec(run_id="run-interrupted", url=f"http://127.0.0.1:{server.port}", dialect="vllm-omni",
                     concurrency=1, requests=reqs, timeout_s=5.0, artifacts_dir=tmp_path / "art")
    seen = []

    def ctrl_c(done, total):
        seen.append(done)
        if len(seen) == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        record_run(store, spec, engine="scripted", kind="exploratory", telemetry=False, on_progress=ctrl_c)
    run = store.query("SELECT * FROM runs WHERE run_id = 'run-interrupted'")[0]
    stored = store.scalar("SELECT count(*) FROM requests WHERE run_id = 'run-interrupted'")
    assert run["status"] == "incomplete" and run["ended_at"] is None
    assert 1 <= stored < 40 and seen[-1] == stored  # every batch that arrived was stored and counted
    ended = store.query("SELECT payload_json FROM audit_events WHERE kind = 'run_ended' AND subject = 'run-interrupted'")
    payload = json.loads(ended[0]["payload_json"])
    assert payload["status"] == "incomplete" and payload["requests_stored"] == stored
    assert payload["digest"]["tables"]["requests"]["rows"] == stored
    assert verify_chain(store).ok


def test_closed_loop_keeps_exactly_c_in_flight(server, prompt, tmp_path):
    before = server.requests
    server.max_inflight = 0
    reqs = [RequestSpec(f"s-{i}", "case:counted", prompt) for i in range(12)]
    out = []
    summary = drive_in_process(DriveSpec("cl", f"http://127.0.0.1:{server.port}", "vllm-omni", 3, reqs,
                                         artifacts_dir=tmp_path), out.extend)
    assert server.requests - before == 12 and server.max_inflight == 3
    assert summary.sent == 12 and not summary.cancelled


def test_cancellation_records_in_flight_requests(server, prompt, tmp_path):
    reqs = [RequestSpec(f"s-{i}", "case:stall", prompt) for i in range(6)]
    out: list = []
    flag = {"at": None}
    import time

    def cancel():
        flag["at"] = flag["at"] or time.monotonic()
        return time.monotonic() - flag["at"] > 0.5

    summary = drive_in_process(DriveSpec("cx", f"http://127.0.0.1:{server.port}", "vllm-omni", 2, reqs,
                                         timeout_s=30, artifacts_dir=tmp_path), out.extend, cancel)
    recs = [r for r in out if type(r).__name__ == "RequestRecord"]
    assert summary.cancelled and summary.sent == 2 == len(recs)
    assert {r.outcome for r in recs} == {"cancelled"}


def test_connection_refused_is_transport(prompt, tmp_path):
    out: list = []
    drive_in_process(DriveSpec("cr", f"http://127.0.0.1:{free_port()}", "sglang-omni", 1,
                               [RequestSpec("a-b", "x", prompt)], artifacts_dir=tmp_path), out.extend)
    (rec,) = [r for r in out if type(r).__name__ == "RequestRecord"]
    assert rec.outcome == "transport" and "Connect" in rec.error_detail


def test_probe_command_stores_an_exploratory_run(server, prompt, tmp_path, capsys):
    from console.cli import main

    root = tmp_path / "wl"
    (root / "en").mkdir(parents=True)
    (root / "en" / "p.wav").write_bytes(prompt.read_bytes())
    (root / "en" / "meta.lst").write_text("s1-a|prompt one|p.wav|case:ok\ns1-b|prompt two|p.wav|case:error\n")
    db, out_json = tmp_path / "c.duckdb", tmp_path / "m.json"
    rc = main(["probe", "--url", f"http://127.0.0.1:{server.port}", "--dialect", "vllm-omni", "-c", "2", "-n", "4",
               "--workload", str(root), "--db", str(db), "--json", str(out_json), "--artifacts", str(tmp_path / "a"),
               "--no-telemetry"])
    text = capsys.readouterr().out
    assert rc == 1  # two in-stream errors among four requests
    assert "TTFA p50" in text and "failed: in_stream_error" in text and "uvloop" in text
    doc = json.loads(out_json.read_text())
    # how long the host kept the driver's loop off a CPU (docs/timing.md), as stored, to the microsecond
    waited = doc["driver"]["runqueue"]  # null on a kernel without schedstat
    assert (f"driver off-CPU {waited['wait_ms']:.3f} ms" if waited else "driver off-CPU -") in text
    stolen = doc["driver"]["host_steal"]  # the hypervisor's steal over the drive; null off Linux
    assert (f"host steal {stolen['ms']:.0f} ms" if stolen else "host steal -") in " ".join(text.split())  # as wrapped
    assert doc["metrics"]["completed"] == 2 and doc["metrics"]["failures_by_class"] == {"in_stream_error": 2}
    from data.store import Store

    with Store(db) as s:
        assert s.scalar("SELECT kind FROM runs") == "exploratory"
        assert s.scalar("SELECT count(*) FROM requests") == 4
        # the probed configuration is a candidate, and the probe an attempt of it (issue 28)
        cand = s.query("SELECT config_sha256, name, origin, status FROM candidates")
        assert [(c["name"], c["origin"], c["status"]) for c in cand] == [("probe", "probe", "measured")]
        att = s.query("SELECT plan_hash, engine, outcome, config_sha256, run_ids_json FROM attempts")
        assert [(a["engine"], a["outcome"], a["config_sha256"]) for a in att] == [("probe", "measured", cand[0]["config_sha256"])]
        assert json.loads(att[0]["run_ids_json"]) == [s.scalar("SELECT run_id FROM runs")] and att[0]["plan_hash"] is None
    assert f"candidate probe ({cand[0]['config_sha256'][:12]})" in text
    assert main(["probe", "--url", "localhost:1", "--dialect", "pcm", "--db", str(db)]) == 2
    assert "expected http://HOST:PORT" in capsys.readouterr().err


@pytest.mark.parametrize("client", ["stamped", "aiohttp", "httpx"])
def test_driver_process_leaves_no_pending_tasks(server, prompt, tmp_path, capfd, client):
    """The driver process end to end (batches over its pipe) with early exits (timeout, dropped
    connection, HTTP error, end marker): every record arrives, the child exits 0, and its stderr
    is clean. The reference-engine tests are the ones that caught the unclosed-stream warning."""
    from engine_adapters.driver import DriverProcess

    cases = ["stall", "drop", "http500"] + ["ok"] * 13  # the run ends on end-marker exits, 8 at a time
    reqs = [RequestSpec(f"spk-{i}", f"case:{c}", prompt) for i, c in enumerate(cases)]
    spec = DriveSpec(f"clean-{client}", f"http://127.0.0.1:{server.port}", "vllm-omni", 8, reqs, timeout_s=0.5,
                     artifacts_dir=tmp_path, request_options={"client": client})
    proc = DriverProcess(spec).start()
    records = [r for batch in proc.batches() for r in batch]
    proc.join()
    assert proc.summary is not None and proc.fatal is None and proc._proc.exitcode == 0
    outcomes = sorted(r.outcome for r in records if type(r).__name__ == "RequestRecord")
    assert outcomes == sorted(EXPECT[c] for c in cases)
    err = capfd.readouterr().err
    assert "Task was destroyed" not in err and "Traceback" not in err, err[-2000:]


def test_a_prewarmed_driver_process_runs_the_next_drive(server, prompt, tmp_path, capfd):
    """prewarm(): the next DriverProcess uses the process already started (it is taken: the one
    after spawns its own), records the same outcomes, and an unused warm one exits when discarded."""
    from engine_adapters import driver

    driver.prewarm()
    warm = driver._WARM[0]
    cases = ["ok", "http500", "ok"]
    spec = DriveSpec("warm", f"http://127.0.0.1:{server.port}", "vllm-omni", 2,
                     [RequestSpec(f"spk-{i}", f"case:{c}", prompt) for i, c in enumerate(cases)], artifacts_dir=tmp_path)
    proc = driver.DriverProcess(spec).start()
    assert proc._proc is warm.proc and not driver._WARM
    records = [r for batch in proc.batches() for r in batch]
    proc.join()
    assert proc.summary is not None and proc.fatal is None and proc._proc.exitcode == 0
    assert sorted(r.outcome for r in records if type(r).__name__ == "RequestRecord") == sorted(EXPECT[c] for c in cases)
    driver.prewarm()
    unused = driver._WARM[0].proc
    driver.discard_warm()
    assert not driver._WARM and unused.exitcode == 0
    assert "Traceback" not in capfd.readouterr().err


# -- say what arrived (docs/engines.md) ---------------------------------------------------------
def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class RawScripted:
    """A raw TCP server on its own thread that answers each request with exact bytes, chosen by
    the request text ("case:NAME"): headers and framings no HTTP library would write by itself.
    One response per connection (announced with `connection: close`)."""

    HEAD = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: %s\r\n%stransfer-encoding: chunked\r\n\r\n"

    def __init__(self):
        import socketserver

        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                outer.answer(self.request)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def _read_request(sock) -> bytes:
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += sock.recv(65536)
        head, _, body = buf.partition(b"\r\n\r\n")
        length = int(next(l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")))
        while len(body) < length:
            body += sock.recv(65536)
        return body

    def answer(self, sock) -> None:
        import gzip

        case = json.loads(self._read_request(sock))["messages"][0]["content"][-1]["text"].split(":", 1)[1]
        events = _frame({"modality": "text", "choices": [{"delta": {"content": "hi"}}]}) + _audio(2400)
        if case == "json":  # the engine ignored "stream": true and answered in one piece
            body = json.dumps({"id": "x", "choices": [{"message": {"content": "hi"}}]}).encode()
            sock.sendall(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        elif case == "json_error":
            body = json.dumps({"error": {"message": "streaming is not supported", "type": "BadRequest"}}).encode()
            sock.sendall(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: application/json; charset=utf-8\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
        elif case == "gzip":  # a compressing proxy in front of the engine
            sock.sendall(self.HEAD % (b"text/event-stream", b"content-encoding: gzip\r\n")
                         + _chunk(gzip.compress(events + _frame(b"[DONE]"))) + b"0\r\n\r\n")
        elif case == "cut":  # events, then a clean end of the body without [DONE] (SGLang-Omni's way)
            sock.sendall(self.HEAD % (b"text/event-stream", b"") + _chunk(events) + b"0\r\n\r\n")
        elif case == "drop":  # events, then the connection closes inside the chunked body
            sock.sendall(self.HEAD % (b"text/event-stream", b"") + _chunk(events))
        else:
            sock.sendall(self.HEAD % (b"text/event-stream", b"") + _chunk(events + _frame(b"[DONE]")) + b"0\r\n\r\n")
        sock.close()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def raw_server():
    s = RawScripted()
    yield s
    s.close()


ARRIVED = {
    "ok": ("ok", None),
    "json": ("decode_error", "server answered application/json (a non-streaming answer), not text/event-stream"),
    "json_error": ("decode_error", "server answered application/json (a non-streaming answer), not text/event-stream: "
                                   "streaming is not supported"),
    "gzip": ("decode_error", "gzip-encoded body: the driver does not decode compressed streams "
                             "(it asks for accept-encoding: identity)"),
    "cut": ("no_end_marker", "server closed the stream mid-response: 2 event(s) arrived, then the body ended "
                             "without the end marker"),
    "drop": ("transport", "server closed the stream mid-response: 2 event(s) arrived, then the connection ended after "),
}


@pytest.mark.parametrize("client", ["stamped", "aiohttp", "httpx"])
@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_what_arrived_is_said_from_the_response_headers(raw_server, prompt, tmp_path, client):
    """A 200 that is a non-streaming JSON answer or a gzip-encoded body is reported as what it is
    (not as a missing end marker); a stream cut after events keeps its class and says the server
    closed it mid-response. Same for every transport."""
    cases = list(ARRIVED)
    reqs = [RequestSpec(f"spk-{i}", f"case:{c}", prompt) for i, c in enumerate(cases)]
    out: list = []
    drive_in_process(DriveSpec(f"arrived-{client}", f"http://127.0.0.1:{raw_server.port}", "vllm-omni", 2, reqs,
                               timeout_s=5, artifacts_dir=tmp_path, request_options={"client": client}), out.extend)
    recs = {r.utt_id: r for r in out if type(r).__name__ == "RequestRecord"}
    for i, case in enumerate(cases):
        rec = recs[f"spk-{i}"]
        cls, detail = ARRIVED[case]
        assert rec.outcome == cls, (case, rec.outcome, rec.error_detail)
        assert rec.http_status == 200
        if detail is None:
            assert rec.error_detail is None and rec.audio_samples == 2400
        else:
            assert rec.error_detail.startswith(detail), (case, rec.error_detail)
    assert recs["spk-1"].bytes_received == 0 and recs["spk-1"].t_first_audio_ns is None  # nothing decoded as audio
