"""A launch that cannot even be prepared (issue 26, item 7): a checkpoint folder or deploy config
that is gone when the engine starts (deleted after freeze) is a recorded startup failure with a
one-line reason, never a database error. Before the fix, hashing the missing checkpoint raised
before the launch row had its launch_id, and storing the row failed with `NOT NULL constraint
failed: engine_launches.launch_id`."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from plans_helpers import free_port, make_workload, plan_dict, write_json

from console.recording import launch_engine
from data.audit import verify_chain
from data.plan_model import EngineSpec
from data.store import Store
from engine_adapters.lifecycle import EngineStartError

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("missing", ["checkpoint_paths", "config_path", "bad_deploy_yaml"])
def test_missing_engine_input_is_a_recorded_startup_failure(store, tmp_path, missing):
    gone = tmp_path / "gone"
    adapter = "reference"
    if missing == "checkpoint_paths":
        given: dict = {"checkpoint_paths": (str(gone),)}
    elif missing == "config_path":
        given = {"config_path": str(gone)}
    else:  # a deploy file that reads as YAML but not as a deploy config: a TypeError inside the reader
        gone = tmp_path / "deploy.yaml"
        gone.write_text("stages: 5\n")
        given, adapter = {"config_path": str(gone)}, "vllm_omni"
    spec = EngineSpec("e", adapter, "vllm-omni", argv=(sys.executable, "-c", "pass"), port=free_port(), **given)
    with pytest.raises(EngineStartError) as err:
        launch_engine(store, spec, log_dir=tmp_path / "logs")
    assert str(gone) in str(err.value) and len(str(err.value).splitlines()) == 1, err.value
    rows = store.query("SELECT launch_id, status, failure_reason FROM engine_launches")
    assert len(rows) == 1 and rows[0]["launch_id"] and rows[0]["status"] == "startup_failed", rows
    assert str(gone) in rows[0]["failure_reason"] and rows[0]["failure_reason"].startswith("cannot prepare the launch")
    assert store.scalar("SELECT count(*) FROM audit_events WHERE kind = 'launch_recorded'") == 1
    assert verify_chain(store).ok


@pytest.mark.slow  # a campaign run as a user would
def test_checkpoint_deleted_after_freeze_fails_the_launch_not_the_campaign(tmp_path):
    """`campaign run` as a user runs it: the engine's checkpoint folder existed at freeze and is
    gone at run time. Exit 1 (a cell failed), the startup failure recorded with its reason."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"weights")
    doc = plan_dict(make_workload(tmp_path / "wl", short=True), profiles=("fast",), concurrencies=(1,), requests=2,
                    warmups=0, repeats=1)
    e = doc["engines"][0]
    e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni", "--profile", "fast",
                 "--host", "127.0.0.1", "--port", str(e["port"])]
    e["checkpoint_paths"] = [str(ckpt)]
    plan = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"

    def campaign(*args):
        return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)],
                              capture_output=True, text=True)

    assert campaign("plan", "freeze", str(plan)).returncode == 0
    shutil.rmtree(ckpt)
    r = campaign("run", str(plan))
    assert "database error" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "startup failed" in r.stdout and str(ckpt) in r.stdout, r.stdout
    with Store(db) as s:
        launch = s.query("SELECT launch_id, status, failure_reason FROM engine_launches")
        assert len(launch) == 1 and launch[0]["status"] == "startup_failed" and str(ckpt) in launch[0]["failure_reason"]
        att = s.query("SELECT outcome, launch_id FROM attempts")
        assert [a["outcome"] for a in att] == ["startup_failed"] and att[0]["launch_id"] == launch[0]["launch_id"]
        assert s.scalar("SELECT count(*) FROM runs") == 0
