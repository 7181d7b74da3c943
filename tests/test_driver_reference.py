"""The driver over real HTTP against the reference engine (launched through its spec with the
lifecycle adapter): all three dialects, the flaky profile's faults each in their class, and a
loose timing-fidelity bound."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from plans_helpers import free_port

from console.recording import launch_engine, record_run, stop_engine
from engine_adapters.driver import DriveSpec, RequestSpec
from engine_adapters.driver.overhead import SCHEDSTAT
from data.plan_model import EngineSpec
from stats.metrics import run_metrics

TEXTS = ["A short sentence for the engine.", "Another line of speech to render now.",
         "Timing every chunk as it arrives.", "The fourth request says this."]




def _engine(store, tmp_path, dialect, profile, extra=()):
    port = free_port()
    argv = (sys.executable, "-m", "engine_adapters.reference", "--dialect", dialect, "--profile", profile,
            "--port", str(port), *extra)
    spec = EngineSpec(f"ref-{dialect}", "reference", dialect, argv=argv, port=port, health_timeout_s=90, profile=profile)
    return launch_engine(store, spec, log_dir=tmp_path / "logs")


@pytest.mark.parametrize("dialect", ["vllm-omni", "sglang-omni", "pcm"])
@pytest.mark.slow  # 3 s in a loaded `make check`
def test_reference_engine_all_dialects(store, tmp_path, prompt, dialect, capfd):
    eng = _engine(store, tmp_path, dialect, "fast")
    try:
        reqs = [RequestSpec(f"spk-{i}", t, prompt, "prompt") for i, t in enumerate(TEXTS)]
        spec = DriveSpec(f"ref-{dialect}", eng.spec.url, dialect, 2, reqs, timeout_s=60, artifacts_dir=tmp_path / "a",
                         sampling={"seed": 42, "temperature": 0.0})
        run_id = record_run(store, spec, engine=eng.spec.name, kind="exploratory", launch_id=eng.launch_id, telemetry=False)
    finally:
        stop_engine(store, eng, grace_s=2)
    rows = store.query("SELECT * FROM requests WHERE run_id = ?", [run_id])
    assert len(rows) == 4 and {r["outcome"] for r in rows} == {"ok"}, [r["error_detail"] for r in rows]
    for r in rows:
        assert r["sample_rate"] == 24_000 and r["audio_samples"] > 24_000 * 0.5
        assert (tmp_path / "a" / r["audio_path"]).is_file()
    m = run_metrics(store, run_id)
    assert m.completed == 4 and m.throughput > 0 and m.ttfa_p50_s > 0
    # stored when the run ended (console/recording.py), before any report: run_summary has them at once
    stored = store.scalar("SELECT metrics_json FROM run_metrics WHERE run_id = ?", [run_id])
    assert stored is not None and json.loads(stored) == json.loads(json.dumps(m.to_dict()))
    if dialect != "pcm":  # SSE dialects carry the engine's emit stamp on audio events
        assert store.scalar("SELECT count(*) FROM chunks WHERE run_id = ? AND kind = 'audio' AND server_emit_ns IS NULL", [run_id]) == 0
    assert store.scalar("SELECT status FROM engine_launches WHERE launch_id = ?", [eng.launch_id]) == "stopped"
    # every response stream was closed before the driver's loop shut down
    err = capfd.readouterr().err
    assert "Task was destroyed" not in err and "Traceback" not in err, err[-2000:]


FAULTS = {"in_stream_error": "in_stream_error", "drop": "transport", "http_500": "http_status", "stall": "timeout"}


@pytest.mark.parametrize("dialect", ["vllm-omni", "sglang-omni"])
@pytest.mark.slow  # 4 s in a loaded `make check`
def test_flaky_faults_land_in_their_class(store, tmp_path, prompt, dialect):
    eng = _engine(store, tmp_path, dialect, "flaky")
    try:
        reqs = []
        for i, fault in enumerate(["none", *FAULTS, "none", "none"]):
            reqs.append(RequestSpec(f"spk-{i}", TEXTS[i % 4] + f" Number {i}.", prompt,
                                    headers=(("X-Reference-Fault", fault),)))
        spec = DriveSpec(f"flaky-{dialect}", eng.spec.url, dialect, 3, reqs, timeout_s=2, artifacts_dir=tmp_path / "a")
        run_id = record_run(store, spec, engine=eng.spec.name, kind="exploratory", telemetry=False)
    finally:
        stop_engine(store, eng, grace_s=2)
    rows = store.query("SELECT request_index, outcome, error_detail FROM requests WHERE run_id = ? ORDER BY request_index", [run_id])
    assert len(rows) == len(reqs)  # requests sent = requests stored
    expected = ["ok", *FAULTS.values(), "ok", "ok"]
    if dialect == "sglang-omni":  # SGLang-Omni reports an in-stream fault by ending the stream without [DONE]
        expected[1] = "no_end_marker"
    assert [r["outcome"] for r in rows] == expected, rows


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_timing_fidelity_loose_bound(tmp_path, capfd):
    """Gross-regression guard: p99 of (driver arrival - engine emit) under 20 ms at C=8; and the
    driver process closes every response stream before its loop shuts down."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_timing_fidelity as b

    res = b.measure([8], requests_per_c={8: 16}, plain=False)
    (fig,) = res[8]["driver"]
    assert fig["events"] >= 16 and fig["p99_ms"] < 20.0, res
    err = capfd.readouterr().err
    assert "Task was destroyed" not in err and "Traceback" not in err, err[-2000:]


@pytest.mark.slow  # the timing bench end to end
def test_timing_fidelity_bench_reports_every_figure(tmp_path, capsys):
    """The bench's command line on the `wide` profile (docs/performance.md): live streams, event
    rate, the engine's slip, driver and plain skews, CPU per event, loop lag, the worst pair."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_timing_fidelity as b

    out = tmp_path / "fid.json"
    assert b.main(["--profile", "wide", "--concurrencies", "8", "--repeats", "1", "--waves", "1",
                   "--sends-per-pass", "2,100000", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "worst paired p99 ratio" in text.splitlines()[-1] and "client ceiling" in text
    res = json.loads(out.read_text())
    drv, plain = res["summary"]["8"]["driver"], res["summary"]["8"]["plain"]
    assert drv["live_max"] >= 7 and plain["live_max"] >= 7, res["summary"]
    for key in ("event_rate", "p50_ms", "p99_ms", "max_ms", "cpu_us_per_event", "loop_lag_max_ms",
                "engine_slip_p99_ms", "engine_slip_max_ms", "engine_write_gap_p99_ms", "engine_write_gap_max_ms",
                "opening_ms", *(("runqueue_wait_max_shard_ms",) if Path(SCHEDSTAT).exists() else ())):
        assert drv[key] == drv[key] and drv[key] >= 0, (key, drv)  # present and not NaN
    assert plain["engine_slip_p99_ms"] >= 0 and drv["events"] == plain["events"] > 0
    assert drv["failed"] == plain["failed"] == 0 and res["incomplete"] == []
    run = res["runs"]["8"]["driver"][0]
    # one variant per send budget: 8 slots at 2 per pass defer at least the opening's 6 sends
    # (more when requests end in one pass), unpaced none
    assert res["sends_per_pass"] == [2, 100000] and "stamped/p100000" in text
    assert run["deferred_sends"] >= 6 and res["runs"]["8"]["driver:stamped/p100000"][0]["deferred_sends"] == 0
    assert run["loop_lag_teardown_max_ms"] >= 0 and run["worst"]["latest_events"] and run["worst"]["worst_loop_lags"]
    latest = run["worst"]["latest_events"][0]  # one driver process: it read every event, no other did
    assert latest["shard"] == 0 and latest["other_shards_reads"] == 0
    assert 0 <= latest["shard_silent_ms"] <= latest["skew_ms"] + 1e-3, latest
    # the driver process's collector is off while it drives (docs/performance.md): no pause from it
    assert res["runs"]["8"]["driver"][0]["gc"]["collections"] == [0, 0, 0], res["runs"]["8"]["driver"][0]["gc"]


@pytest.mark.slow  # the timing bench end to end
def test_timing_fidelity_bench_says_who_was_late(tmp_path, capsys):
    """With --trace each latest event carries what its driver process's loop thread did while it
    read nothing and the engine's own view of its chunk; each run carries the host's steal, and
    --busy-poll-us runs one variant per window; --prime drives once first and drops it
    (docs/performance.md, "Who was late")."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_timing_fidelity as b

    out = tmp_path / "fid.json"
    assert b.main(["--profile", "wide", "--concurrencies", "8", "--repeats", "1", "--waves", "1", "--trace",
                   "--busy-poll-us", "0,1000", "--prime", "--json", str(out)]) == 0
    text, err = capsys.readouterr()
    assert "primed C=8 (one drive, not counted)" in err
    assert "stamped/bp1000" in text and "busy poll (µs) 0, 1000" in text
    res = json.loads(out.read_text())
    assert res["trace"] is True and res["busy_poll_us"] == [0, 1000] and res["primed"] is True
    assert [len(res["runs"]["8"][k]) for k in ("driver", "driver:stamped/bp1000", "plain")] == [1, 1, 1]
    for key in ("driver", "driver:stamped/bp1000", "plain"):
        run = res["runs"]["8"][key][0]
        assert run["engine"]["queued_chunks"] >= 0 and run["steal_ms"] >= 0 and run["steal_max_cpu_ms"] >= 0, run
        for event in run["worst"]["latest_events"]:  # the engine found each latest event's chunk by its stamp
            assert event["engine"]["write_gap_ms"] >= 0 and event["engine"]["queued"] in (True, False), event
    traced = [e for e in res["runs"]["8"]["driver"][0]["worst"]["latest_events"] if "gap" in e]
    for event in traced:  # a silence of 0.5 ms or more before the event's read was traced
        g = event["gap"]
        assert g["gap_ms"] >= 0.5 and g["after_emit_ms"] <= g["gap_ms"] + 1e-3, g
        assert 0 <= g["not_running_after_emit_ms"] <= g["after_emit_ms"] + 1e-3 and g["sender_gil_ms"] >= 0, g


def test_wakeup_latency_bench_reports_both_modes(tmp_path, capsys):
    """bench_wakeup_latency: one writer, sleeping and spinning readers over loopback TCP, every
    message's latency counted (docs/performance.md, "The host's wake-up floor")."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_wakeup_latency as w

    out = tmp_path / "wake.json"
    assert w.main(["--readers", "2", "--sockets", "4", "--rate", "400", "--seconds", "0.5", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [r["mode"] for r in res["results"]] == ["sleep", "spin"]
    for r in res["results"]:
        assert r["messages"] == r["sent"] == 200, r  # every message read whole, none lost
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"] < 1000, r
    assert w.main(["--modes", "nap"]) == 2 and "--modes: unknown mode 'nap'" in capsys.readouterr().err


DROPPING = """
[profiles.dropping]
inherits = "wide"
fault_after_chunks = 5

[profiles.dropping.fault_rates]
drop = 1.0
"""


@pytest.mark.slow  # the timing bench end to end
def test_timing_fidelity_bench_refuses_runs_with_failed_requests(tmp_path, capsys):
    """A run whose requests did not all complete measured fewer streams than it claims: the bench
    names it, keeps its failure counts in the JSON, and exits 1 (docs/performance.md: session 6's
    1,024-stream figures were taken over runs in which the engine had reset up to a quarter of the
    connections, and nothing said so)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_timing_fidelity as b

    profiles = tmp_path / "profiles.toml"
    profiles.write_text(DROPPING)
    out = tmp_path / "fid.json"
    assert b.main(["--profile", "dropping", "--profiles-file", str(profiles), "--concurrencies", "16",
                   "--repeats", "1", "--json", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    bad = [line for line in lines if line.startswith("INCOMPLETE: ")]
    assert {line.split()[2] for line in bad} == {"driver", "plain"}, lines
    res = json.loads(out.read_text())
    (drv,), (plain,) = res["runs"]["16"]["driver"], res["runs"]["16"]["plain"]
    assert drv["requests"] == plain["requests"] == drv["failed"] == plain["failed"] == 32
    assert drv["events"] == plain["events"] == 32 * 5  # what arrived before each drop is still measured
    assert set(drv["failures"]) == {"transport"} and res["incomplete"] == bad
    assert res["summary"]["16"]["driver"]["failed"] == drv["failed"]


@pytest.mark.slow  # the event-CPU bench end to end
def test_event_cpu_bench_refuses_a_drive_with_failed_requests(tmp_path):
    """bench_event_cpu divides the driver's CPU by the audio events decoded: a drive whose requests
    did not all complete is a lighter load, so it stops the bench naming the count."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_event_cpu as e
    import bench_timing_fidelity as b

    (tmp_path / "profiles.toml").write_text(DROPPING)
    eng = b.start_engine(tmp_path, profile="dropping", profiles_file=tmp_path / "profiles.toml")
    try:
        with pytest.raises(SystemExit, match=r"8 of 8 requests failed"):
            e.drive(e.ROOT, eng.spec.url, 4, 8, "1", tmp_path)
    finally:
        eng.stop()
