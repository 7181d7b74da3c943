"""The documented path (docs/cluster.md, "Starting Ray", one host): a head started with
`ray start --head ... --block` as its own process, then `campaign run PLAN --cluster auto` with
RAY_ADDRESS naming it, as a user types them. tests/test_cluster.py covers the cluster runner with
an in-process `ray.init`; this one covers what users are told to run.

The head listens on the loopback address only (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 with
--node-ip-address 127.0.0.1), offers two fake GPUs, and requires a token (RAY_AUTH_MODE=token, a
token file made here). It is stopped by its process group, and the test checks that none of its
processes (GCS, raylet, workers) nor any engine is left."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from data.audit import verify_chain
from data.store import Store
from plans_helpers import free_port, make_workload, plan_dict, write_json

pytest.importorskip("ray")  # the 'cluster' extra

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[1]
FAKE_GPU = "Fake-GPU"


def _processes_with(text: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live (not zombie) process whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            found.append((int(entry.name), cmd[:160]))
    return found


@pytest.fixture
def head(tmp_path):
    """`ray start --head --block` on 127.0.0.1 with a token; yields (address, the console's env)."""
    # Ray puts unix sockets under --temp-dir: a pytest tmp_path is too long for a socket path
    # (108 bytes), so the temp dir is a short one, removed afterwards
    temp = Path(tempfile.mkdtemp(prefix="omni-ray-"))
    token = tmp_path / "ray-token"
    token.write_text(secrets.token_hex(32))
    port = free_port()
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env = {**os.environ, **auth, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           # the head's workers import this checkout: every node runs the same commit (docs/cluster.md)
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    log = tmp_path / "head.log"
    argv = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--node-ip-address", "127.0.0.1",
            "--port", str(port), "--num-cpus", "2", "--num-gpus", "2",
            "--resources", json.dumps({f"accelerator_type:{FAKE_GPU}": 2}), "--temp-dir", str(temp),
            "--include-dashboard", "false", "--disable-usage-stats", "--block"]
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log.read_text():
            assert proc.poll() is None, f"ray start exited with {proc.returncode}: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no head within 120 s: {log.read_text()[-3000:]}"
            time.sleep(0.2)
        console_env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
        console_env.update(auth, RAY_ADDRESS=f"127.0.0.1:{port}", PYTHONPATH=env["PYTHONPATH"])
        yield f"127.0.0.1:{port}", console_env, temp
    finally:
        # by its process group: `ray start` and the GCS, raylet and workers it started (SIGTERM
        # makes `ray start --block` stop them one by one, tens of seconds on a loaded box)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _processes_with(str(temp)) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _processes_with(str(temp))
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"processes of the Ray head left running: {left}"


def _plan(tmp_path: Path) -> Path:
    doc = plan_dict(make_workload(tmp_path / "wl", short=True), profiles=("baseline",), concurrencies=(1, 2),
                    requests=2, repeats=1)
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    doc["cluster"] = {"gpu_name": FAKE_GPU, "gpus": 2}
    return write_json(tmp_path / "plan.json", doc)


def _campaign(env: dict[str, str], *args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "console.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.mark.slow  # a Ray head
def test_ray_start_head_then_run_cluster_auto(head, tmp_path):
    address, env, temp = head
    plan, db = _plan(tmp_path), tmp_path / "c.duckdb"
    assert _campaign(env, "plan", "freeze", plan, "--db", db, cwd=tmp_path).returncode == 0

    # without the head's token: one line that says what to check, exit 2, nothing run
    no_token = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
    r = _campaign(no_token, "run", plan, "--cluster", "auto", "--db", db, cwd=tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("campaign:")]
    assert r.returncode == 2 and len(lines) == 1, r.stdout + r.stderr
    assert f"cannot connect to Ray: Failed to connect to Ray cluster at {address}" in lines[0]
    assert "RAY_AUTH_MODE=token" in lines[0] and "docs/cluster.md" in lines[0]

    r = _campaign(env, "run", plan, "--cluster", "auto", "--db", db, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{FAKE_GPU} x 2 on 1 node(s)" in r.stdout and "2 run(s) recorded" in r.stdout, r.stdout
    with Store(db) as s:
        runs = s.query("SELECT run_id, status, node_id, gpu_name FROM runs ORDER BY concurrency")
        counts = s.query("SELECT run_id, count(*) AS n, count(*) FILTER (WHERE outcome = 'ok') AS ok "
                         "FROM requests GROUP BY run_id")
        assert verify_chain(s).ok
    assert [x["status"] for x in runs] == ["complete", "complete"]
    assert all(x["node_id"] and x["gpu_name"] == FAKE_GPU for x in runs)
    assert sorted((c["n"], c["ok"]) for c in counts) == [(2, 2), (2, 2)]
    # the engines the cell groups launched (GPU slot k: the plan's port + 100 k) are gone with their runs
    port = json.loads(plan.read_text())["engines"][0]["port"]
    assert not [p for k in (0, 1) for p in _processes_with(f"--port {port + 100 * k}")]


PROBE = """
import os, sys
from console.cluster.connect import LOOPBACK_ENV, keep_loopback
keep_loopback(sys.argv[1])
from ray._private.services import canonicalize_bootstrap_address
print(canonicalize_bootstrap_address(os.environ["RAY_ADDRESS"]), os.environ.get(LOOPBACK_ENV))
"""


@pytest.mark.parametrize("ray_address, expected", [
    ("127.0.0.1:6379", "127.0.0.1:6379 0"),
    ("localhost:6379", "127.0.0.1:6379 0"),
    ("10.1.2.3:6379", "10.1.2.3:6379 None"),  # a multi-host head's address: Ray's default behaviour
])
def test_a_loopback_address_is_kept_as_given(ray_address, expected):
    """The issue's failure: Ray swaps 127.0.0.1 for the host's network address before it connects
    (`Failed to connect to Ray cluster at <the node's other address>`), where a head started on
    127.0.0.1 does not listen. Checked in a fresh interpreter (Ray reads the switch at import);
    nothing is sent anywhere."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    env.update(RAY_ADDRESS=ray_address, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", PROBE, "auto"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == expected, r.stdout + r.stderr
