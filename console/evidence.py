"""The evidence bundle (docs/results.md): everything a reviewer needs to check a campaign's
verdicts without the store, and the check itself.

    campaign export evidence PLAN DIR     write the bundle
    campaign evidence verify DIR          re-hash every file, re-derive every verdict

Layout: plans/<hash>.json (canonical JSON of the plan and its addenda), audit/audit_events.jsonl and
audit/head.json, tables/<table>.parquet and .csv (runs, requests, chunks, gpu_samples,
quality_scores, exclusions, plans, audit_events, run_metrics, validator_runs), verdicts/<id>.json (each document as
`campaign export verdict` writes it) and verdicts/<id>.scores.parquet (the gate's input table of a
quality verdict), report/report.html and report/figures/*.png|svg, REPRODUCE.md, and
MANIFEST.sha256 (`sha256  path` of every other file).

Verify loads the bundled tables into a scratch DuckDB store and runs the project's own code on them:
the audit chain, the plan hashes, every run's metrics from its requests and chunks (equal to the
bundled `run_metrics`), each quality verdict's input table (its hash, and every value against
quality_scores) and its checks, each throughput verdict's paired ratios and bounds — all compared
bit for bit with the verdict documents. The first mismatch names the file or verdict.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from data.anchor import current_head
from data.audit import verify_chain
from data.errors import CampaignError, first_line
from data.hashing import canonical_json, sha256_file
from data.store import Store
from data.verdicts import document_sha256

MANIFEST = "MANIFEST.sha256"
REPRODUCE = "REPRODUCE.md"
TABLES = ("runs", "requests", "chunks", "gpu_samples", "quality_scores", "exclusions", "plans", "audit_events",
          "run_metrics", "validator_runs")
LATER_TABLES = ("validator_runs",)  # absent from bundles written before it existed
CHECK_FIELDS = ("status", "n_ids", "n_expected", "point", "bound", "base_value", "cand_value", "margin")
RULE_FIELDS = ("status", "n_pairs", "geo_mean_ratio", "lower_bound_ratio", "min_ratio")


class EvidenceMismatch(CampaignError):
    """A bundled file or verdict does not match what its data re-derives."""


# -- export -----------------------------------------------------------------------------------

def plan_family(store: Store, plan_hash: str) -> list[str]:
    """The plan, its ancestors and every addendum below it (frozen order)."""
    from data.manifest import plan_lineage

    rows = store.con.execute("SELECT plan_hash, parent_hash FROM plans ORDER BY frozen_at").fetchall()
    lineage = plan_lineage(store, plan_hash)
    family = set(lineage)
    grew = True
    while grew:
        grew = False
        for h, parent in rows:
            if parent in family and h not in family:
                family.add(h)
                grew = True
    return [h for h, _ in rows if h in family]


def _write_table(store: Store, table: str, sql: str, params: list, out: Path) -> int:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    t = store.relation(sql, params).to_arrow_table()
    pq.write_table(t, out / f"{table}.parquet")
    pacsv.write_csv(t, out / f"{table}.csv")
    return t.num_rows


def export_bundle(store: Store, plan: Any, out: Path, *, html: bool = True) -> dict[str, Any]:
    """Write the bundle for `plan` into `out` (created; must be empty or absent)."""
    from data.verdicts import get_verdict
    from stats.metrics import plan_cell_runs
    from stats.metrics.stored import metrics_for_runs
    from stats.quality.scoring import scores_frame

    if out.exists() and any(out.iterdir()):
        raise CampaignError(f"{out}: not empty; the bundle goes into a new folder")
    hashes = plan_family(store, plan.hash)
    marks = ", ".join("?" for _ in hashes)
    for sub in ("plans", "audit", "tables", "verdicts", "report"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    for h, text in store.con.execute(f"SELECT plan_hash, canonical_json FROM plans WHERE plan_hash IN ({marks})",
                                     hashes).fetchall():
        (out / "plans" / f"{h}.json").write_text(text, encoding="utf-8")
    # every run's stored metrics under its plan's parameters (computed now where none are stored)
    from data.plans import plan_from_store
    for h in hashes:
        p = plan_from_store(store, h)
        metrics_for_runs(store, [r for r in store.query("SELECT run_id, status FROM runs WHERE plan_hash = ?", [h])],
                         p.metrics)
    plan_cell_runs(store, plan)
    in_plan = f"SELECT run_id FROM runs WHERE plan_hash IN ({marks})"
    counts = {
        "runs": _write_table(store, "runs", f"SELECT * FROM runs WHERE plan_hash IN ({marks}) ORDER BY run_id", hashes, out / "tables"),
        "requests": _write_table(store, "requests", f"SELECT * FROM requests WHERE run_id IN ({in_plan}) "
                                 "ORDER BY run_id, request_index", hashes, out / "tables"),
        "chunks": _write_table(store, "chunks", f"SELECT * FROM chunks WHERE run_id IN ({in_plan}) "
                               "ORDER BY run_id, request_index, chunk_index", hashes, out / "tables"),
        "gpu_samples": _write_table(store, "gpu_samples", f"SELECT * FROM gpu_samples WHERE run_id IN ({in_plan}) "
                                    "ORDER BY run_id, gpu_index, t_ns", hashes, out / "tables"),
        "quality_scores": _write_table(store, "quality_scores", f"SELECT * FROM quality_scores WHERE run_id IN ({in_plan}) "
                                       "ORDER BY run_id, request_index, scorer_id", hashes, out / "tables"),
        "exclusions": _write_table(store, "exclusions", f"SELECT * FROM exclusions WHERE run_id IN ({in_plan}) "
                                   "ORDER BY run_id", hashes, out / "tables"),
        "plans": _write_table(store, "plans", f"SELECT * FROM plans WHERE plan_hash IN ({marks}) ORDER BY frozen_at",
                              hashes, out / "tables"),
        "audit_events": _write_table(store, "audit_events", "SELECT * FROM audit_events ORDER BY seq", [], out / "tables"),
        "run_metrics": _write_table(store, "run_metrics", f"SELECT m.* FROM run_metrics m JOIN runs r USING (run_id) "
                                    f"WHERE r.plan_hash IN ({marks}) AND m.metrics_version = ? ORDER BY run_id, params_sha256",
                                    [*hashes, _metrics_version()], out / "tables"),
        "validator_runs": _write_table(store, "validator_runs", f"SELECT * FROM validator_runs WHERE plan_hash IN ({marks}) "
                                       "ORDER BY started_at, validator_run_id", hashes, out / "tables"),
    }
    with (out / "audit" / "audit_events.jsonl").open("w", encoding="utf-8") as f:
        for e in store.query("SELECT seq, CAST(event_time AS VARCHAR) AS event_time, kind, plan_hash, subject, "
                             "payload_json, prev_hash, event_hash FROM audit_events ORDER BY seq"):
            f.write(canonical_json(e) + "\n")
    head = current_head(store).document(store.path)
    (out / "audit" / "head.json").write_text(json.dumps(head, indent=2) + "\n", encoding="utf-8")
    verdict_ids = [r[0] for r in store.con.execute(
        f"SELECT verdict_id FROM verdicts WHERE plan_hash IN ({marks}) ORDER BY created_at, verdict_id", hashes).fetchall()]
    for vid in verdict_ids:
        row = get_verdict(store, vid)
        doc = row["document"]
        if doc is None:
            raise CampaignError(f"verdict {vid}: stored without a document; it cannot be bundled")
        (out / "verdicts" / f"{vid}.json").write_text(json.dumps({**doc, "audit_head": head}, indent=2) + "\n",
                                                      encoding="utf-8")
        if row["kind"] == "quality" and row["plan_hash"]:
            from stats.gates import frame_sha256

            frame = scores_frame(store, judged_plan(store, row["plan_hash"], doc))
            if frame_sha256(frame) != (doc.get("inputs") or {}).get("sha256"):
                raise CampaignError(f"verdict {vid}: its input table no longer rebuilds from the store (sha256 "
                                    f"{frame_sha256(frame)[:16]}… vs {str((doc.get('inputs') or {}).get('sha256'))[:16]}… "
                                    "recorded): scores, runs or audio files changed since it was issued")
            _write_frame(frame, out / "verdicts" / f"{vid}.scores.parquet")
    if html:
        from console.html_report import write_report
        from stats.results.plan_results import load_plan_results

        write_report(store, load_plan_results(store, plan), out / "report" / "report.html", out / "report" / "figures")
    (out / REPRODUCE).write_text(reproduce_text(plan, verdict_ids, head), encoding="utf-8")
    write_manifest(out)
    return {"dir": str(out), "counts": counts, "verdicts": verdict_ids, "head": head}


def _metrics_version() -> str:
    from stats.metrics import METRICS_VERSION
    return METRICS_VERSION


def _write_frame(frame, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    meta = {**(t.schema.metadata or {}), b"omni_campaign.frame_attrs": json.dumps(frame.attrs, default=str).encode()}
    pq.write_table(t.replace_schema_metadata(meta), path)


def reproduce_text(plan: Any, verdict_ids: list[str], head: dict[str, Any]) -> str:
    lines = [
        f"# Reproducing the evidence of plan {plan.name} ({plan.hash})", "",
        f"Audit head at export: seq {head['length']}, `{head['head_hash']}`.", "",
        "1. Check every file and re-derive every verdict from the bundled data alone:", "",
        "       sha256sum -c MANIFEST.sha256", "       campaign evidence verify .", "",
        "2. From the original store (`campaign.duckdb`), the same numbers and verdicts:", "",
        f"       campaign audit verify --db campaign.duckdb --against verdicts/{verdict_ids[0]}.json" if verdict_ids
        else "       campaign audit verify --db campaign.duckdb",
        f"       campaign report {plan.hash} --db campaign.duckdb",
        f"       campaign report {plan.hash} --db campaign.duckdb --html report.html --figures figures",
        f"       campaign gate {plan.source_path or 'plan.json'} --db campaign.duckdb --dry-run",
    ]
    lines += [f"       campaign export verdict {vid} --db campaign.duckdb -o {vid}.json" for vid in verdict_ids]
    lines += ["", "3. Each verdict document carries a numpy snippet (`reproduce.numpy`) that recomputes its bounds "
              "from its own `cells` (quality) or `checks[].pairs` (throughput).", "",
              "Files: plans/ (canonical plan JSON, named by hash), audit/ (the hash-chained log and its head), "
              "tables/ (Parquet and CSV), verdicts/ (documents; *.scores.parquet = a quality gate's input table), "
              "report/ (HTML report, figures as PNG and SVG). Definitions: docs/results.md and docs/statistics.md "
              "of the console.", ""]
    return "\n".join(lines)


def write_manifest(out: Path) -> None:
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != MANIFEST)
    (out / MANIFEST).write_text("".join(f"{sha256_file(p)}  {p.relative_to(out).as_posix()}\n" for p in files),
                                encoding="utf-8")


# -- verify -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    name: str
    detail: str


def check_manifest(root: Path) -> Step:
    mf = root / MANIFEST
    if not mf.is_file():
        raise EvidenceMismatch(f"{mf}: missing")
    listed: dict[str, str] = {}
    for n, line in enumerate(mf.read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise EvidenceMismatch(f"{MANIFEST}:{n}: not a 'sha256  path' line")
        listed[name] = digest
    for name, digest in listed.items():
        p = root / name
        if not p.is_file():
            raise EvidenceMismatch(f"{name}: listed in {MANIFEST} but missing")
        got = sha256_file(p)
        if got != digest:
            raise EvidenceMismatch(f"{name}: sha256 {got[:16]}… differs from {MANIFEST} ({digest[:16]}…)")
    extra = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != MANIFEST
                   and p.relative_to(root).as_posix() not in listed)
    if extra:
        raise EvidenceMismatch(f"{extra[0]}: not listed in {MANIFEST}")
    return Step("manifest", f"{len(listed)} files, every sha256 matches")


def load_scratch(root: Path, scratch: Path) -> Store:
    """A scratch store holding the bundled tables (the project's own schema)."""
    store = Store(scratch)
    for t in TABLES:
        p = root / "tables" / f"{t}.parquet"
        if not p.is_file() and t in LATER_TABLES:
            continue
        if not p.is_file():
            raise EvidenceMismatch(f"tables/{t}.parquet: missing")
        try:
            store.con.execute(f"INSERT INTO {t} BY NAME SELECT * FROM read_parquet(?)", [str(p)])
        except Exception as exc:  # duckdb raises several error types for a damaged file
            raise EvidenceMismatch(f"tables/{t}.parquet: cannot be read into the store ({first_line(exc)})") from None
    return store


def _same(a: Any, b: Any) -> bool:
    """Bit-identical numbers (None == None; NaN/inf are stored as None)."""
    if isinstance(a, float) and not math.isfinite(a):
        a = None
    if isinstance(b, float) and not math.isfinite(b):
        b = None
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return float(a) == float(b)


def _compare(where: str, stored: dict[str, Any], derived: dict[str, Any], fields: Iterable[str]) -> None:
    for f in fields:
        if not _same(stored.get(f), derived.get(f)):
            raise EvidenceMismatch(f"{where}: {f} re-derived as {derived.get(f)!r}, the document says {stored.get(f)!r}")


def check_plans(root: Path, store: Store) -> Step:
    from data.plans import hash_matches

    n = 0
    for p in sorted((root / "plans").glob("*.json")):
        row = store.scalar("SELECT canonical_json FROM plans WHERE plan_hash = ?", [p.stem])
        text = p.read_text(encoding="utf-8")
        if row != text:
            raise EvidenceMismatch(f"plans/{p.name}: differs from tables/plans.parquet")
        if not hash_matches(json.loads(text), p.stem):
            raise EvidenceMismatch(f"plans/{p.name}: content does not hash to {p.stem[:12]}")
        n += 1
    return Step("plans", f"{n} plan document(s) hash to their names")


def check_audit(root: Path, store: Store) -> Step:
    chain = verify_chain(store)
    if not chain.ok:
        raise EvidenceMismatch(f"tables/audit_events.parquet: {chain.message}")
    head = json.loads((root / "audit" / "head.json").read_text(encoding="utf-8"))
    got = current_head(store)
    if (got.length, got.head_hash) != (head.get("length"), head.get("head_hash")):
        raise EvidenceMismatch(f"audit/head.json: head seq {head.get('length')} does not match the bundled chain "
                               f"(seq {got.length})")
    lines = (root / "audit" / "audit_events.jsonl").read_text(encoding="utf-8").splitlines()
    hashes = [json.loads(x)["event_hash"] for x in lines]
    stored = [r[0] for r in store.con.execute("SELECT event_hash FROM audit_events ORDER BY seq").fetchall()]
    if hashes != stored:
        raise EvidenceMismatch("audit/audit_events.jsonl: differs from tables/audit_events.parquet")
    return Step("audit", f"{chain.message}; head seq {got.length}")


def check_run_metrics(store: Store) -> Step:
    from data.metric_params import MetricParams
    from stats.metrics.stored import compute_from_rows

    rows = store.query("SELECT run_id, params_json, metrics_json FROM run_metrics ORDER BY run_id")
    fresh = compute_from_rows(store, [(r["run_id"], MetricParams.from_mapping(json.loads(r["params_json"]))) for r in rows])
    for r in rows:
        if json.dumps(fresh[r["run_id"]].to_dict()) != r["metrics_json"]:
            raise EvidenceMismatch(f"run {r['run_id']}: metrics re-derived from tables/requests and tables/chunks "
                                   "differ from tables/run_metrics")
    return Step("run metrics", f"{len(rows)} run(s) re-derived from their requests and chunks")


def _frame(root: Path, vid: str):
    import pyarrow.parquet as pq

    p = root / "verdicts" / f"{vid}.scores.parquet"
    if not p.is_file():
        raise EvidenceMismatch(f"verdicts/{p.name}: missing (the quality verdict's input table)")
    t = pq.read_table(p)
    frame = t.to_pandas()
    attrs = json.loads((t.schema.metadata or {}).get(b"omni_campaign.frame_attrs", b"{}"))
    frame.attrs.update(attrs)
    return frame


def _scores_agree(store: Store, frame, doc: dict[str, Any], vid: str) -> None:
    """Every value of the input table equals the bundled quality score it came from."""
    ids = (doc.get("inputs") or {}).get("scorers") or {}
    rows = store.query("SELECT run_id, utt_id, scorer_id, status, value, wer_substitutions + wer_deletions + "
                       "wer_insertions AS errors, wer_ref_words FROM quality_scores")
    by = {(r["run_id"], r["utt_id"], r["scorer_id"]): r for r in rows}
    for rec in frame.itertuples(index=False):
        if rec.run_id is None:
            continue
        for col, metric in (("wer_errors", "wer"), ("sim", "sim"), ("utmos", "utmos")):
            v = getattr(rec, col)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            sid = ids.get(metric) or (ids.get("mos") if metric == "utmos" else None)  # the MOS slot: scoring's 'mos'
            s = by.get((rec.run_id, rec.utt_id, sid))
            want = None if s is None or s["status"] != "ok" else (s["errors"] if metric == "wer" else s["value"])
            words_differ = s is not None and metric == "wer" and float(s["wer_ref_words"]) != float(rec.wer_words)
            if want is None or float(want) != float(v) or words_differ:
                raise EvidenceMismatch(f"verdict {vid}: {metric} of {rec.utt_id} in run {rec.run_id} is {v!r} in its "
                                       f"input table but {want!r} in tables/quality_scores")


def judged_plan(store: Store, plan_hash: str, doc: dict[str, Any]):
    """The plan as the quality verdict `doc` judged it: a plan with several quality candidates
    issues one verdict per candidate, each over its own view (`Plan.for_candidate`), which the
    document records as its effective plan."""
    from data.plans import plan_from_store

    plan = plan_from_store(store, plan_hash)
    cand = (((doc.get("plan") or {}).get("effective") or {}).get("quality") or {}).get("candidate")
    return plan.for_candidate(cand) if cand in plan.quality_candidates else plan


def with_validators(store: Store, plan: Any, doc: dict[str, Any], verdict: str) -> str:
    """The verdict under the validator precondition as it stood when it was issued: bundled
    validator runs and launches before its verdict_issued event (docs/plans.md, "Validators"). A
    document without `validators` was issued before validators gated verdicts."""
    from data.validators import precondition

    if not isinstance(doc.get("validators"), dict):
        return verdict
    issued = store.scalar("SELECT seq FROM audit_events WHERE kind = 'verdict_issued' AND subject = ?",
                          [doc["verdict_id"]])
    return precondition(store, plan, doc["validators"]["engine"], before_seq=issued).verdict(verdict)


def check_quality(root: Path, store: Store, doc: dict[str, Any]) -> str:
    from stats.gates import GateConfig, evaluate_gates, frame_sha256

    vid = doc["verdict_id"]
    frame = _frame(root, vid)
    inputs = doc.get("inputs") or {}
    if frame_sha256(frame) != inputs.get("sha256"):
        raise EvidenceMismatch(f"verdict {vid}: its input table verdicts/{vid}.scores.parquet hashes to "
                               f"{frame_sha256(frame)[:16]}…, the document says {str(inputs.get('sha256'))[:16]}…")
    _scores_agree(store, frame, doc, vid)
    plan = judged_plan(store, doc["plan"]["hash"], doc)
    cfg = GateConfig.from_plan(plan)
    result = evaluate_gates(frame, cfg, scorer_status=inputs.get("scorer_status") or {}, attribution=False,
                            source=inputs.get("source") or "scores")
    derived = result.checks_dicts()
    stored = doc.get("checks") or []
    if len(derived) != len(stored):
        raise EvidenceMismatch(f"verdict {vid}: {len(derived)} checks re-derived, the document has {len(stored)}")
    for s, d in zip(stored, derived):
        _compare(f"verdict {vid} C{s.get('concurrency')} {s.get('metric')}", s, d, CHECK_FIELDS)
    verdict = with_validators(store, plan, doc, result.verdict)
    if verdict != doc.get("verdict"):
        raise EvidenceMismatch(f"verdict {vid}: re-derived {verdict}, the document says {doc.get('verdict')}")
    return f"{vid} {verdict}: {len(derived)} checks, bounds bit-identical"


def check_throughput(store: Store, doc: dict[str, Any]) -> str:
    from data.plans import plan_from_store
    from stats.throughput_rules import collect_values, evaluate_rule

    vid = doc["verdict_id"]
    plan = plan_from_store(store, doc["plan"]["hash"])
    name = (doc.get("decision_rule") or {}).get("name")
    rule = next((r for r in plan.decision_rules if r.name == name), None)
    if rule is None:
        raise EvidenceMismatch(f"verdict {vid}: the bundled plan {plan.hash[:12]} has no decision rule {name!r}")
    rr = evaluate_rule(rule, collect_values(store, plan, rule))
    stored = doc.get("checks") or []
    derived = rr.checks_dicts()
    if len(derived) != len(stored):
        raise EvidenceMismatch(f"verdict {vid}: {len(derived)} cells re-derived, the document has {len(stored)}")
    for s, d in zip(stored, derived):
        where = f"verdict {vid} C{s.get('concurrency')}"
        _compare(where, s, d, RULE_FIELDS)
        sp, dp = s.get("pairs") or [], d.get("pairs") or []
        if len(sp) != len(dp):
            raise EvidenceMismatch(f"{where}: {len(dp)} pairs re-derived, the document has {len(sp)}")
        for a, b in zip(sp, dp):
            _compare(f"{where} repeat {a.get('repeat')}", a, b, ("candidate_run", "reference_run", "candidate",
                                                                   "reference", "ratio"))
    verdict = with_validators(store, plan, doc, rr.verdict)
    if verdict != doc.get("verdict"):
        raise EvidenceMismatch(f"verdict {vid}: re-derived {verdict}, the document says {doc.get('verdict')}")
    return f"{vid} {verdict}: {len(derived)} cell(s), ratios and lower bounds bit-identical"


def check_verdicts(root: Path, store: Store) -> Step:
    done = []
    for p in sorted((root / "verdicts").glob("*.json")):
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise EvidenceMismatch(f"verdicts/{p.name}: not valid JSON ({first_line(exc)})") from None
        body = {k: v for k, v in doc.items() if k != "audit_head"}
        issued = store.query("SELECT payload_json FROM audit_events WHERE kind = 'verdict_issued' AND subject = ?",
                             [doc.get("verdict_id")])
        if not issued or json.loads(issued[0]["payload_json"]).get("document_sha256") != document_sha256(body):
            raise EvidenceMismatch(f"verdicts/{p.name}: document does not match its verdict_issued audit event")
        if doc.get("kind") == "quality":
            done.append(check_quality(root, store, doc))
        else:
            done.append(check_throughput(store, doc))
    return Step("verdicts", "; ".join(done) if done else "no verdicts in the bundle")


def verify_bundle(root: Path, on_step: Callable[[Step], None] | None = None) -> list[Step]:
    """Every check in order; raises EvidenceMismatch at the first mismatch."""
    if not root.is_dir():
        raise CampaignError(f"{root}: no such folder")
    steps = []

    def done(s: Step) -> None:
        steps.append(s)
        if on_step:
            on_step(s)

    done(check_manifest(root))
    with tempfile.TemporaryDirectory(prefix="evidence-verify-") as tmp:
        store = load_scratch(root, Path(tmp) / "bundle.duckdb")
        try:
            done(check_plans(root, store))
            done(check_audit(root, store))
            done(check_run_metrics(store))
            done(check_verdicts(root, store))
        finally:
            store.close()
    return steps
