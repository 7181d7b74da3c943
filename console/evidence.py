"""The evidence bundle (docs/results.md): everything a reviewer needs to check a campaign's
verdicts without the store, and the check itself.

    campaign export evidence PLAN DIR     write the bundle
    campaign evidence verify DIR          re-hash every file, re-check every row, re-derive every verdict

Layout: plans/<hash>.json (canonical JSON of the plan and its addenda), audit/audit_events.jsonl and
audit/head.json, tables/<table>.parquet and .csv (runs, requests, chunks, gpu_samples,
quality_scores, exclusions, plans, audit_events, run_metrics, validator_runs, engine_launches, attempts, candidates,
verdicts, equivalence_measures, server_metrics, and the record tables with requests.json.gz: console/evidence_record.py), verdicts/<id>.json (each document as
`campaign export verdict` writes it) and verdicts/<id>.scores.parquet (the gate's input table of a
quality verdict), report/report.html and report/figures/*.png|svg, REPRODUCE.md, and
MANIFEST.sha256 (`sha256  path` of every other file).

Verify refuses any link and any MANIFEST path outside the bundle before it opens a file, then
loads the bundled tables into a scratch DuckDB store and runs the project's own code on them: the
audit chain (every hash recomputed, in the table and in the jsonl), `campaign audit verify`'s plans,
runs, exclusions, scores, verdicts, attempts and launches checks (data/integrity.py) over the events of the bundle's
plans and its candidates check over the whole chain, every
run's metrics from its requests and chunks (equal to the bundled `run_metrics`), the server samples'
shape and each run's reconciliation from them, one document per
`verdict_issued` event under its own id and carrying the bundle's head, each quality verdict's input
table (its hash, and every value against quality_scores) and its checks, each throughput verdict's
paired ratios and bounds, each acceptance verdict's pieces, each equivalence verdict from its rows and the bundled
audio hashes (each kind's module under console/verdicts/) — all compared bit for bit with the verdict documents — and each CSV
against its Parquet table. report/ is derived and not verified. The first mismatch is named with
its check. What passing proves, and what it cannot: docs/results.md.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Sequence

from data import integrity
from data.anchor import Head, current_head, holds, read_head
from data.audit import event_hash, events, verify_chain
from data.errors import CampaignError, first_line
from data.hashing import canonical_json, sha256_file
from data.manifest import plan_family
from data.queries import plan_seq
from data.store import Store
from data.verdicts import document_sha256
from console.evidence_patches import write_patches
from console.evidence_steps import EvidenceMismatch, Step
from console.verdicts import KINDS, kind_of
from console.evidence_record import RECORD_TABLES, REQUESTS_JSON, rebuild_text, record_steps, write_record

MANIFEST = "MANIFEST.sha256"
REPRODUCE = "REPRODUCE.md"
TABLES = ("runs", "requests", "chunks", "gpu_samples", "quality_scores", "exclusions", "plans", "audit_events",
          "run_metrics", "validator_runs", "engine_launches", "attempts", "candidates", "verdicts", "equivalence_measures",
          "server_metrics", *RECORD_TABLES)
# absent from bundles written before they existed
LATER_TABLES = ("validator_runs", "engine_launches", "attempts", "candidates", "verdicts", "equivalence_measures",
                "server_metrics", *RECORD_TABLES)


# -- export -----------------------------------------------------------------------------------

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
    from data.plan_loading import plan_from_store
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
        "plans": _write_table(store, "plans", f"SELECT * FROM plans p WHERE plan_hash IN ({marks}) ORDER BY {plan_seq('p')} NULLS FIRST, plan_hash",
                              hashes, out / "tables"),
        "audit_events": _write_table(store, "audit_events", "SELECT * FROM audit_events ORDER BY seq", [], out / "tables"),
        "run_metrics": _write_table(store, "run_metrics", f"SELECT m.* FROM run_metrics m JOIN runs r USING (run_id) "
                                    f"WHERE r.plan_hash IN ({marks}) AND m.metrics_version = ? ORDER BY run_id, params_sha256",
                                    [*hashes, _metrics_version()], out / "tables"),
        "validator_runs": _write_table(store, "validator_runs", f"SELECT * FROM validator_runs WHERE plan_hash IN ({marks}) "
                                       "ORDER BY started_at, validator_run_id", hashes, out / "tables"),
        "engine_launches": _write_table(store, "engine_launches", f"SELECT * FROM engine_launches WHERE plan_hash IN "
                                        f"({marks}) ORDER BY started_at, launch_id", hashes, out / "tables"),
        "attempts": _write_table(store, "attempts", f"SELECT * FROM attempts WHERE plan_hash IN ({marks}) "
                                 "ORDER BY created_at, attempt_id", hashes, out / "tables"),
        # the store's whole list of configurations tried: a candidate's fate spans plans and probes
        "candidates": _write_table(store, "candidates", "SELECT * FROM candidates ORDER BY registered_at, config_sha256",
                                   [], out / "tables"),
        "verdicts": _write_table(store, "verdicts", "SELECT * FROM verdicts WHERE list_contains(?, verdict_id) "
                                 "ORDER BY created_at, verdict_id", [issued_ids(store, hashes)], out / "tables"),
        "equivalence_measures": _write_table(store, "equivalence_measures", _equivalence_sql(marks), hashes, out / "tables"),
        # the engines' own samples around each run (docs/results.md, "Server metrics")
        "server_metrics": _write_table(store, "server_metrics", f"SELECT * FROM server_metrics WHERE run_id IN "
                                       f"({in_plan}) ORDER BY run_id, scrape_seq, family NULLS FIRST, sample, labels_json",
                                       hashes, out / "tables"),
    }
    counts.update(write_record(store, out, _write_table))  # console/evidence_record.py: manifests, imports, windows ...
    with (out / "audit" / "audit_events.jsonl").open("w", encoding="utf-8") as f:
        for e in store.query("SELECT seq, CAST(event_time AS VARCHAR) AS event_time, kind, plan_hash, subject, "
                             "payload_json, prev_hash, event_hash FROM audit_events ORDER BY seq"):
            f.write(canonical_json(e) + "\n")
    head = current_head(store).document(store.path)
    (out / "audit" / "head.json").write_text(json.dumps(head, indent=2) + "\n", encoding="utf-8")
    verdict_ids = issued_ids(store, hashes)
    for vid in verdict_ids:
        row = get_verdict(store, vid)
        doc = row["document"]
        if doc is None:
            raise CampaignError(f"verdict {vid}: stored without a document; it cannot be bundled")
        (out / "verdicts" / f"{vid}.json").write_text(json.dumps({**doc, "audit_head": head}, indent=2) + "\n",
                                                      encoding="utf-8")
        kind_of(row["kind"], f"verdict {vid}").export(store, row, doc, out / "verdicts")
    if html:
        from console.html_report import write_report
        from stats.results.plan_results import load_plan_results

        write_report(store, load_plan_results(store, plan), out / "report" / "report.html", out / "report" / "figures")
    write_patches(store, hashes, out)  # console/evidence_patches.py: each engine patch with its hash
    (out / REPRODUCE).write_text(reproduce_text(plan, verdict_ids, head, store), encoding="utf-8")
    write_manifest(out)
    return {"dir": str(out), "counts": counts, "verdicts": verdict_ids, "head": head}


def _equivalence_sql(marks: str) -> str:
    """The rows of the family's equivalence verdicts (docs/equivalence.md)."""
    return ("SELECT * FROM equivalence_measures WHERE verdict_id IN (SELECT verdict_id FROM verdicts WHERE "
            f"kind = 'equivalence' AND plan_hash IN ({marks})) ORDER BY verdict_id, utt_id, repeat_index, measure")


def issued_ids(store: Store, plans: Iterable[str]) -> list[str]:
    """The verdicts of `plans` in the order the chain announced them (what REPRODUCE.md lists,
    so verify can rebuild it from the bundled chain)."""
    return [r[0] for r in store.con.execute(
        "SELECT subject FROM audit_events WHERE kind = 'verdict_issued' AND list_contains(?, plan_hash) ORDER BY seq",
        [sorted(plans)]).fetchall()]


def _metrics_version() -> str:
    from stats.metrics import METRICS_VERSION
    return METRICS_VERSION


def record_text(store: Store) -> list[str]:
    """Every plan frozen in the store (abandoned ones too) with its freeze seq and the sources its
    reuse audit read, and every requester's sign-off: from the chain, which the bundle carries
    whole, so verify rebuilds the same lines."""
    from data.plan_freeze import frozen_plan_records
    from data.verdicts import sign_offs

    lines = ["## Every plan frozen in the store", ""]
    for p in frozen_plan_records(store):
        lines.append(f"- seq {p['seq']}: {p['kind']} `{p['name']}` {p['plan_hash']}"
                     + (f" (parent {p['parent_hash'][:12]})" if p["parent_hash"] else ""))
        lines += [f"  - holdout checked against {a['kind']} {a['path']} (sha256 {a['sha256'][:16]}, {a['ids']} ids, "
                  f"{a['requests']} requests)" for a in p["reuse_audit"]]
    lines += ["", "## Sign-offs", ""]
    lines += [f"- seq {s['seq']}: {s['requester']} on {s['verdict_id']} ({s['verdict']}): {s['statement']}"
              for s in sign_offs(store)] or ["- none recorded (`campaign accept ... --requester NAME --statement TEXT`)"]
    return lines + [""]


def reproduce_text(plan: Any, verdict_ids: list[str], head: dict[str, Any], store: Store) -> str:
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
              "of the console.", "",
              "Derived, not verified: report/ (the HTML report and its figures) is drawn from the tables and "
              "verdict documents that `campaign evidence verify` checks, but verify does not redraw it (a figure's "
              "PNG bytes depend on the plotting library's version and platform). Read verdicts and numbers from "
              "verdicts/ and tables/, or redraw the report from the store (step 2). The CSV files are checked: "
              "each must equal its Parquet table. What verify proves, and what it cannot (a forger who rewrites "
              "the whole chain and its head; `--head FILE|HASH` with a head you hold catches that): "
              "docs/results.md of the console.", ""]
    lines += record_text(store)
    lines += rebuild_text(plan)  # console/evidence_record.py: each engine and the campaign, not only the analysis
    return "\n".join(lines)


def write_manifest(out: Path) -> None:
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != MANIFEST)
    (out / MANIFEST).write_text("".join(f"{sha256_file(p)}  {p.relative_to(out).as_posix()}\n" for p in files),
                                encoding="utf-8")


# -- verify -----------------------------------------------------------------------------------

TABLE_FILES = frozenset(f"{t}.{ext}" for t in TABLES for ext in ("parquet", "csv")) | {REQUESTS_JSON}
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _text(root: Path, rel: str) -> str:
    try:
        return (root / rel).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise EvidenceMismatch(f"{rel}: not UTF-8 text ({first_line(exc)})") from None


def bundle_files(root: Path) -> list[str]:
    """Every file under `root` as a relative POSIX path, found without following links. A bundle
    holds regular files and folders only: a symbolic link could point anywhere (a file outside the
    bundle would be hashed and vouched for as part of it), so any link is refused."""
    out = []
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            p = Path(folder) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                raise EvidenceMismatch(f"{rel}: a symbolic link (to {os.readlink(p)}); a bundle holds regular files only")
            if name in files:
                if not p.is_file():
                    raise EvidenceMismatch(f"{rel}: not a regular file")
                out.append(rel)
    return sorted(out)


def _in_layout(rel: str) -> bool:
    """Where export writes files (module docstring); report/ is derived and free-form."""
    top, _, rest = rel.partition("/")
    return (rel in (MANIFEST, REPRODUCE, "audit/audit_events.jsonl", "audit/head.json") or top == "report"
            or (top == "plans" and bool(_HEX64.fullmatch(rest.removesuffix(".json"))) and rest.endswith(".json"))
            or (top == "tables" and rest in TABLE_FILES) or (top == "verdicts" and "/" not in rest)
            or (top == "patches" and (rest == "patches.json"
                                      or (rest.endswith(".patch") and bool(_HEX64.fullmatch(rest.removesuffix(".patch")))))))


def _manifest_name(root: Path, name: str, n: int) -> str:
    """A MANIFEST path, refused unless it names a place inside the bundle: never absolute, no
    `..`, nothing that resolves outside (checked before any file is opened, so no digest of a file
    outside the bundle is ever computed or printed)."""
    where = f"{MANIFEST}:{n}: {name!r}"
    pure = PurePosixPath(name)
    if not name or "\\" in name or "\x00" in name:
        raise EvidenceMismatch(f"{where}: not a bundle path")
    if pure.is_absolute():
        raise EvidenceMismatch(f"{where}: an absolute path; bundle paths are relative to the bundle")
    if ".." in pure.parts or "." in name.split("/"):
        raise EvidenceMismatch(f"{where}: contains '..' or '.'; bundle paths name files inside the bundle")
    if not (root / name).resolve().is_relative_to(root.resolve()):
        raise EvidenceMismatch(f"{where}: resolves outside the bundle")
    return pure.as_posix()


def check_manifest(root: Path) -> Step:
    """Every file listed, listed once, inside the bundle, a regular file (no link), where export
    puts files, and with the listed SHA-256."""
    present = bundle_files(root)
    if MANIFEST not in present:
        raise EvidenceMismatch(f"{root / MANIFEST}: missing")
    listed: dict[str, str] = {}
    for n, line in enumerate(_text(root, MANIFEST).splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or not _HEX64.fullmatch(digest):
            raise EvidenceMismatch(f"{MANIFEST}:{n}: not a 'sha256  path' line")
        name = _manifest_name(root, name, n)
        if name in listed or name == MANIFEST:
            raise EvidenceMismatch(f"{MANIFEST}:{n}: {name} is listed {'twice' if name in listed else 'in itself'}")
        listed[name] = digest
    files = set(present) - {MANIFEST}
    for name, digest in listed.items():
        if name not in files:
            raise EvidenceMismatch(f"{name}: listed in {MANIFEST} but missing")
        got = sha256_file(root / name)
        if got != digest:
            raise EvidenceMismatch(f"{name}: sha256 {got[:16]}… differs from {MANIFEST} ({digest[:16]}…)")
    extra = sorted(files - set(listed))
    if extra:
        raise EvidenceMismatch(f"{extra[0]}: not listed in {MANIFEST}")
    stray = [f for f in present if not _in_layout(f)]
    if stray:
        raise EvidenceMismatch(f"{stray[0]}: not a file an evidence bundle holds (docs/results.md, layout)")
    absent = [f for f in (REPRODUCE, "audit/audit_events.jsonl", "audit/head.json") if f not in files]
    if absent:
        raise EvidenceMismatch(f"{absent[0]}: missing (every evidence bundle holds it)")
    return Step("files", f"{len(listed)} files, every sha256 matches, none unlisted, no links, no path outside")


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


def check_plans(root: Path, store: Store) -> Step:
    from data.plan_hashing import hash_matches

    n = 0
    files = sorted((root / "plans").glob("*.json")) if (root / "plans").is_dir() else []
    for p in files:
        row = store.scalar("SELECT canonical_json FROM plans WHERE plan_hash = ?", [p.stem])
        text = _text(root, f"plans/{p.name}")
        if row != text:
            raise EvidenceMismatch(f"plans/{p.name}: differs from tables/plans.parquet")
        try:
            matches = hash_matches(json.loads(text), p.stem)
        except ValueError as exc:
            raise EvidenceMismatch(f"plans/{p.name}: not valid JSON ({first_line(exc)})") from None
        if not matches:
            raise EvidenceMismatch(f"plans/{p.name}: content does not hash to {p.stem[:12]}")
        n += 1
    named = {p.stem for p in files}
    for (h,) in store.con.execute("SELECT plan_hash FROM plans ORDER BY plan_hash").fetchall():
        if h not in named:
            raise EvidenceMismatch(f"plans/{h}.json: missing (tables/plans.parquet holds plan {h[:12]})")
    return Step("plan files", f"{n} plan document(s) hash to their names")


JSONL_FIELDS = ("seq", "event_time", "kind", "plan_hash", "subject", "payload_json", "prev_hash", "event_hash")


def check_jsonl(root: Path, store: Store) -> None:
    """audit/audit_events.jsonl is the bundled chain: every line's event_hash recomputed from the
    line itself (data/audit.py's event_hash) and every field equal to the chain's event (times
    compared as epoch microseconds, whatever the zone they are written in)."""
    rows = store.con.execute("SELECT seq, epoch_us(event_time), kind, plan_hash, subject, payload_json, prev_hash, "
                             "event_hash FROM audit_events ORDER BY seq").fetchall()
    where = "audit/audit_events.jsonl"
    lines = _text(root, where).splitlines()
    if len(lines) != len(rows):
        raise EvidenceMismatch(f"{where}: {len(lines)} events, tables/audit_events.parquet has {len(rows)}")
    events_ = []
    for n, text in enumerate(lines, 1):
        try:
            e = json.loads(text)
        except ValueError as exc:
            raise EvidenceMismatch(f"{where}:{n}: not JSON ({first_line(exc)})") from None
        if not isinstance(e, dict) or set(e) != set(JSONL_FIELDS) or not isinstance(e["event_time"], str):
            raise EvidenceMismatch(f"{where}:{n}: not an audit event (fields {', '.join(JSONL_FIELDS)})")
        events_.append(e)
    times = [t for (t,) in store.con.execute("SELECT epoch_us(TRY_CAST(t AS TIMESTAMPTZ)) FROM "
                                             "(SELECT unnest(?::VARCHAR[]) AS t, generate_subscripts(?::VARCHAR[], 1) AS i) "
                                             "ORDER BY i", [[e["event_time"] for e in events_]] * 2).fetchall()]
    for n, (e, t_us, row) in enumerate(zip(events_, times, rows), 1):
        if t_us is None:
            raise EvidenceMismatch(f"{where}:{n}: event_time {e['event_time']!r} is not a time")
        fields = (e["seq"], t_us, e["kind"], e["plan_hash"], e["subject"], e["payload_json"], e["prev_hash"])
        try:
            recomputed = event_hash(*fields)
        except (TypeError, ValueError):
            recomputed = None
        if recomputed != e["event_hash"]:
            raise EvidenceMismatch(f"{where}: seq {e['seq']} ({e['kind']}): contents do not match its event_hash "
                                   "(altered)")
        if (*fields, e["event_hash"]) != tuple(row):
            raise EvidenceMismatch(f"{where}:{n}: differs from event seq {row[0]} of tables/audit_events.parquet")


@dataclass(frozen=True)
class TrustedHead:
    """A head the reviewer holds from outside the bundle (`evidence verify --head`): an anchor
    file, an exported verdict document or runs export (data/anchor.py), or a bare event hash."""
    label: str
    head: Head | None = None
    event_hash: str | None = None


def trusted_head(arg: str) -> TrustedHead:
    """--head FILE|HASH; a CampaignError (exit 2) for anything else."""
    if Path(arg).is_file():
        return TrustedHead(arg, head=read_head(arg))
    if _HEX64.fullmatch(arg):
        return TrustedHead(arg[:12], event_hash=arg)
    raise CampaignError(f"--head {arg}: neither a file nor an event hash (64 lowercase hex digits)")


def _trusted_problem(store: Store, t: TrustedHead) -> str | None:
    if t.head is not None:
        return holds(store, t.head, t.label)
    if store.scalar("SELECT count(*) FROM audit_events WHERE event_hash = ?", [t.event_hash]):
        return None
    return (f"--head {t.label}: no event of the bundled chain has this hash: the chain was rewritten or cut "
            "short below it, or the bundle is of another store")


def check_audit(root: Path, store: Store, trusted: Sequence[TrustedHead] = ()) -> Step:
    chain = verify_chain(store)
    if not chain.ok:
        raise EvidenceMismatch(f"tables/audit_events.parquet: {chain.message}")
    try:
        head = read_head(root / "audit" / "head.json")
    except CampaignError as exc:
        raise EvidenceMismatch(f"audit/head.json: {exc}") from None
    got = current_head(store)
    if (got.length, got.head_hash) != (head.length, head.head_hash):
        raise EvidenceMismatch(f"audit/head.json: head seq {head.length} does not match the bundled chain "
                               f"(seq {got.length})")
    check_jsonl(root, store)
    for t in trusted:
        problem = _trusted_problem(store, t)
        if problem:
            raise EvidenceMismatch(problem)
    held = f"; holds every --head given ({', '.join(t.label for t in trusted)})" if trusted else ""
    return Step("audit", f"{chain.message}, every hash recomputed (table and jsonl); head seq {got.length}{held}")


FREEZE_KINDS = ("plan_frozen", "addendum_frozen")


def bundle_plans(store: Store, evs: Sequence[dict[str, Any]]) -> set[str]:
    """The plans the bundle is evidence of: those its plans and runs rows name, grown along the
    parent links the chain's freeze events record to the whole family export bundles (a plan, its
    ancestors and every addendum below them: `plan_family`). Taken from the chain, not from the
    rows, so a plan row or file left out of the bundle still counts."""
    family = {h for (h,) in store.con.execute("SELECT plan_hash FROM plans UNION SELECT plan_hash FROM runs")
              .fetchall() if h}
    links = [(e["plan_hash"], e["payload"].get("parent_hash")) for e in evs if e["kind"] in FREEZE_KINDS]
    grew = True
    while grew:
        grew = False
        for h, parent in links:
            if parent and (h in family or parent in family) and not {h, parent} <= family:
                family |= {h, parent}
                grew = True
    if not family:
        raise EvidenceMismatch("tables/plans.parquet: no plan in the bundle")
    return family


# data/integrity.py's checks that cover the bundled tables (verdict documents: check_verdicts);
# candidates against the whole chain (CHAIN_CHECKS): a candidate's last change may be another plan's
STORE_CHECKS = ("plans", "runs", "exclusions", "scores", "verdicts", "attempts", "launches")
CHAIN_CHECKS = ("candidates",)
STEP_NAMES = {"verdicts": "verdict rows"}  # the step "verdicts" re-derives the documents
CHECKED_TABLE = {"verdicts": "verdicts", "attempts": "attempts", "launches": "engine_launches",
                 "candidates": "candidates"}  # the LATER_TABLES a check reads


def check_rows(store: Store, name: str, evs: list[dict[str, Any]], root: Path | None = None) -> Step:
    """One of `campaign audit verify`'s checks (data/integrity.py) on the scratch store, over the
    events of the bundle's plans (the chain is the whole store's). A table a bundle written before
    it was bundled lacks is not checked, and the step says so."""
    label = STEP_NAMES.get(name, name)
    table = CHECKED_TABLE.get(name)
    if root is not None and table and not (root / "tables" / f"{table}.parquet").is_file():
        return Step(label, f"tables/{table}.parquet absent (a bundle written before it was bundled)", "not verified")
    fn = dict(integrity.CHECKS)[name]
    c = fn(store, evs)
    if not c.ok:
        raise EvidenceMismatch(c.message)
    return Step(label, c.message)


def check_run_metrics(store: Store) -> Step:
    """Every bundled run's metrics re-derived, byte for byte; a row stored before later metrics were
    added holds a prefix of today's keys and is compared over it (stats.metrics.stored.as_stored)."""
    from data.metric_params import MetricParams
    from stats.metrics.stored import as_stored, compute_from_rows

    rows = store.query("SELECT run_id, params_json, metrics_json FROM run_metrics ORDER BY run_id")
    fresh = compute_from_rows(store, [(r["run_id"], MetricParams.from_mapping(json.loads(r["params_json"]))) for r in rows])
    for r in rows:
        try:
            stored = json.loads(r["metrics_json"])
        except ValueError:
            stored = None
        if not isinstance(stored, dict) or json.dumps(as_stored(fresh[r["run_id"]], stored)) != r["metrics_json"]:
            raise EvidenceMismatch(f"run {r['run_id']}: metrics re-derived from tables/requests and tables/chunks "
                                   "differ from tables/run_metrics")
    return Step("run metrics", f"{len(rows)} run(s) re-derived from their requests and chunks")


def check_server_metrics(root: Path, store: Store) -> Step:
    """The bundled server samples (docs/results.md, "Server metrics"): every row belongs to a
    bundled run and to a scrape whose own row (family NULL) is there, and each run's
    reconciliation is re-derived from them (stats/server_reconcile.py), the flags counted."""
    from stats.server_reconcile import reconcile_run

    if not (root / "tables" / "server_metrics.parquet").is_file():
        return Step("server metrics", "tables/server_metrics.parquet absent (a bundle written before it was bundled)",
                    "not verified")
    stray = store.query("SELECT DISTINCT s.run_id FROM server_metrics s LEFT JOIN runs r USING (run_id) "
                        "WHERE r.run_id IS NULL ORDER BY 1")
    if stray:
        raise EvidenceMismatch(f"tables/server_metrics.parquet: samples of run {stray[0]['run_id']}, not a run of the "
                               "bundle")
    orphan = store.query("SELECT s.run_id, s.scrape_seq FROM server_metrics s WHERE s.family IS NOT NULL AND NOT EXISTS "
                         "(SELECT 1 FROM server_metrics o WHERE o.run_id = s.run_id AND o.scrape_seq = s.scrape_seq "
                         "AND o.family IS NULL) ORDER BY 1, 2 LIMIT 1")
    if orphan:
        raise EvidenceMismatch(f"tables/server_metrics.parquet: run {orphan[0]['run_id']} scrape "
                               f"{orphan[0]['scrape_seq']} has samples but no scrape row (rows added or cut)")
    runs = [r for (r,) in store.con.execute("SELECT DISTINCT run_id FROM server_metrics ORDER BY 1").fetchall()]
    flagged = sum(1 for rid in runs if reconcile_run(store, rid).flagged)
    return Step("server metrics", f"{len(runs)} run(s) with server samples, each reconciled "
                                  f"({flagged} with a figure beyond tolerance)")


def _document(root: Path, vid: str, e: dict[str, Any], head: Head) -> dict[str, Any]:
    """verdicts/<vid>.json: the document its `verdict_issued` event announced, under its own id,
    carrying the head the bundle was exported at."""
    name = f"verdicts/{vid}.json"
    p = root / name
    if not p.is_file():
        raise EvidenceMismatch(f"verdict {vid} ({e['payload'].get('verdict')}, issued at seq {e['seq']}): its "
                               f"document {name} is missing")
    try:
        doc = json.loads(_text(root, name))
    except ValueError as exc:
        raise EvidenceMismatch(f"{name}: not valid JSON ({first_line(exc)})") from None
    if not isinstance(doc, dict):
        raise EvidenceMismatch(f"{name}: not a verdict document (a JSON object)")
    if doc.get("verdict_id") != vid:
        raise EvidenceMismatch(f"{name}: holds verdict {doc.get('verdict_id')!r}, not {vid}: a document under "
                               "another verdict's name")
    body = {k: v for k, v in doc.items() if k != "audit_head"}
    if document_sha256(body) != e["payload"].get("document_sha256"):
        raise EvidenceMismatch(f"{name}: document does not match its verdict_issued audit event (seq {e['seq']})")
    try:
        got = read_head(p)
    except CampaignError:
        raise EvidenceMismatch(f"{name}: audit_head missing or malformed") from None
    if (got.length, got.head_hash) != (head.length, head.head_hash):
        raise EvidenceMismatch(f"{name}: audit_head (seq {got.length}, {got.head_hash[:12]}) is not the head the "
                               f"bundle was exported at (audit/head.json: seq {head.length}, {head.head_hash[:12]})")
    return doc


def check_verdicts(root: Path, store: Store, evs: list[dict[str, Any]]) -> Step:
    """Exactly one document per `verdict_issued` event of the bundle's plans, named by its id,
    and nothing else in verdicts/; then every verdict re-derived from the bundled rows."""
    issued = [e for e in evs if e["kind"] == "verdict_issued"]
    seen: set[str] = set()
    for e in issued:
        if e["subject"] in seen:
            raise EvidenceMismatch(f"verdict {e['subject']}: issued twice in the chain (seq {e['seq']})")
        seen.add(e["subject"])
    expected = {f"{e['subject']}.json" for e in issued} | {
        name for e in issued if e["payload"].get("kind") in KINDS for name in KINDS[e["payload"]["kind"]].bundle_files(e["subject"])}
    folder = root / "verdicts"
    stray = sorted(p.name for p in folder.iterdir() if p.name not in expected) if folder.is_dir() else []
    if stray:
        raise EvidenceMismatch(f"verdicts/{stray[0]}: no verdict_issued event of the bundle's plans names it")
    head = read_head(root / "audit" / "head.json")
    done = []
    for e in issued:
        doc = _document(root, e["subject"], e, head)
        done.append(kind_of(doc.get("kind"), f"verdicts/{e['subject']}.json").reverify(root, store, doc, e["seq"]))
    return Step("verdicts", "; ".join(done) if done else "no verdicts in the bundle")


def check_reproduce(root: Path, store: Store, plans: Iterable[str]) -> Step:
    """REPRODUCE.md is the text export writes for one of the bundle's plans, its verdicts and the
    bundle's head: its commands and the head it states are the verified ones."""
    from data.plan_loading import plan_from_store

    head = read_head(root / "audit" / "head.json")
    text, ids = _text(root, REPRODUCE), issued_ids(store, plans)
    doc = {"length": head.length, "head_hash": head.head_hash}
    for h in sorted(plans):
        if store.scalar("SELECT count(*) FROM plans WHERE plan_hash = ?", [h]) and \
                reproduce_text(plan_from_store(store, h), ids, doc, store) == text:
            return Step("reproduce", f"{REPRODUCE} is the one export writes for plan {h[:12]}")
    raise EvidenceMismatch(f"{REPRODUCE}: differs from the text export writes for the bundle's plans, verdicts "
                           "and head (edited)")


def check_tables(root: Path) -> Step:
    """Each CSV is its Parquet table as export writes it (pyarrow), byte for byte: the CSVs are a
    second copy of rows verify has checked, so a copy that differs is a forgery."""
    import io

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    for t in TABLES:
        csv = root / "tables" / f"{t}.csv"
        if t in LATER_TABLES and not csv.is_file() and not (root / "tables" / f"{t}.parquet").is_file():
            continue  # a bundle written before the table was bundled
        if not csv.is_file():
            raise EvidenceMismatch(f"tables/{t}.csv: missing")
        buf = io.BytesIO()
        pacsv.write_csv(pq.read_table(root / "tables" / f"{t}.parquet"), buf)
        if buf.getvalue() != csv.read_bytes():
            raise EvidenceMismatch(f"tables/{t}.csv: differs from tables/{t}.parquet (the CSV is a copy of it)")
    return Step("tables", f"{len(TABLES)} CSV files equal their Parquet tables")


def _patches_step(root: Path) -> Callable[[], Step]:
    def step() -> Step:
        from console.evidence_patches import check_patches
        try:
            return Step("patches", check_patches(root))
        except EvidenceMismatch:
            raise
        except CampaignError as exc:
            raise EvidenceMismatch(str(exc)) from None
    return step


REPORT_NOTE = ("report/: derived, not verified (drawn from the tables and documents checked above; redraw it from "
               "the store with `campaign report`, REPRODUCE.md; why: docs/results.md)")


def verify_bundle(root: Path, on_step: Callable[[Step], None] | None = None,
                  trusted: Sequence[TrustedHead] = ()) -> list[Step]:
    """Every check in order; raises EvidenceMismatch (its `check` naming the step) at the first
    mismatch. What passing proves: docs/results.md."""
    if not root.is_dir():
        raise CampaignError(f"{root}: no such folder")
    steps = []

    def run(name: str, fn: Callable[[], Step]) -> None:
        try:
            s = fn()
        except EvidenceMismatch as exc:
            exc.check = name
            raise
        steps.append(s)
        if on_step:
            on_step(s)

    run("files", lambda: check_manifest(root))
    with tempfile.TemporaryDirectory(prefix="evidence-verify-") as tmp:
        try:
            store = load_scratch(root, Path(tmp) / "bundle.duckdb")
        except EvidenceMismatch as exc:
            exc.check = "tables"
            raise
        try:
            run("plan files", lambda: check_plans(root, store))
            run("audit", lambda: check_audit(root, store, trusted))
            evs: list[dict[str, Any]] = []

            def plans() -> Step:
                chain = events(store)
                family = bundle_plans(store, chain)
                evs.extend(e for e in chain if e["plan_hash"] in family)
                return Step("plans", f"{len(family)} plan(s) of the bundle (by the chain's freeze events): "
                                     f"{check_rows(store, 'plans', evs).detail}")
            run("plans", plans)
            for name in STORE_CHECKS[1:]:
                run(STEP_NAMES.get(name, name), partial(check_rows, store, name, evs, root))
            for name in CHAIN_CHECKS:
                run(name, partial(check_rows, store, name, events(store), root))
            for name, step in record_steps(root, store):  # console/evidence_record.py, against the whole chain
                run(name, step)
            run("run metrics", lambda: check_run_metrics(store))
            run("server metrics", lambda: check_server_metrics(root, store))
            run("verdicts", lambda: check_verdicts(root, store, evs))
            run("reproduce", lambda: check_reproduce(root, store, {e["plan_hash"] for e in evs}))
        finally:
            store.close()
    run("tables", lambda: check_tables(root))
    run("patches", _patches_step(root))
    run("report", lambda: Step("report", REPORT_NOTE, "not verified"))
    return steps
