"""The engine's own view beside the client's (issue 31): the reference engine's /metrics in each
dialect's real families (checked against docs/engines.md), the console's scrape during a real
campaign run, the reconciliation of server and client figures (and its flag for an engine that
reports a wrong figure), and the continuity pass rates and goodput against hand-worked examples."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import httpx
import pytest

from console.server_scrape import ServerScrape
from engine_adapters.server_scrape import ScrapeTarget, parse_exposition
from data.errors import CampaignError
from data.plan_validation import validate_plan_dict
from data.server_plan import SloSpec
from data.store import Store
from engine_adapters.reference import server_metrics as engine_side
from plans_helpers import make_workload, minimal_plan, minimal_plan_doc, plan_dict, write_json
from reference_server import chat_body, launch_engine, stop_engine, stream, wait_ready
from stats.metrics.continuity import continuity_rates, deficit_underrun_s, pause_resume_underrun_s, run_continuity
from stats.metrics.compute import run_goodput
from stats.server_reconcile import reconcile_run

pytestmark = pytest.mark.timeout(240)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "engines.md"


def documented_families() -> dict[str, str]:
    """family -> type, from the table in docs/engines.md ("Engine metrics")."""
    rows = re.findall(r"^\| `((?:vllm_omni|sglang_omni):[a-z_0-9]+)` \| (\w+) \|", DOCS.read_text(), re.M)
    return dict(rows)


# ---- continuity: hand-worked examples --------------------------------------------------------------

ISSUE_EXAMPLE = ([0.0, 0.3, 0.6], [0.1, 0.1, 0.1])  # three 0.1 s chunks at 0, 0.3, 0.6 s


def test_issue_example_under_both_models():
    # pause/resume: plays 0-0.1, waits to 0.3 (0.2), plays to 0.4, waits to 0.6 (0.2): longest 0.2
    # deficit: at 0.3 received 0.1 (0.2 behind), at 0.6 received 0.2 (0.4 behind): 0.4
    assert pause_resume_underrun_s(*ISSUE_EXAMPLE) == pytest.approx(0.2)
    assert deficit_underrun_s(*ISSUE_EXAMPLE) == pytest.approx(0.4)
    # the engine's own implementations (the reference engine mirrors each real engine's code) agree
    assert engine_side.pause_resume_underrun_s(*ISSUE_EXAMPLE) == pytest.approx(0.2)
    assert engine_side.deficit_underrun_s(*ISSUE_EXAMPLE) == pytest.approx(0.4)


def test_pass_rates_hand_worked():
    # request A: the issue's example; B: 0.1 s chunks at 0, 0.15, 0.3 (pauses 0.05, 0.05; deficits
    # 0.05, 0.1); C: one chunk (pause/resume unscored, deficit 0); D: 0.2 s chunks at 0 and 0.1 (no gap)
    streams = [ISSUE_EXAMPLE, ([0.0, 0.15, 0.3], [0.1] * 3), ([0.0], [0.5]), ([0.0, 0.1], [0.2, 0.2])]
    pr = [pause_resume_underrun_s(a, d) for a, d in streams]
    de = [deficit_underrun_s(a, d) for a, d in streams]
    assert pr == [pytest.approx(0.2), pytest.approx(0.05), None, 0.0]
    assert de == [pytest.approx(0.4), pytest.approx(0.1), 0.0, 0.0]
    r = continuity_rates(pr, "pause_resume")
    assert (r.scored, r.unscored) == (3, 1)
    assert (r.rate(50), r.rate(100), r.rate(200)) == (pytest.approx(2 / 3), pytest.approx(2 / 3), 1.0)
    d = continuity_rates(de, "deficit")
    assert (d.scored, d.unscored) == (4, 0)
    assert (d.rate(50), d.rate(100), d.rate(200)) == (0.5, 0.75, 0.75)


def _rows(spec):
    """Stored-row shapes for (ttfa s, [(arrival s, samples)], outcome, warmup) per request at 24 kHz."""
    requests, chunks = [], {}
    for i, (ttfa, cs, outcome, warm) in enumerate(spec):
        t0 = 10_000_000_000 + i * 1_000_000
        ns = [(t0 + int(a * 1e9), s) for a, s in cs]
        requests.append({"request_index": i, "utt_id": f"u{i}", "is_warmup": warm, "outcome": outcome, "t_send_ns": t0,
                         "t_first_byte_ns": t0 + int(ttfa * 1e9) if ttfa is not None else None,
                         "t_first_audio_ns": t0 + int(ttfa * 1e9) if ttfa is not None else None,
                         "t_last_audio_ns": ns[-1][0] if ns else None, "t_end_ns": ns[-1][0] if ns else t0 + 1000,
                         "audio_samples": sum(s for _, s in cs), "sample_rate": 24000, "finish_reason": "stop"})
        chunks[i] = ns
    return requests, chunks


def test_run_continuity_and_goodput_from_stored_rows():
    # r0: ttfa 0.1, chunks of 1 s at 0.1 and 0.5 (no gap), rtf 0.5/2 = 0.25
    # r1: ttfa 0.3, chunks of 0.1 s at 0.3, 0.6 (pause 0.2; deficit 0.2), rtf 0.6/0.2 = 3.0
    # r2: failed; r3: warm-up (ignored); r4: ttfa 0.2, one 1 s chunk, rtf 0.2
    spec = [(0.1, [(0.1, 24000), (0.5, 24000)], "ok", False),
            (0.3, [(0.3, 2400), (0.6, 2400)], "ok", False),
            (None, [], "http_status", False),
            (0.05, [(0.05, 24000)], "ok", True),
            (0.2, [(0.2, 24000)], "ok", False)]
    requests, chunks = _rows(spec)
    c = run_continuity(requests, chunks)
    assert (c["pause_resume"].scored, c["pause_resume"].unscored) == (2, 1)
    assert (c["pause_resume"].rate(100), c["pause_resume"].rate(200)) == (0.5, 1.0)
    assert (c["deficit"].scored, c["deficit"].rate(100), c["deficit"].rate(200)) == (3, pytest.approx(2 / 3), 1.0)
    # wall: first measured send (r0 at t0) to the last end (r1's last audio: t0 + 1 ms + 0.6 s)
    wall = (1_000_000 + 600_000_000) / 1e9
    g = run_goodput("r", requests, chunks, SloSpec(ttfa_ms=250))
    assert (g.requests, g.met, g.share) == (4, 2, 0.5)  # r0 and r4 meet it; r1 late; r2 failed
    assert g.wall_s == pytest.approx(wall)
    assert g.rate_per_s == pytest.approx(2 / wall)
    assert g.throughput == pytest.approx(25 * (2.0 + 1.0) / wall)
    g2 = run_goodput("r", requests, chunks, SloSpec(ttfa_ms=400, rtf=1.0))
    assert (g2.met, g2.share) == (2, 0.5)  # r1 is within 400 ms but its RTF is 3.0


# ---- plan fields -----------------------------------------------------------------------------------

def test_plan_scrape_and_slo_fields():
    p = minimal_plan()
    assert (p.engines[0].metrics_path, p.server_metrics.interval_s, p.slo) == ("/metrics", 1.0, None)
    doc = minimal_plan_doc(server_metrics=None, slo={"ttfa_ms": 250, "rtf": 1})
    doc["engines"][0]["metrics_path"] = None
    validate_plan_dict(doc)
    p = minimal_plan(server_metrics={"interval_s": 0.2}, slo={"ttfa_ms": 250})
    assert (p.server_metrics.interval_s, p.slo) == (0.2, SloSpec(250.0, None))
    from data.plan_model import plan_from_dict
    q = plan_from_dict(doc)
    assert (q.engines[0].metrics_path, q.server_metrics.enabled, q.slo) == (None, False, SloSpec(250.0, 1.0))
    for bad, needle in [({"slo": {"ttfa_ms": 0}}, "slo.ttfa_ms"), ({"slo": {"rtf": 1}}, "ttfa_ms"),
                        ({"server_metrics": {"interval_s": 0.01}}, "server_metrics.interval_s")]:
        with pytest.raises(CampaignError, match=re.escape(needle)) as exc:
            validate_plan_dict(minimal_plan_doc(**bad))
        assert "\n" not in str(exc.value)


# ---- the reference engine's /metrics in each dialect ---------------------------------------------------

@pytest.mark.parametrize("dialect", ["vllm-omni", "sglang-omni"])
def test_reference_engine_exposes_its_dialects_real_families(dialect):
    engine = wait_ready(launch_engine(dialect, "baseline"), dialect, "baseline")
    try:
        for text in ("Hello there.", "A second, somewhat longer sentence to stream."):
            r = stream(engine.url, chat_body(dialect, text))
            assert r.status == 200 and r.transport_error is None
        text = httpx.get(engine.url + "/metrics", timeout=5).text
    finally:
        stop_engine(engine)
    rows = parse_exposition(text, 0, 0)[1:]  # the console's own parser (after the scrape's own row)
    exposed = {(r.family, r.type) for r in rows}
    prefix = dialect.replace("-", "_") + ":"
    documented = {f: t for f, t in documented_families().items() if f.startswith(prefix)}
    assert len(documented) >= 7
    missing = {f for f in documented if f not in {fam for fam, _ in exposed}}
    # vLLM's skipped-requests and failed counters have no series until something is skipped or fails
    assert missing <= {"vllm_omni:audio_skipped_requests", "vllm_omni:requests_failed"}, missing
    for fam, typ in exposed:
        assert documented.get(fam) == typ, (fam, typ)
    count = {(r.sample, r.labels_json): r.value for r in rows}
    if dialect == "vllm-omni":
        labels = json.dumps({"model_name": "reference-tts", "replica": "0", "stage": "1"}, separators=(",", ":"),
                            sort_keys=True)
        assert count[("vllm_omni:audio_ttfp_s_count", labels)] == 2
        assert sum(v for (s, _), v in count.items() if s == "vllm_omni:requests_success_total") == 2
    else:
        assert count[("sglang_omni:audio_ttfp_s_count", "{}")] == 2
        assert {json.loads(lj)["threshold_ms"] for s, lj in count if s == "sglang_omni:audio_continuity_ok_total"} \
            == {"50", "100", "200"}


def test_pcm_dialect_publishes_nothing_and_a_failed_scrape_is_a_row(tmp_path):
    engine = wait_ready(launch_engine("pcm", "baseline"), "pcm", "baseline")
    try:
        with Store(tmp_path / "s.duckdb") as store:
            with ServerScrape(store, ScrapeTarget("run-x", "peer", engine.url + "/metrics", 0.1)):
                pass
            rows = store.query("SELECT scrape_seq, family, sample, error FROM server_metrics ORDER BY scrape_seq")
    finally:
        stop_engine(engine)
    assert [r["scrape_seq"] for r in rows] == list(range(len(rows))) and len(rows) >= 2  # before and after
    assert all(r["family"] is None and r["sample"] == "scrape" and "404" in r["error"] for r in rows), rows


# ---- a real campaign run: samples stored, reconciled, the wrong figure flagged ------------------------------

@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_campaign_run_stores_and_reconciles_server_metrics(tmp_path):
    import subprocess

    wl = make_workload(tmp_path / "wl", short=True)
    doc = plan_dict(wl, concurrencies=(2,), requests=6, warmups=0, repeats=1,
                    profiles=("baseline", "skewed_metrics", "fast"), restart="per_cell", interleave="sequential")
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    doc["engines"][2]["metrics_path"] = "/no-such-path"  # every scrape fails; the run must not
    doc["server_metrics"] = {"interval_s": 0.2}
    plan = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"

    def campaign(*args):
        return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)],
                              capture_output=True, text=True)

    assert campaign("plan", "freeze", str(plan)).returncode == 0
    r = campaign("run", str(plan))
    assert r.returncode == 0, r.stdout + r.stderr
    with Store(db) as s:
        runs = {x["engine"]: x["run_id"] for x in s.query("SELECT engine, run_id, status FROM runs")}
        assert set(runs) == {"ref-baseline", "ref-skewed_metrics", "ref-fast"}
        assert {x["status"] for x in s.query("SELECT status FROM runs")} == {"complete"}
        for engine, run_id in runs.items():
            seqs = s.query("SELECT scrape_seq, count(family) AS samples, count(error) AS errors, "
                           "max(CASE WHEN family IS NULL THEN value END) AS kept FROM server_metrics "
                           "WHERE run_id = ? GROUP BY scrape_seq ORDER BY scrape_seq", [run_id])
            # scrapes before the first request, during the run (every 0.2 s) and after the last
            assert [x["scrape_seq"] for x in seqs] == list(range(len(seqs))) and len(seqs) >= 3, (engine, seqs)
            if engine == "ref-fast":
                assert all(x["samples"] == 0 and x["errors"] == 1 for x in seqs)
            else:
                assert all(x["samples"] == x["kept"] and x["errors"] == 0 for x in seqs)
                assert seqs[-1]["samples"] > 0
        ok = reconcile_run(s, runs["ref-baseline"])
        skewed = reconcile_run(s, runs["ref-skewed_metrics"])
        failed = reconcile_run(s, runs["ref-fast"])
    assert ok.engine_family == "vllm_omni" and ok.baseline
    pairs = {p.figure: p for p in ok.pairs}
    ttfa = pairs["ttfa_mean_s"]
    assert ttfa.server is not None and ttfa.client is not None and not ttfa.flagged, ttfa
    assert pairs["requests_completed"].server == pairs["requests_completed"].client == 6
    assert pairs["requests_failed"].server == pairs["requests_failed"].client == 0
    sk = {p.figure: p for p in skewed.pairs}["ttfa_mean_s"]
    assert sk.flagged and sk.difference == pytest.approx(0.5, abs=0.05), sk
    assert "ttfa_mean_s" in skewed.flagged and "ttfa_mean_s" not in ok.flagged
    assert json.loads(json.dumps(skewed.as_dict()))["flagged"] == skewed.flagged
    assert failed.engine_family is None and failed.pairs == () and failed.failed_scrapes == failed.scrapes >= 2
