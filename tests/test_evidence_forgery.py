"""`campaign evidence verify` against forged bundles (issue 26, item 3).

One real campaign (`campaign demo --quick`: reference engines over HTTP, real scorers, an excluded
run, a PASS and a FAIL quality verdict and a throughput verdict) is exported once for the module;
each test forges a copy of the bundle as an outsider would, with the `duckdb` module for Parquet,
`sed` for text and `sha256sum` to regenerate MANIFEST.sha256 (audit/head.json left as exported),
then runs `campaign evidence verify` as a subprocess and reads the check it names.
While working on these tests, REUSE_QUICK_DEMO=<a quick demo's stdout file> reuses that demo."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
pytestmark = pytest.mark.timeout(900)


def campaign(*args: object, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", *map(str, args)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, quick_demo):
    """The quick demo's evidence bundle (the demo is the session's one: tests/conftest.py)."""
    _, db = quick_demo
    dest = tmp_path_factory.mktemp("forgery") / "bundle"
    res = campaign("export", "evidence", db.parent / "plan.json", dest, "--db", db)
    assert res.returncode == 0, res.stdout + res.stderr
    return dest


def copy_of(bundle: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "b"
    shutil.copytree(bundle, dest, symlinks=True)
    return dest


def resign(b: Path) -> None:
    """MANIFEST.sha256 regenerated with sha256sum over every other file, as a forger would."""
    files = sorted(p.relative_to(b).as_posix() for p in b.rglob("*")
                   if (p.is_file() or p.is_symlink()) and p.name != "MANIFEST.sha256")
    out = subprocess.run(["sha256sum", "--", *files], cwd=b, capture_output=True, text=True, check=True)
    (b / "MANIFEST.sha256").write_text(out.stdout)


def sed(expr: str, *files: Path) -> None:
    subprocess.run(["sed", "-i", "-e", expr, *map(str, files)], check=True)


def verify(b: Path, *extra: object) -> tuple[int, str]:
    res = campaign("evidence", "verify", b, *extra)
    return res.returncode, res.stdout + res.stderr


def failed(b: Path, *extra: object) -> str:
    """The one FAILED line of a verify that must fail."""
    rc, out = verify(b, *extra)
    assert rc == 1, out
    lines = [ln for ln in out.splitlines() if "FAILED" in ln]
    assert len(lines) == 1 and "Traceback" not in out, out
    print(lines[0])  # shown with -s: what a reviewer reads
    return lines[0]


def docs(b: Path) -> dict[str, dict]:
    """verdict documents by verdict: {'PASS': ..., 'FAIL': ...} of the quality ones, by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted((b / "verdicts").glob("*.json"))}


def quality_file(b: Path, verdict: str) -> Path:
    [name] = [n for n, d in docs(b).items() if d["kind"] == "quality" and d["verdict"] == verdict]
    return b / "verdicts" / name


def parquet(path: Path, select: str) -> None:
    """Rewrite a bundled Parquet file from a query over it (`t`) with duckdb, and its CSV from
    that as the export writes it (pyarrow), so the two agree."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{path}')")
    con.execute(f"COPY ({select}) TO '{path}.new' (FORMAT parquet)")
    con.close()
    os.replace(f"{path}.new", path)
    csv_like_export(path)


def csv_like_export(path: Path) -> None:
    pacsv.write_csv(pq.read_table(path), path.with_suffix(".csv"))


# -- the untouched bundle ---------------------------------------------------------------------

def test_untouched_bundle_verifies(bundle):
    rc, out = verify(bundle)
    assert rc == 0, out
    assert out.rstrip().endswith("evidence verified")
    for check in ("files", "plan files", "audit", "plans", "runs", "exclusions", "scores", "run metrics",
                  "server metrics", "verdicts", "reproduce", "tables"):
        assert re.search(rf"^ok\s+{check}:", out, re.M), (check, out)
    assert "report/: derived, not verified" in out
    assert "not verified" in (bundle / "REPRODUCE.md").read_text()


# -- verdict documents ------------------------------------------------------------------------

def test_fail_verdict_documents_deleted(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    fail = quality_file(b, "FAIL")
    fail.unlink()
    (b / "verdicts" / f"{fail.stem}.scores.parquet").unlink()
    resign(b)
    line = failed(b)
    assert "verdicts:" in line and fail.stem in line and "missing" in line


def test_pass_document_copied_over_a_fail_documents_name(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    fail, ok = quality_file(b, "FAIL"), quality_file(b, "PASS")
    shutil.copy(ok, fail)
    shutil.copy(b / "verdicts" / f"{ok.stem}.scores.parquet", b / "verdicts" / f"{fail.stem}.scores.parquet")
    resign(b)
    line = failed(b)
    assert "verdicts:" in line and f"verdicts/{fail.name}" in line and ok.stem in line


def test_a_documents_audit_head_rewritten(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    fail = quality_file(b, "FAIL")
    head = json.loads((b / "audit" / "head.json").read_text())
    earlier = json.loads((b / "audit" / "audit_events.jsonl").read_text().splitlines()[head["length"] - 3])
    sed(f's/"length": {head["length"]},/"length": {earlier["seq"]},/; s/"head_hash": "{head["head_hash"]}"/'
        f'"head_hash": "{earlier["event_hash"]}"/', fail)
    assert json.loads(fail.read_text())["audit_head"]["length"] == earlier["seq"]
    resign(b)
    line = failed(b)
    assert "verdicts:" in line and f"verdicts/{fail.name}: audit_head" in line


# -- the audit log ----------------------------------------------------------------------------

def test_verdict_issued_payloads_edited_in_the_jsonl_with_hashes_kept(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    log = b / "audit" / "audit_events.jsonl"
    before = log.read_text()
    sed(r'/"kind":"verdict_issued"/s/\\"verdict\\":\\"FAIL\\"/\\"verdict\\":\\"PASS\\"/', log)
    assert log.read_text() != before
    resign(b)
    line = failed(b)
    assert "audit:" in line and "audit/audit_events.jsonl: seq" in line and "verdict_issued" in line


# -- the tables -------------------------------------------------------------------------------

def test_40_ms_off_every_baseline_ttfa_with_run_metrics_recomputed(bundle, tmp_path):
    from data.metric_params import MetricParams
    from data.store import Store
    from stats.metrics.stored import compute_from_rows

    b = copy_of(bundle, tmp_path)
    t = b / "tables"
    parquet(t / "requests.parquet", f"SELECT * REPLACE (CASE WHEN run_id IN (SELECT run_id FROM read_parquet("
                                    f"'{t / 'runs.parquet'}') WHERE engine = 'ref-baseline') THEN t_first_audio_ns "
                                    "- 40000000 ELSE t_first_audio_ns END AS t_first_audio_ns) FROM t")
    # the run metrics recomputed from the edited rows with the console's own code, so they agree
    with Store(tmp_path / "scratch.duckdb") as s:
        for name in ("runs", "requests", "chunks"):
            s.con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM read_parquet(?)", [str(t / f"{name}.parquet")])
        rows = duckdb.sql(f"SELECT run_id, params_json, metrics_json FROM read_parquet('{t / 'run_metrics.parquet'}')"
                          ).fetchall()
        fresh = compute_from_rows(s, [(rid, MetricParams.from_mapping(json.loads(p))) for rid, p, _ in rows])
    new = {rid: json.dumps(fresh[rid].to_dict()) for rid, _, _ in rows}
    assert sum(new[rid] != old for rid, _, old in rows) >= 6  # every baseline run's figures moved
    con = duckdb.connect()
    con.execute("CREATE TABLE m (run_id VARCHAR, metrics_json VARCHAR)")
    con.executemany("INSERT INTO m VALUES (?, ?)", list(new.items()))
    mp = t / "run_metrics.parquet"
    con.execute(f"CREATE TABLE t AS SELECT r.* REPLACE (m.metrics_json AS metrics_json) FROM read_parquet('{mp}') r "
                "JOIN m USING (run_id)")
    con.execute(f"COPY t TO '{mp}' (FORMAT parquet)")
    con.close()
    csv_like_export(mp)
    resign(b)
    line = failed(b)
    assert "runs:" in line and "requests: content differs from the digest recorded at run end" in line
    assert "ref-baseline" in line


def test_server_metrics_bundled_and_a_scrape_row_cut(bundle, tmp_path):
    """The engines' own samples are bundled (issue 31) and verify checks their shape: samples whose
    scrape row was cut fail, naming the run and scrape."""
    [rows] = duckdb.sql(f"SELECT count(*), count(DISTINCT run_id) FROM read_parquet("
                        f"'{bundle / 'tables' / 'server_metrics.parquet'}') WHERE family IS NOT NULL").fetchall()
    assert rows[0] > 0 and rows[1] > 0, rows
    b = copy_of(bundle, tmp_path)
    parquet(b / "tables" / "server_metrics.parquet",
            "SELECT * FROM t WHERE NOT (family IS NULL AND run_id || '/' || scrape_seq = "
            "(SELECT min(run_id || '/' || scrape_seq) FROM t WHERE family IS NOT NULL))")
    resign(b)
    line = failed(b)
    assert "server metrics:" in line and "has samples but no scrape row" in line


def test_a_bundle_from_before_server_metrics_verifies_saying_so(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    for ext in ("parquet", "csv"):
        (b / "tables" / f"server_metrics.{ext}").unlink()
    resign(b)
    rc, out = verify(b)
    assert rc == 0, out
    assert re.search(r"not verified\s+server metrics: tables/server_metrics.parquet absent", out), out


def test_exclusions_table_emptied(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    parquet(b / "tables" / "exclusions.parquet", "SELECT * FROM t WHERE false")
    resign(b)
    line = failed(b)
    assert "exclusions:" in line and "its exclusions row is missing" in line


def test_report_and_csvs_edited_fail_to_pass(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    csvs = sorted((b / "tables").glob("*.csv"))
    before = {p: p.read_text() for p in csvs}
    sed("s/FAIL/PASS/g", b / "report" / "report.html", *csvs)
    assert any(p.read_text() != before[p] for p in csvs)
    resign(b)
    line = failed(b)
    assert "tables:" in line and re.search(r"tables/\w+\.csv", line) and "differs from" in line


def test_reproduce_md_edited(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    sed("s/^Audit head at export: seq [0-9]*/Audit head at export: seq 7/", b / "REPRODUCE.md")
    resign(b)
    line = failed(b)
    assert "reproduce:" in line and "REPRODUCE.md: differs" in line


# -- the manifest and the files ---------------------------------------------------------------

def _outside_entry(b: Path, target: str, digest: str | None = None) -> None:
    real = hashlib.sha256(Path("/" + target.lstrip("/")).read_bytes()).hexdigest()
    with (b / "MANIFEST.sha256").open("a") as f:
        f.write(f"{digest or real}  {target if target.startswith('/') else '../' * len(b.parts) + target}\n")


@pytest.mark.parametrize("target", ["etc/hostname", "/etc/passwd"])
def test_manifest_entry_outside_the_bundle(bundle, tmp_path, target):
    if not Path("/" + target.lstrip("/")).is_file():
        pytest.skip(f"/{target.lstrip('/')} does not exist here")
    b = copy_of(bundle, tmp_path)
    _outside_entry(b, target)
    line = failed(b)
    assert "files:" in line and "MANIFEST.sha256:" in line and ("absolute" in line or "'..'" in line)


def test_wrong_digest_of_a_file_outside_prints_none_of_its_digest(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    _outside_entry(b, "/etc/passwd", "0" * 64)
    real = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest()
    rc, out = verify(b)
    assert rc == 1 and real[:8] not in out and "absolute" in out


def test_symlink_out_of_the_bundle(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    outside = tmp_path / "report.html"
    shutil.move(b / "report" / "report.html", outside)  # same bytes, kept outside the bundle
    (b / "report" / "report.html").symlink_to(outside)
    resign(b)
    line = failed(b)
    assert "files:" in line and "report/report.html: a symbolic link" in line


def test_unlisted_file_and_missing_file(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    (b / "tables" / "extra.csv").write_text("a\n1\n")
    assert "files:" in (line := failed(b)) and "tables/extra.csv: not listed in MANIFEST.sha256" in line
    (b / "tables" / "extra.csv").unlink()
    (b / "report" / "figures" / "gpu.svg").unlink()
    assert "report/figures/gpu.svg: listed in MANIFEST.sha256 but missing" in failed(b)


# -- a trusted head ---------------------------------------------------------------------------

def test_a_truncated_chain_is_caught_only_with_the_true_head(bundle, tmp_path):
    """The newest verdict's event, row and document removed and every head rewritten to the
    shorter chain: nothing inside the bundle can show it; the head a reviewer holds does."""
    b = copy_of(bundle, tmp_path)
    true_head = tmp_path / "head.json"
    shutil.copy(b / "audit" / "head.json", true_head)
    log = b / "audit" / "audit_events.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    # the newest verdict and what follows it (the requester's sign-off names it: subject = its id)
    at = max(i for i, e in enumerate(events) if e["kind"] == "verdict_issued")
    last, prev = events[at], events[at - 1]
    assert all(e["subject"] == last["subject"] for e in events[at:]), [e["kind"] for e in events[at:]]
    for _ in events[at:]:
        subprocess.run(["sed", "-i", "$d", str(log)], check=True)
    tail = events[-1]  # the head the export recorded
    parquet(b / "tables" / "audit_events.parquet", f"SELECT * FROM t WHERE seq < {last['seq']}")
    parquet(b / "tables" / "verdicts.parquet", f"SELECT * FROM t WHERE verdict_id <> '{last['subject']}'")  # its row too
    for p in [b / "verdicts" / f"{last['subject']}.json", b / "verdicts" / f"{last['subject']}.scores.parquet"]:
        p.unlink(missing_ok=True)
    sed(f's/"length": {tail["seq"]},/"length": {prev["seq"]},/; s/"head_hash": "{tail["event_hash"]}"/'
        f'"head_hash": "{prev["event_hash"]}"/', b / "audit" / "head.json", *(b / "verdicts").glob("*.json"))
    sed(f'/{last["subject"]}/d; s/seq {tail["seq"]}, `{tail["event_hash"]}`/seq {prev["seq"]}, `{prev["event_hash"]}`/',
        b / "REPRODUCE.md")
    text = (b / "REPRODUCE.md").read_text()  # its sign-off gone too: the section says none, as export writes it
    if "## Sign-offs\n\n\n" in text:
        text = text.replace("## Sign-offs\n\n\n", "## Sign-offs\n\n- none recorded (`campaign accept ... --requester NAME "
                            "--statement TEXT`)\n\n")
        (b / "REPRODUCE.md").write_text(text)
    resign(b)
    rc, out = verify(b)
    assert rc == 0, out  # coherent: what verify cannot prove alone (docs/results.md)
    line = failed(b, "--head", true_head)
    assert "audit:" in line and "tail truncated" in line
    line = failed(b, "--head", tail["event_hash"])
    assert "audit:" in line and tail["event_hash"][:12] in line
    assert verify(b, "--head", prev["event_hash"])[0] == 0
