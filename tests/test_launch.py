"""Engine lifecycle with real subprocesses: healthy launch and clean stop, a command that fails
to start, a process that exits early, and a health check that never turns healthy."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import time
from pathlib import Path

import pytest

from console.recording import launch_engine, stop_engine
from engine_adapters.lifecycle import EngineStartError, hash_checkpoints
from data.errors import CampaignError
from data.plan_model import DEFAULT_MODEL, EngineSpec, plan_from_dict
from data.plan_validation import validate_plan_dict
from engine_adapters.specs import launch_argv
from plans_helpers import minimal_plan_doc

HEALTHY_SERVER = r"""
import http.server, os, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status":"healthy"}'
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
print("serving", flush=True)
# a grandchild in the same process group: stop() must reap it too
if os.fork() == 0:
    time.sleep(600); os._exit(0)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _running_in_group(pgid):
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
    return out


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_healthy_launch_and_stop_leaves_no_children(store, tmp_path):
    port = _port()
    ck = tmp_path / "ckpt"
    ck.mkdir()
    (ck / "model.safetensors").write_bytes(b"weights")
    (ck / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    cfg = tmp_path / "engine.yaml"
    cfg.write_text("a: 1\n")
    spec = EngineSpec("toy", "peer", "pcm", argv=(sys.executable, "-c", HEALTHY_SERVER, str(port), "--seed=7"), port=port,
                      health_timeout_s=20, revision="abc123", config_path=str(cfg), checkpoint_paths=(str(ck),),
                      env={"TOY_ENV": "1"})
    eng = launch_engine(store, spec, log_dir=tmp_path / "logs", checkpoint_cache=tmp_path / "cache.json")
    pgid = eng.proc.pid
    row = store.query("SELECT * FROM engine_launches")[0]
    assert row["status"] == "ready" and row["ready_ns"] > row["started_ns"] and row["revision"] == "abc123"
    assert json.loads(row["argv_json"])[0] == sys.executable and json.loads(row["env_json"]) == {"TOY_ENV": "sha256:" + hashlib.sha256(b"1").hexdigest()}
    assert json.loads(row["checkpoint_sha256_json"]) == {
        str((ck / "config.json").resolve()): hashlib.sha256(b'{"torch_dtype": "bfloat16"}').hexdigest(),
        str((ck / "model.safetensors").resolve()): hashlib.sha256(b"weights").hexdigest()}
    # what the launch sets for sampling and precision (engine_adapters/launch_settings.py)
    assert json.loads(row["settings_json"]) == {"argv.seed": "7", "checkpoint.torch_dtype": "bfloat16"}
    assert row["config_sha256"] and len(row["config_sha256"]) == 64
    time.sleep(0.3)
    assert len(_running_in_group(pgid)) == 3  # orphan guard + server + forked grandchild
    stop_engine(store, eng, grace_s=5)
    row = store.query("SELECT * FROM engine_launches")[0]
    assert row["status"] == "stopped" and row["stopped_ns"] and "serving" in row["log_tail"]
    time.sleep(0.3)
    assert _running_in_group(pgid) == []  # the whole group (grandchild included) is gone or a reaped-later zombie


def test_command_that_fails_to_start_is_recorded(store, tmp_path):
    spec = EngineSpec("ghost", "peer", "pcm", argv=("/nonexistent/engine-binary", "--serve"), port=_port())
    with pytest.raises(EngineStartError, match="cannot start '/nonexistent/engine-binary'"):
        launch_engine(store, spec, log_dir=tmp_path)
    row = store.query("SELECT * FROM engine_launches")[0]
    assert row["status"] == "startup_failed" and "No such file" in row["failure_reason"]


@pytest.mark.parametrize("argv0, reason", [("not-an-engine-anywhere", "not found on PATH"),
                                            ("{tmp}/engine.sh", "Permission denied (not executable)")])
def test_unrunnable_command_is_refused_before_launch(store, tmp_path, argv0, reason):
    script = tmp_path / "engine.sh"
    script.write_text("#!/bin/sh\nexit 0\n")  # no exec bit
    spec = EngineSpec("nope", "peer", "pcm", argv=(argv0.format(tmp=tmp_path), "--serve"), port=_port())
    with pytest.raises(EngineStartError, match=re.escape(reason)):
        launch_engine(store, spec, log_dir=tmp_path)
    row = store.query("SELECT * FROM engine_launches")[0]
    assert row["status"] == "startup_failed" and row["pid"] is None


CONSOLE = r"""
import sys
from pathlib import Path
from data.plan_model import EngineSpec
from engine_adapters.lifecycle import EngineProcess
spec = EngineSpec("sleeper", "peer", "pcm", argv=(sys.executable, "-c", "import time; time.sleep(600)"), port=1)
eng = EngineProcess(spec, Path(sys.argv[1])).start()
print(eng.proc.pid, flush=True)
sys.stdin.read()  # until killed
"""


def test_engine_does_not_outlive_a_killed_console(tmp_path):
    """SIGKILL the process that launched an engine: the orphan guard stops the engine's group."""
    import subprocess

    console = subprocess.Popen([sys.executable, "-c", CONSOLE, str(tmp_path)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    guard = int(console.stdout.readline())
    deadline = time.monotonic() + 10
    while len(_running_in_group(guard)) < 2 and time.monotonic() < deadline:  # guard + engine
        time.sleep(0.05)
    assert len(_running_in_group(guard)) == 2
    console.kill()
    console.wait(10)
    deadline = time.monotonic() + 10
    while _running_in_group(guard) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running_in_group(guard) == []
    log = next(tmp_path.glob("sleeper-*.log")).read_text()
    assert "console" in log and "is gone; stopping the engine" in log


def test_process_that_exits_early_has_its_log_tail(store, tmp_path):
    code = "import sys; print('loading weights'); print('CUDA out of memory', file=sys.stderr); sys.exit(3)"
    spec = EngineSpec("oom", "peer", "pcm", argv=(sys.executable, "-c", code), port=_port(), health_timeout_s=20)
    with pytest.raises(EngineStartError, match="exited with code 3"):
        launch_engine(store, spec, log_dir=tmp_path)
    row = store.query("SELECT * FROM engine_launches")[0]
    assert row["status"] == "startup_failed" and row["exit_code"] == 3
    assert "CUDA out of memory" in row["log_tail"] and "loading weights" in row["log_tail"]


@pytest.mark.slow  # 2 s in a loaded `make check`
def test_health_that_never_turns_healthy_times_out(store, tmp_path):
    port = _port()  # http.server answers 404 on /health
    spec = EngineSpec("deaf", "peer", "pcm", argv=(sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)),
                      port=port, health_timeout_s=2)
    t0 = time.monotonic()
    with pytest.raises(EngineStartError, match=r"not healthy within 2 s \(last: HTTP 404\)"):
        launch_engine(store, spec, log_dir=tmp_path)
    assert time.monotonic() - t0 < 15  # the 2 s timeout, not the 600 s default; room for a loaded box
    row = store.query("SELECT * FROM engine_launches")[0]
    assert row["status"] == "startup_failed" and row["exit_code"] is not None and not _alive(row["pid"])


def test_checkpoint_hash_cache(tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc")
    cache = tmp_path / "c.json"
    h = hash_checkpoints([str(f)], cache)
    assert h == {str(f.resolve()): "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}
    # a cached entry is reused while path+size+mtime match ...
    data = json.loads(cache.read_text())
    key = next(iter(data))
    data[key] = "cached"
    cache.write_text(json.dumps(data))
    assert hash_checkpoints([str(f)], cache)[str(f.resolve())] == "cached"
    # ... and recomputed when the file changes
    f.write_bytes(b"abcd")
    assert hash_checkpoints([str(f)], cache)[str(f.resolve())] != "cached"
    with pytest.raises(CampaignError, match="no such file"):
        hash_checkpoints([str(tmp_path / "missing")], cache)


def test_adapter_default_argv_and_engine_entry_errors():
    """An engine entry is parsed once, with the plan (data/plan_model.py); the adapter only supplies the
    default command line when the entry has no argv."""
    def engines(*entries):
        doc = minimal_plan_doc(engines=list(entries), model={"id": "m/x"})
        validate_plan_dict(doc, "p.json")
        return plan_from_dict(doc).engines

    s, v, g = engines({"name": "ref", "adapter": "reference", "dialect": "sglang-omni", "profile": "fast", "port": 9000},
                      {"name": "v", "adapter": "vllm_omni", "dialect": "vllm-omni", "port": 8000},
                      {"name": "g", "adapter": "sglang_omni", "dialect": "sglang-omni", "port": 8001})
    argv = launch_argv(s)
    assert argv[:3] == [sys.executable, "-m", "engine_adapters.reference"] and argv[argv.index("--profile") + 1] == "fast"
    assert launch_argv(v)[:5] == ["vllm", "serve", "m/x", "--omni", "--trust-remote-code"]
    assert launch_argv(g)[:2] == ["sgl-omni", "serve"] and launch_argv(g)[3] == "m/x"
    assert launch_argv(EngineSpec("g", "sglang_omni", "sglang-omni"))[3] == DEFAULT_MODEL  # a spec built outside a plan
    with pytest.raises(CampaignError, match="peer adapter needs an explicit 'argv'"):
        launch_argv(engines({"name": "p", "adapter": "peer", "dialect": "pcm", "port": 1})[0])
    with pytest.raises(CampaignError, match=r"^p\.json: engines\[0\]\.argv: 'vllm serve x' is a shell string; argv is a list of arguments, run "
                       r"without a shell, e\.g\. \['vllm', 'serve', 'x'\]$"):
        engines({"name": "p", "adapter": "peer", "dialect": "pcm", "port": 1, "argv": "vllm serve x"})
    with pytest.raises(CampaignError, match=r"^p\.json: engines\[0\]\.dialect: 'grpc' is not one of"):
        engines({"name": "p", "adapter": "peer", "dialect": "grpc", "port": 1})


# -- measuring the right engine (docs/engines.md) ----------------------------------------------
def test_launch_on_a_taken_port_is_refused_naming_the_holder(store, tmp_path):
    """A server already listening on the engine's port: the launch is refused before anything is
    spawned, in one line naming the port and the holder; nothing is stored as ready."""
    from engine_helpers import start_stale_server

    port = _port()
    stale = start_stale_server(port)
    try:
        spec = EngineSpec("toy", "peer", "pcm", argv=(sys.executable, "-c", HEALTHY_SERVER, str(port)), port=port,
                          health_timeout_s=20)
        with pytest.raises(EngineStartError) as err:
            launch_engine(store, spec, log_dir=tmp_path)
        msg = str(err.value)
        assert "\n" not in msg and f"port {port} on 127.0.0.1 is already in use" in msg
        assert f"held by pid {stale.pid} (" in msg and "-c" in msg
        row = store.query("SELECT * FROM engine_launches")[0]
        assert row["status"] == "startup_failed" and row["pid"] is None and f"pid {stale.pid}" in row["failure_reason"]
    finally:
        stale.kill()
        stale.wait()


def test_health_answered_by_a_process_outside_the_launch_is_refused(store, tmp_path):
    """The port was free at launch, then a process that is not the launched engine (detached, not
    in its process tree) answers /health: that 200 is refused, naming the holder."""
    from engine_helpers import STALE_SERVER

    port = _port()
    pidfile = tmp_path / "foreign.pid"
    detach = ("import os, subprocess, sys, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              f"    p = subprocess.Popen([sys.executable, '-c', {STALE_SERVER!r}, '{port}'], stdout=subprocess.DEVNULL)\n"
              f"    open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
              "    os._exit(0)\n"
              "time.sleep(600)\n")
    spec = EngineSpec("impostor", "peer", "pcm", argv=(sys.executable, "-c", detach), port=port, health_timeout_s=20)
    try:
        with pytest.raises(EngineStartError, match=rf"answered 200, but port {port} is held by pid \d+ .* not by the launched engine"):
            launch_engine(store, spec, log_dir=tmp_path)
        foreign = int(pidfile.read_text())
        row = store.query("SELECT * FROM engine_launches")[0]
        assert row["status"] == "startup_failed" and f"pid {foreign}" in row["failure_reason"]
        assert row["ready_ns"] is None and not _alive(row["pid"])
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), 9)


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_reference_adapter_health_must_carry_this_launch_id(store, tmp_path):
    """The reference engine reports the launch id it was given; a reference launch whose /health
    reports none, or another launch's, is not this launch."""
    port = _port()
    silent = EngineSpec("ref", "reference", "pcm", argv=(sys.executable, "-c", HEALTHY_SERVER, str(port)), port=port,
                        health_timeout_s=20)
    with pytest.raises(EngineStartError, match=r"answered 200 for launch \(none reported\), not for this launch"):
        launch_engine(store, silent, log_dir=tmp_path)
    port = _port()
    other = EngineSpec("ref", "reference", "pcm", port=port, health_timeout_s=60, argv=(
        sys.executable, "-m", "engine_adapters.reference", "--dialect", "pcm", "--port", str(port),
        "--launch-id", "stale0launch"))
    with pytest.raises(EngineStartError, match="answered 200 for launch stale0launch, not for this launch"):
        launch_engine(store, other, log_dir=tmp_path)
    # the same engine given this launch's id (the console sets it in the environment) is ready
    port = _port()
    own = EngineSpec("ref", "reference", "pcm", port=port, health_timeout_s=60, argv=(
        sys.executable, "-m", "engine_adapters.reference", "--dialect", "pcm", "--port", str(port)))
    eng = launch_engine(store, own, log_dir=tmp_path)
    try:
        import httpx

        r = httpx.get(f"http://127.0.0.1:{port}/health")
        assert r.json()["launch_id"] == eng.launch_id == r.headers["x-engine-launch-id"]
    finally:
        stop_engine(store, eng, grace_s=5)
    assert [x["status"] for x in store.query("SELECT status FROM engine_launches ORDER BY started_at")] == [
        "startup_failed", "startup_failed", "stopped"]


def test_engine_killed_by_a_signal_is_reported_as_that_signal(store, tmp_path):
    """SIGKILL the engine under its orphan guard: the guard dies the same way (no traceback, not
    'exit code 1'), and the launch is stored crashed with the signal as its cause."""
    from engine_helpers import children

    port = _port()
    spec = EngineSpec("victim", "peer", "pcm", argv=(sys.executable, "-c", HEALTHY_SERVER, str(port)), port=port,
                      health_timeout_s=20)
    eng = launch_engine(store, spec, log_dir=tmp_path)
    assert eng.exit_cause() is None
    engine_pid = min(children(eng.proc.pid))  # the server (its forked grandchild is younger)
    os.kill(engine_pid, 9)
    assert eng.exit_cause(wait_s=10) == "engine exited: killed by SIGKILL"
    assert eng.proc.returncode == -9
    stop_engine(store, eng, grace_s=5)
    row = store.query("SELECT * FROM engine_launches")[0]
    assert row["status"] == "crashed" and row["exit_code"] == -9
    assert row["failure_reason"] == "engine exited while serving: killed by SIGKILL"
    log = eng.log_path.read_text()
    assert "Traceback" not in log and "orphan_guard: the engine was killed by SIGKILL" in log
