"""The results layer end to end (helper "results"): stored run metrics, the HTML report in headless
Chromium, the evidence bundle's export -> verify and its tamper checks, and one run's numbers in the
CLI table, the TUI, the HTML report and the export."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from results_store import build_campaign

from console.cli import main
from console.evidence import EvidenceMismatch, check_manifest, verify_bundle, write_manifest
from data.metric_params import MetricParams
from data.plan_loading import plan_from_store
from data.store import Store
from stats.metrics import METRICS_VERSION, metrics_for_runs, run_metrics
from stats.results.plan_results import load_plan_results

FIGURE_TITLES = (
    "Throughput vs concurrency", "Latency vs concurrency", "RTF distribution per cell", "Stalls and failures per cell",
    "GPU utilisation and power over time per run", "Quality checks: estimate and one-sided bound vs margin",
    "Quality checks: bootstrap replicate distributions", "Throughput rule: paired ratios and lower bound",
    "Coverage gaps and WER attribution", "Quality under load: WER, SIM and MOS vs concurrency",
    "Equivalence: per-utterance distances against the tolerance",
)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    db, plan = build_campaign(root)
    return root, db, plan


@pytest.fixture(scope="module")
def bundle(campaign):
    root, db, plan = campaign
    out = root / "evidence"
    assert main(["export", "evidence", str(plan), str(out), "--db", str(db)]) == 0
    return out


def _plan_hash(db: Path) -> str:
    with Store(db, read_only=True) as s:
        return s.scalar("SELECT plan_hash FROM plans WHERE kind = 'plan'")


def test_metrics_are_stored_once_and_recomputed_only_on_change(campaign, tmp_path):
    _, db, _ = campaign
    copy = tmp_path / "c.duckdb"
    shutil.copy(db, copy)
    with Store(copy) as store:
        runs = store.query("SELECT run_id, status FROM runs ORDER BY run_id")
        store.con.execute("DELETE FROM run_metrics")
        p = MetricParams()
        first = metrics_for_runs(store, runs, p)
        assert store.scalar("SELECT count(*) FROM run_metrics") == len(runs)
        assert first == {r["run_id"]: run_metrics(store, r["run_id"], p) for r in runs}  # == the uncached path
        # a stored row is what is read back: a marker in it shows up, so nothing recomputed it
        rid = runs[0]["run_id"]
        doc = json.loads(store.scalar("SELECT metrics_json FROM run_metrics WHERE run_id = ?", [rid]))
        store.con.execute("UPDATE run_metrics SET metrics_json = ? WHERE run_id = ?",
                          [json.dumps({**doc, "throughput": 12345.0}), rid])
        assert metrics_for_runs(store, runs[:1], p)[rid].throughput == 12345.0
        # other parameters: a second row under their hash; the first stays
        other = MetricParams(throughput_scale=1.0)
        assert metrics_for_runs(store, runs[:1], other)[rid].throughput == pytest.approx(first[rid].throughput / 25)
        assert store.scalar("SELECT count(*) FROM run_metrics WHERE run_id = ?", [rid]) == 2
        # another metrics version or a changed request count is never served
        store.con.execute("UPDATE run_metrics SET metrics_version = 'old' WHERE run_id = ?", [rid])
        assert metrics_for_runs(store, runs[:1], p)[rid] == first[rid]
        store.con.execute("UPDATE run_metrics SET metrics_json = ?, requests = requests + 1 WHERE run_id = ? AND "
                          "metrics_version = ?", [json.dumps({**doc, "throughput": 1.0}), rid, METRICS_VERSION])
        assert metrics_for_runs(store, runs[:1], p)[rid] == first[rid]
        store.con.execute("DELETE FROM run_metrics")
    with Store(copy, read_only=True) as ro:  # a reader computes in memory and stores nothing
        assert metrics_for_runs(ro, runs, MetricParams()) == first
        assert ro.scalar("SELECT count(*) FROM run_metrics") == 0


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


CHECK_SCRIPT = """<script>
window.addEventListener('load', () => {
  const out = [...document.querySelectorAll('figure')].map(f => {
    const img = f.querySelector('img');
    return {id: f.id, title: f.querySelector('figcaption b').textContent, complete: img.complete,
            w: img.naturalWidth, h: img.naturalHeight, shown: img.getBoundingClientRect().height};
  });
  const pre = document.createElement('pre'); pre.id = 'figure-check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script></body>"""


@pytest.mark.slow  # Chromium
def test_html_report_renders_every_figure_in_headless_chromium(campaign, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs it through apt)")
    _, db, plan = campaign
    html_path, figs = tmp_path / "report.html", tmp_path / "figs"
    assert main(["report", str(plan), "--db", str(db), "--html", str(html_path), "--figures", str(figs)]) == 0
    text = html_path.read_text(encoding="utf-8")
    assert "<script" not in text and "http://" not in text and "https://" not in text  # self-contained, offline
    assert _plan_hash(db) in text and "audit head" in text and "Metric definitions" in text
    for key in ("throughput", "latency", "rtf", "stalls_failures", "gpu", "quality_forest", "quality_replicates",
                "throughput_ratios", "coverage_attribution", "quality_load", "equivalence"):
        assert (figs / f"{key}.png").stat().st_size > 5000 and b"<svg" in (figs / f"{key}.svg").read_bytes()
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", CHECK_SCRIPT), encoding="utf-8")
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1300,900"]
    dom = subprocess.run([browser, *flags, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    found = json.loads(re.search(r'<pre id="figure-check">(.*?)</pre>', dom, re.S).group(1).replace("&quot;", '"'))
    assert [f["title"] for f in found] == list(FIGURE_TITLES)
    for f in found:
        assert f["complete"] and f["w"] > 400 and f["h"] > 200 and f["shown"] > 100, f
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", html_path.as_uri()], capture_output=True, timeout=120)
    from PIL import Image

    img = Image.open(shot).convert("L")
    assert img.size == (1300, 900) and len(img.getcolors(maxcolors=1 << 16) or ()) > 50  # drawn, not a blank page


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_export_then_verify_passes(bundle, capsys):
    capsys.readouterr()
    assert main(["evidence", "verify", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "bounds bit-identical" in out and "ratios and lower bounds bit-identical" in out
    for name in ("runs", "requests", "chunks", "gpu_samples", "quality_scores"):
        assert (bundle / "tables" / f"{name}.parquet").is_file() and (bundle / "tables" / f"{name}.csv").is_file()
    assert (bundle / "REPRODUCE.md").read_text().count("campaign ") >= 5
    assert (bundle / "report" / "report.html").is_file() and len(list((bundle / "report" / "figures").glob("*.svg"))) == 11


def test_one_changed_byte_in_any_file_fails_naming_it(bundle, tmp_path):
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    files = sorted(p for p in copy.rglob("*") if p.is_file() and p.name != "MANIFEST.sha256")
    assert len(files) > 30
    for p in files:
        raw = p.read_bytes()
        i = len(raw) // 2
        p.write_bytes(raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1:])
        with pytest.raises(EvidenceMismatch, match=re.escape(p.relative_to(copy).as_posix()) + ": sha256"):
            check_manifest(copy)
        p.write_bytes(raw)
    check_manifest(copy)


def _rewrite(path: Path, column: str, row: int, fn) -> None:
    t = pq.read_table(path)
    vals = t.column(column).to_pylist()
    vals[row] = fn(vals[row])
    import pyarrow as pa
    t = t.set_column(t.schema.get_field_index(column), column, pa.array(vals, type=t.schema.field(column).type))
    pq.write_table(t.replace_schema_metadata(pq.read_table(path).schema.metadata), path)


def test_one_score_in_a_parquet_file_fails_naming_the_verdict(bundle, tmp_path, capsys):
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    scores = copy / "tables" / "quality_scores.parquet"
    t = pq.read_table(scores).to_pandas()
    row = int(((t["metric"] == "sim") & (t["status"] == "ok")).to_numpy().nonzero()[0][0])
    _rewrite(scores, "value", row, lambda v: v + 0.5)
    assert main(["evidence", "verify", str(copy)]) == 1  # the manifest names the file
    assert "tables/quality_scores.parquet: sha256" in capsys.readouterr().err
    write_manifest(copy)  # a forger who also rewrites the manifest: the scores no longer match their digest
    with pytest.raises(EvidenceMismatch, match=r"scores resemblyzer: the \d+ row\(s\) stored at seq \d+ differ from "
                                               r"their digest") as caught:
        verify_bundle(copy)
    assert caught.value.check == "scores"


def test_one_chunk_stamp_fails_naming_the_run(bundle, tmp_path):
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    _rewrite(copy / "tables" / "chunks.parquet", "t_arrival_ns", 5, lambda v: v + 400_000_000)
    write_manifest(copy)
    with pytest.raises(EvidenceMismatch, match=r"run \S+: chunks: content differs from the digest recorded at run end"):
        verify_bundle(copy)


def _as_version_2(text: str) -> str:
    """A stored row as a console before issue 31 wrote it: the version-2 keys only, in their order."""
    from stats.metrics.compute import V2_KEYS

    return json.dumps({k: v for k, v in json.loads(text).items() if k in V2_KEYS})


def test_run_metrics_stored_before_later_metrics_still_verify(bundle, tmp_path, campaign):
    """A bundle (and a store) whose run_metrics rows lack the metrics added since (continuity pass
    rates, goodput) verifies: the row is compared over the keys it holds, byte for byte; a row
    cut shorter than any console wrote, or missing a metric before later ones, does not."""
    from stats.metrics.stored import stored_metrics_problems

    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    t = pq.read_table(copy / "tables" / "run_metrics.parquet")
    assert "continuity_deficit_c100" in json.loads(t.column("metrics_json")[0].as_py())  # bundled by this console
    for i in range(t.num_rows):
        _rewrite(copy / "tables" / "run_metrics.parquet", "metrics_json", i, _as_version_2)
    import pyarrow.csv as pacsv
    pacsv.write_csv(pq.read_table(copy / "tables" / "run_metrics.parquet"), copy / "tables" / "run_metrics.csv")
    write_manifest(copy)
    assert any(s.name == "run metrics" for s in verify_bundle(copy))
    # the same rows in a store: audit verify's stored-metrics check finds nothing wrong
    _, db, _ = campaign
    store_copy = tmp_path / "c.duckdb"
    shutil.copy(db, store_copy)
    with Store(store_copy) as store:
        for rid, text in store.con.execute("SELECT run_id, metrics_json FROM run_metrics").fetchall():
            store.con.execute("UPDATE run_metrics SET metrics_json = ? WHERE run_id = ?", [_as_version_2(text), rid])
        assert stored_metrics_problems(store)[1] == []
        rid, text = store.con.execute("SELECT run_id, metrics_json FROM run_metrics LIMIT 1").fetchone()
        cut = json.loads(text)
        del cut["continuity_ok_rate"]  # the last version-2 key: shorter than any console wrote
        store.con.execute("UPDATE run_metrics SET metrics_json = ? WHERE run_id = ?", [json.dumps(cut), rid])
        assert any(rid in p and "(edited)" in p for p in stored_metrics_problems(store)[1])
    # a metric dropped from before later ones in a bundle row: not a row any console wrote
    _rewrite(copy / "tables" / "run_metrics.parquet", "metrics_json", 0,
             lambda v: json.dumps({k: x for k, x in json.loads(v).items() if k != "throughput"}))
    pacsv.write_csv(pq.read_table(copy / "tables" / "run_metrics.parquet"), copy / "tables" / "run_metrics.csv")
    write_manifest(copy)
    with pytest.raises(EvidenceMismatch, match=r"run \S+: metrics re-derived") as caught:
        verify_bundle(copy)
    assert caught.value.check == "run metrics"


def test_edited_run_metrics_fail_naming_the_run(bundle, tmp_path):
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    _rewrite(copy / "tables" / "run_metrics.parquet", "metrics_json", 0,
             lambda v: json.dumps({**json.loads(v), "throughput": 12345.0}))
    write_manifest(copy)
    with pytest.raises(EvidenceMismatch, match=r"run \S+: metrics re-derived") as caught:
        verify_bundle(copy)
    assert caught.value.check == "run metrics"


def test_same_numbers_in_cli_tui_html_and_export(campaign, bundle, capsys, monkeypatch):
    from console.tui.data import load_browser

    monkeypatch.setenv("COLUMNS", "400")  # the table unwrapped, one cell per line

    _, db, plan = campaign
    plan_hash = _plan_hash(db)
    with Store(db) as store:
        res = load_plan_results(store, plan_from_store(store, plan_hash))
    cell = next(c for c in res.cells if c.engine == "ref-fast" and c.concurrency == 2)
    run = cell.runs[0]
    capsys.readouterr()
    assert main(["report", str(plan), "--db", str(db)]) == 0
    cli = capsys.readouterr().out
    texts = [cell.text(f) for f in ("throughput", "ttfa_p50_s", "e2e_p95_s", "rtf_mean")]
    for t in texts:
        assert t.one_line() in cli
    tui = next(r for r in load_browser(db).reports if r.plan.hash == res.plan.hash)
    tcell = next(c for c in tui.cells if c.engine == cell.engine and c.concurrency == cell.concurrency)
    assert [tcell.text(f) for f in ("throughput", "ttfa_p50_s", "e2e_p95_s", "rtf_mean")] == texts
    html = (bundle / "report" / "report.html").read_text(encoding="utf-8")
    for t in texts:
        assert f'<span class="med">{t.median}</span><br><span class="rng">{t.range}</span>' in html
    exported = pq.read_table(bundle / "tables" / "run_metrics.parquet").to_pandas()
    stored = json.loads(exported.loc[exported["run_id"] == run.run_id, "metrics_json"].iloc[0])
    assert stored["throughput"] == run.metrics.throughput and stored["ttfa_p50_s"] == run.metrics.ttfa_p50_s
    tui_run = next(r for r in load_browser(db).runs if r.run_id == run.run_id)
    assert tui_run.metrics == run.metrics
