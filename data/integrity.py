"""`audit verify`: is every stored result still the one the audit chain announced?

The chain (data/audit.py) protects the events; these checks tie the other tables to them: every
plan row to its freeze event, every verdict row to its `verdict_issued` event, every exclusion to
its `run_excluded` event, every validator run to its `validator_run` event, every candidate to its last
`candidate_recorded` event, every run's rows to the digest its run-end event recorded
(data/digest.py), and the chain's head to the anchors kept outside the table (data/anchor.py).
What this proves, and what it cannot, is in docs/integrity.md.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TypeVar

import duckdb

from data.anchor import Head, anchor_path, holds, read_head
from data.audit import epoch_us, events, verify_chain
from data.digest import RUN_TABLES, run_digests
from data.errors import CampaignError, first_line
from data.hashing import sha256_text
from data.integrity_checks import (FAILED, NOT_CHECKED, OK, Check, by_subject, check_result, row_matches,
                                   rows_against_events)
from data.integrity_record import CHECKS as RECORD_CHECKS
from data.queries import run_seq
from data.schema import SCHEMA_VERSION, TABLES
from data.score_digest import ScoresStored, digest_of, score_columns, score_lines
from data.store import Store, is_corruption
from data.verdicts import document_sha256, stored_json_sha256

# -- the checks -------------------------------------------------------------------------------
def check_file(store: Store, evs: list[dict[str, Any]]) -> Check:
    """Read every row of every table: DuckDB verifies each block's checksum as it reads it."""
    size = store.path.stat().st_size if store.path.is_file() else 0
    present = {r[0] for r in store.con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    rows = 0
    for t in TABLES:
        if t.name not in present:
            continue
        try:
            for batch in store.relation(f"SELECT * FROM {t.name}").to_arrow_reader(65536):
                rows += batch.num_rows
        except duckdb.Error as exc:
            if is_corruption(exc):
                return Check("store file", FAILED, f"{store.path}: corrupt: table {t.name} cannot be read back "
                                                   f"({first_line(exc)})")
            raise
    return Check("store file", OK, f"{size} bytes, {rows} rows read back, every block's checksum holds")


def check_schema(store: Store, evs: list[dict[str, Any]]) -> Check:
    cols = defaultdict(set)
    for table, column in store.con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall():
        cols[table].add(column)
    problems = []
    for t in TABLES:
        if t.name not in cols:
            problems.append(f"table {t.name} is missing (dropped)")
            continue
        missing = [c for c in t.column_names if c not in cols[t.name]]
        if missing:
            problems.append(f"table {t.name}: column(s) {', '.join(missing)} missing")
    return check_result("schema", problems, f"version {store.schema_version()} (console {SCHEMA_VERSION}), "
                                       f"{len(TABLES)} tables with every declared column")


def check_chain(store: Store, evs: list[dict[str, Any]]) -> Check:
    res = verify_chain(store)
    if res.ok:
        return Check("chain", OK, f"audit chain OK: {res.message}")
    return Check("chain", FAILED, f"audit chain BROKEN at seq {res.first_broken_seq}: {res.message}")


@dataclass(frozen=True)
class Exported:
    """An anchor given to `audit verify --against`, and the verdict document it came in (if any)."""

    label: str
    head: Head
    verdict: dict[str, Any] | None = None


def load_exported(path: str | Path) -> Exported:
    """An anchor file, an exported verdict document or a runs export (data/anchor.py)."""
    head = read_head(path)
    return Exported(str(path), head, _verdict_document(path))


def _verdict_document(path: str | Path) -> dict[str, Any] | None:
    """The exported verdict document in `path`, or None (a Parquet or CSV export, an anchor file:
    the head is all those carry)."""
    try:
        parsed = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) and "verdict_id" in parsed and "audit_head" in parsed else None


def check_anchors(store: Store, against: Sequence[Exported]) -> Check:
    side = anchor_path(store.path)
    heads = [(x.label, x.head) for x in against]
    if side.exists():
        try:
            heads.insert(0, (str(side), read_head(side)))
        except CampaignError as exc:
            return Check("anchor", FAILED, f"{exc} (the side anchor is damaged)")
    if not heads:
        return Check("anchor", NOT_CHECKED, f"no anchor: {side.name} is absent and no --against FILE was given, "
                                            "so deleted newest events cannot be seen")
    problems = [p for label, head in heads if (p := holds(store, head, label))]
    held = ", ".join(f"{Path(label).name} (seq {head.length})" for label, head in heads)
    return check_result("anchor", problems, f"the chain still holds every anchored head: {held}")


def check_plans(store: Store, evs: list[dict[str, Any]]) -> Check:
    frozen = {e["plan_hash"]: e for e in evs if e["kind"] in ("plan_frozen", "addendum_frozen")}
    rows = store.query("SELECT plan_hash, parent_hash, kind, name, canonical_json, source_path FROM plans")
    problems = []
    for r in rows:
        h = r["plan_hash"]
        e = frozen.get(h)
        if e is None:
            problems.append(f"plan {h[:12]}: no plan_frozen/addendum_frozen event for it (inserted or re-hashed by hand)")
            continue
        p, seq = e["payload"], e["seq"]
        expected_kind = "addendum" if e["kind"] == "addendum_frozen" else "plan"
        fields = {"kind": expected_kind, "name": p.get("name"), "source_path": p.get("source_path"),
                  "parent_hash": p.get("parent_hash")}
        wrong = [f"{k} is {r[k]!r}, the freeze event says {v!r}" for k, v in fields.items() if r[k] != v]
        if wrong:
            problems.append(f"plan {h[:12]}: {wrong[0]} (seq {seq})")
        elif "row_sha256" not in p and sha256_text(r["canonical_json"]) != h:
            problems.append(f"plan {h[:12]}: canonical_json no longer hashes to its plan_hash (edited)")
        elif not row_matches(store, "plans", "plan_hash", h, p):
            problems.append(f"plan {h[:12]}: row differs from the one frozen at seq {seq} (edited)")
    stored = {r["plan_hash"] for r in rows}
    problems += [f"plan {h[:12]}: frozen at seq {e['seq']} but its plans row is missing (deleted)"
                 for h, e in frozen.items() if h not in stored]
    return check_result("plans", problems, f"{len(rows)} plan row(s) match their freeze events")


def check_manifests(store: Store, evs: list[dict[str, Any]]) -> Check:
    frozen = by_subject(evs, "manifest_frozen")
    rows = store.query("SELECT manifest_hash, manifest_json FROM workload_manifests")
    problems = []
    for r in rows:
        h = r["manifest_hash"]
        if h not in frozen:
            problems.append(f"manifest {h[:12]}: no manifest_frozen event for it (inserted by hand)")
        elif sha256_text(r["manifest_json"]) != h:
            problems.append(f"manifest {h[:12]}: manifest_json no longer hashes to its manifest_hash (edited)")
    stored = {r["manifest_hash"] for r in rows}
    problems += [f"manifest {h[:12]}: frozen at seq {e['seq']} but its row is missing (deleted)"
                 for h, e in frozen.items() if h not in stored]
    return check_result("manifests", problems, f"{len(rows)} workload manifest(s) match their freeze events")


_VERDICT_FIELDS = ("kind", "name", "verdict", "method", "draws", "seed")
_VERDICT_JSON = (("inputs_json", "inputs_sha256"), ("checks_json", "checks_sha256"), ("document_json", "document_sha256"))


def _verdict_json_problems(r: dict[str, Any], p: dict[str, Any], seq: int) -> list[str]:
    return [f"{col} differs from the one issued (seq {seq} records sha256 {p.get(key) or '-'})"
            for col, key in _VERDICT_JSON if key in p and stored_json_sha256(r[col]) != p[key]]


def check_verdicts(store: Store, evs: list[dict[str, Any]]) -> Check:
    problems, n, _ = rows_against_events(store, evs, table="verdicts", key="verdict_id", kind="verdict_issued",
                                       noun="verdict", verb="issued", fields=_VERDICT_FIELDS, extra=_verdict_json_problems)
    return check_result("verdicts", problems, f"{n} verdict row(s) match their verdict_issued events")


def check_equivalence(store: Store, evs: list[dict[str, Any]]) -> Check:
    """equivalence_measures rows equal their verdict's issued checks (data/equivalence_rows.py)."""
    from data.equivalence_rows import equivalence_problems

    problems, n = equivalence_problems(store)
    return check_result("equivalence", problems, f"{n} equivalence verdict(s) match their stored rows")


def check_exclusions(store: Store, evs: list[dict[str, Any]]) -> Check:
    excluded = by_subject(evs, "run_excluded")
    rows = store.query("SELECT run_id, reason, audit_seq FROM exclusions")
    problems = []
    for r in rows:
        e = excluded.get(r["run_id"])
        if e is None:
            problems.append(f"exclusion of run {r['run_id']}: no run_excluded event for it (inserted by hand)")
        elif r["audit_seq"] != e["seq"] or r["reason"] != e["payload"].get("reason"):
            problems.append(f"exclusion of run {r['run_id']}: differs from its run_excluded event (seq {e['seq']})")
    stored = {r["run_id"] for r in rows}
    problems += [f"run {rid}: excluded at seq {e['seq']} but its exclusions row is missing (deleted: "
                 "the run is back in aggregates)" for rid, e in excluded.items() if rid not in stored]
    return check_result("exclusions", problems, f"{len(rows)} exclusion(s) match their run_excluded events")


_ATTEMPT_FIELDS = ("engine", "outcome", "reason", "launch_id")


def check_attempts(store: Store, evs: list[dict[str, Any]]) -> Check:
    """Every configuration tried is listed as recorded: a deleted startup failure or rejected
    candidate would hide what was tried before the one that was kept."""
    problems, n, _ = rows_against_events(store, evs, table="attempts", key="attempt_id", kind="attempt_recorded",
                                       noun="attempt", verb="recorded", fields=_ATTEMPT_FIELDS)
    return check_result("attempts", problems, f"{n} attempt(s) match their attempt_recorded events")


_LAUNCH_FIELDS = ("engine", "status")


def _launch_seqs(store: Store, evs: list[dict[str, Any]]) -> dict[str, int]:
    """launch_id -> the seq of the earliest event that names it (a run on it started, an attempt)."""
    on = dict(store.con.execute("SELECT run_id, launch_id FROM runs WHERE launch_id IS NOT NULL").fetchall())
    out: dict[str, int] = {}
    for e in evs:
        lid = on.get(e["subject"]) if e["kind"] == "run_started" else \
            e["payload"].get("launch_id") if e["kind"] == "attempt_recorded" else None
        if isinstance(lid, str):
            out.setdefault(lid, int(e["seq"]))
    return out


def check_launches(store: Store, evs: list[dict[str, Any]]) -> Check:
    """Every engine launch (what exactly ran: argv, revision, checkpoint hashes, how it ended)
    matches the launch_recorded event of its last write. Launches that started before the
    store's first launch_recorded event (a store older than these events) are counted, not
    compared (docs/integrity.md, "launches"). "Before" is the audit sequence, never started_at (a
    hand-inserted row can carry any date): a launch is placed by the earliest event that names it,
    the run_started of a run on it or an attempt_recorded naming it; one no event names is
    not placed, so not legacy."""
    since = next((e["seq"] for e in evs if e["kind"] == "launch_recorded"), None)  # evs are in seq order
    placed = _launch_seqs(store, evs)

    def legacy(r: dict[str, Any]) -> bool:
        return since is None or placed.get(r["launch_id"], since) < since

    problems, n, old = rows_against_events(store, evs, table="engine_launches", key="launch_id",
                                            kind="launch_recorded", noun="launch", verb="recorded",
                                            fields=_LAUNCH_FIELDS, order="started_at", last=True,
                                            unannounced_ok=legacy)
    note = f"; {old} from before launch events counted, not compared" if old else ""
    return check_result("launches", problems, f"{n} launch(es) match their launch_recorded events{note}")


_CANDIDATE_FIELDS = ("name", "status", "reason")


def check_candidates(store: Store, evs: list[dict[str, Any]]) -> Check:
    """Every candidate (a configuration tried and its fate: docs/results.md, "Candidates") matches
    the candidate_recorded event of its last change: a rejection edited away or a selection
    written by hand shows here."""
    problems, n, _ = rows_against_events(store, evs, table="candidates", key="config_sha256",
                                          kind="candidate_recorded", noun="candidate", verb="recorded",
                                          fields=_CANDIDATE_FIELDS, order="registered_at", last=True)
    return check_result("candidates", problems, f"{n} candidate(s) match their candidate_recorded events")


_VALIDATOR_RUN_FIELDS = ("name", "status", "exit_code")


def check_validator_runs(store: Store, evs: list[dict[str, Any]]) -> Check:
    """Every validator run (what ran, how it ended: the runs a PASS rests on, docs/plans.md
    "Validators") matches the validator_run event that announced it."""
    problems, n, _ = rows_against_events(store, evs, table="validator_runs", key="validator_run_id",
                                          kind="validator_run", noun="validator run", verb="recorded",
                                          fields=_VALIDATOR_RUN_FIELDS, order="started_at")
    return check_result("validator runs", problems, f"{n} validator run(s) match their validator_run events")


def _digest_problem(rid: str, seq: int, recorded: dict[str, Any], got: dict[str, Any]) -> str | None:
    for table in [t for t, _ in RUN_TABLES] + ["gpu_samples"]:
        want, have = recorded.get(table), got[table]  # run_digests gives every table, rows 0 included
        if want is None:
            continue
        if want["rows"] != have["rows"]:
            return (f"run {rid}: {table}: {have['rows']} row(s), the digest recorded at run end (seq {seq}) "
                    f"says {want['rows']} (rows deleted or added)")
        if "sha256" in want and want["sha256"] != have["sha256"]:
            return (f"run {rid}: {table}: content differs from the digest recorded at run end (seq {seq}) "
                    "(a stored value was edited)")
    return None


def check_runs(store: Store, evs: list[dict[str, Any]]) -> Check:
    started = by_subject(evs, "run_started")
    ended = by_subject(evs, "run_ended", last=True)
    rows = store.query(f"SELECT run_id, status FROM runs r ORDER BY {run_seq('r')} NULLS LAST, run_id")
    problems = []
    for r in rows:
        rid, status = r["run_id"], r["status"]
        if rid not in started:
            problems.append(f"run {rid}: not in the audit chain (no run_started event: inserted by hand)")
        elif rid not in ended and status != "running":
            problems.append(f"run {rid}: status {status!r} but the chain has no run_ended event for it")
        elif rid in ended and status != ended[rid]["payload"].get("status"):
            problems.append(f"run {rid}: status {status!r} but its run_ended event (seq {ended[rid]['seq']}) "
                            f"says {ended[rid]['payload'].get('status')!r}")
    stored = {r["run_id"] for r in rows}
    problems += [f"run {rid}: started at seq {e['seq']} but its runs row is missing (deleted)"
                 for rid, e in started.items() if rid not in stored]
    with_digest = {rid: e for rid, e in ended.items() if "digest" in e["payload"]}
    groups: dict[str, list[str]] = defaultdict(list)  # runs recorded with the same column lists
    for rid, e in with_digest.items():
        groups[json.dumps(e["payload"]["digest"]["columns"], sort_keys=True)].append(rid)
    for columns_json, rids in groups.items():
        got = run_digests(store, rids, json.loads(columns_json))
        for rid in rids:
            e = with_digest[rid]
            problem = _digest_problem(rid, e["seq"], e["payload"]["digest"]["tables"], got[rid])
            if problem:
                problems.append(problem)
    legacy = len(ended) - len(with_digest)
    note = f"; {legacy} run(s) ended before run digests were recorded: rows not compared" if legacy else ""
    return check_result("runs", problems, f"{len(with_digest)} run(s) match the digests recorded at run end{note}")


def check_scores(store: Store, evs: list[dict[str, Any]]) -> Check:
    """Every quality_scores row is the one a `scores_stored` event announced (data/score_digest.py):
    the rows a gate reads. Rows of passes from before score digests (a `scores_recorded` event
    without `batches`, at or after the row's scored_at) are counted, not compared."""
    announced = [(e["seq"], ScoresStored.from_payload(e["payload"])) for e in evs if e["kind"] == "scores_stored"]
    by_columns: dict[tuple[str, ...], list[tuple[int, ScoresStored]]] = defaultdict(list)
    for seq, a in announced:
        by_columns[a.columns].append((seq, a))
    problems: list[str] = []
    covered: set[tuple[str, str, int]] = set()
    current = tuple(score_columns())
    read = {current: score_lines(store, current)}  # one scan per recorded column list
    for columns, group in by_columns.items():
        if columns not in read:
            read[columns] = score_lines(store, columns)
        lines = read[columns]
        for seq, a in group:
            keys = a.keys()
            covered.update(keys)
            missing = [k for k in keys if k not in lines]
            if missing:
                _, rid, idx = missing[0]
                problems.append(f"scores {a.scorer_id}: {len(missing)} of the {a.rows} row(s) stored at seq {seq} "
                                f"are missing (deleted), first run {rid} request {idx}")
            elif digest_of(keys, lines) != a.sha256:
                problems.append(f"scores {a.scorer_id}: the {a.rows} row(s) stored at seq {seq} differ from their "
                                "digest (a stored score was edited)")
    legacy_until: dict[str, int] = {}  # scorer -> time of its newest pass that recorded no digests
    for e in evs:
        if e["kind"] == "scores_recorded" and "batches" not in e["payload"]:
            legacy_until[e["subject"]] = epoch_us(e["event_time"])
    legacy = 0
    for (sid, rid, idx), (_, scored_at) in sorted(read[current].items()):
        if (sid, rid, idx) in covered:
            continue
        if scored_at <= legacy_until.get(sid, -1):
            legacy += 1
        else:
            problems.append(f"score {sid} run {rid} request {idx}: not in the audit chain "
                            "(no scores_stored event: inserted by hand)")
    note = f"; {legacy} row(s) scored before score digests were recorded: not compared" if legacy else ""
    return check_result("scores", problems, f"{len(covered)} score row(s) match the digests recorded when stored{note}")


def check_sql_writes(store: Store, evs: list[dict[str, Any]]) -> Check:
    writes = [e for e in evs if e["kind"] == "sql_write"]
    if not writes:
        return Check("sql writes", OK, "none: no statement changed the store through `campaign sql --write`")
    seqs = ", ".join(str(e["seq"]) for e in writes[:10]) + (" ..." if len(writes) > 10 else "")
    return Check("sql writes", OK, f"{len(writes)} statement(s) changed the store by hand (seq {seqs}; "
                                   "`campaign audit log --kind sql_write`)")


CHECKS: tuple[tuple[str, Callable[[Store, list[dict[str, Any]]], Check]], ...] = (
    ("store file", check_file), ("schema", check_schema), ("chain", check_chain), ("plans", check_plans),
    ("manifests", check_manifests), ("verdicts", check_verdicts), ("exclusions", check_exclusions),
    ("runs", check_runs), ("attempts", check_attempts), ("launches", check_launches),
    ("validator runs", check_validator_runs), ("candidates", check_candidates), ("scores", check_scores),
    *RECORD_CHECKS, ("sql writes", check_sql_writes),
    ("equivalence", check_equivalence),
)


def check_exports(store: Store, evs: list[dict[str, Any]], against: Sequence[Exported]) -> Check | None:
    """An exported verdict document must be the one its `verdict_issued` event announced."""
    docs = [(x.label, x.verdict) for x in against if x.verdict is not None]
    if not docs:
        return None
    issued = by_subject(evs, "verdict_issued")
    problems = []
    for label, verdict in docs:
        vid = verdict.get("verdict_id")
        e = issued.get(vid) if isinstance(vid, str) else None
        body = {k: v for k, v in verdict.items() if k != "audit_head"}
        if e is None:
            problems.append(f"{label}: verdict {vid} was never issued in this store")
        elif document_sha256(body) != e["payload"].get("document_sha256"):
            problems.append(f"{label}: verdict {vid} differs from the document issued at seq {e['seq']} "
                            "(the export or the store was edited)")
    return check_result("exports", problems, f"{len(docs)} exported verdict document(s) match their verdict_issued events")


def verify_store(store: Store, against: Sequence[Exported] = ()) -> list[Check]:
    """Every check, in order; the first FAILED one is what `audit verify` names."""
    try:
        evs = events(store)
    except duckdb.Error:
        evs = []  # the schema / chain checks say why
    out: list[Check] = []
    for name, fn in CHECKS:
        out.append(_run(name, partial(fn, store, evs)))
        if fn is check_file and not out[-1].ok:
            return out  # nothing read from a damaged file is evidence either way
        if fn is check_chain:
            out.append(_run("anchor", lambda: check_anchors(store, against)))
        if fn is check_verdicts:
            exported = _run("exports", lambda: check_exports(store, evs, against))
            if exported is not None:
                out.append(exported)
    return out


R = TypeVar("R", bound=Optional[Check])  # what a check returns: a Check (or None: not applicable)


def _run(name: str, fn: Callable[[], R]) -> R | Check:
    try:
        return fn()
    except duckdb.Error as exc:
        if is_corruption(exc):
            return Check(name, FAILED, f"corrupt: {first_line(exc)}")
        return Check(name, FAILED, f"cannot be checked: {first_line(exc)}")
