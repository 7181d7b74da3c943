"""`campaign export verdict ID -o verdict.json` (the stored, schema-validated verdict document) and
`campaign export runs --format csv|parquet -o FILE [--plan HASH]` (raw per-request rows; with
`--summary`, one row per run: the `run_summary` view, every registry metric a column).

Every export carries the audit chain's head at export time (`audit_head`: in the verdict document,
in the Parquet file's metadata, in `FILE.audit-head.json` beside a CSV), so `campaign audit verify
--against FILE` can later show that the store still holds everything up to it (docs/integrity.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from console.flags import add_plan_hash
from console.commands.db import add_db_arg
from data.errors import CampaignError, first_line

RUN_COLUMNS = ("plan_hash", "engine", "concurrency", "repeat_index", "kind", "status", "pool", "dialect",
               "metrics_version", "request_preset", "voice_placement", "body_template_sha256")


def register(sub) -> None:
    p = sub.add_parser("export", help="export a verdict document or raw per-request rows")
    ps = p.add_subparsers(dest="export_command", metavar="ACTION", required=True)
    v = ps.add_parser("verdict", help="the verdict document (JSON, docs/verdict.schema.json)")
    v.add_argument("verdict_id", help="verdict id (or a unique prefix)")
    v.add_argument("-o", "--output", help="file to write (default: stdout)")
    add_db_arg(v)
    v.set_defaults(func=cmd_export_verdict)
    r = ps.add_parser("runs", help="raw per-request rows with their run's engine, concurrency, kind ...")
    r.add_argument("--format", choices=("csv", "parquet"), default="csv")
    r.add_argument("-o", "--output", required=True, help="file to write")
    add_plan_hash(r, "plan hash (or unique prefix); default: every run")
    r.add_argument("--summary", action="store_true",
                   help="one row per run with every run metric (the run_summary view, docs/metrics.md)")
    add_db_arg(r)
    r.set_defaults(func=cmd_export_runs)
    e = ps.add_parser("evidence", help="the evidence bundle of a plan: plans, audit log, tables (Parquet and CSV), "
                                       "verdicts, HTML report, MANIFEST.sha256, REPRODUCE.md (console/evidence.py)")
    e.add_argument("plan", help="frozen plan file or hash")
    e.add_argument("dir", help="folder to write (new or empty)")
    add_db_arg(e)
    e.set_defaults(func=cmd_export_evidence)


def cmd_export_evidence(args) -> int:
    from console.commands.plan import plan_for_arg
    from console.evidence import export_bundle
    from data.store import open_store

    out = Path(args.dir)
    with open_store(args.db) as store:
        plan = plan_for_arg(store, args.plan)
        try:
            res = export_bundle(store, plan, out)
        except OSError as exc:
            raise CampaignError(f"{exc.filename or out}: cannot write ({first_line(exc)})") from None
    c = res["counts"]
    print(f"{out}: evidence of plan {plan.hash[:12]}: {c['runs']} runs, {c['requests']} requests, {c['chunks']} chunks, "
          f"{c['quality_scores']} quality scores, {len(res['verdicts'])} verdicts; audit head seq {res['head']['length']}; "
          f"check with `campaign evidence verify {out}`")
    return 0


def cmd_export_verdict(args) -> int:
    import jsonschema

    from data.anchor import current_head
    from data.store import open_store
    from data.verdicts import get_verdict
    from stats.verdict_doc import load_schema

    with open_store(args.db, read_only=True) as store:
        row = get_verdict(store, args.verdict_id)
        head = current_head(store).document(store.path)
    doc = row["document"]
    if doc is None:
        raise CampaignError(f"verdict {row['verdict_id']}: stored without a document")
    try:
        jsonschema.validate(doc, load_schema())
    except jsonschema.ValidationError as exc:
        path = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise CampaignError(f"verdict {row['verdict_id']}: stored document does not match "
                            f"docs/verdict.schema.json at {path}: {first_line(exc)}") from None
    text = json.dumps({**doc, "audit_head": head}, indent=2, sort_keys=False) + "\n"
    if args.output:
        out = Path(args.output)
        try:
            out.write_text(text)
        except OSError as exc:
            raise CampaignError(f"{out}: cannot write ({exc.strerror})") from None
        print(f"{out}: verdict {row['verdict_id']} ({row['verdict']}), {doc['schema_version']}, "
              f"audit head seq {head['length']}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_export_runs(args) -> int:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from data.anchor import PARQUET_KEY, anchor_path, current_head, write_anchor
    from data.plan_loading import resolve_hash
    from data.store import open_store

    if args.summary:
        import stats.metrics.views  # noqa: F401  registers run_summary before the store opens
    with open_store(args.db, read_only=True) as store:
        params: list = []
        where = ""
        if args.plan:
            where = " WHERE r.plan_hash = ?"
            params.append(resolve_hash(store, args.plan))
        sql = ("SELECT * FROM run_summary r" + where + " ORDER BY r.run_id") if args.summary else (
            "SELECT q.run_id, " + ", ".join(f"r.{c}" for c in RUN_COLUMNS)
            + ", x.reason AS excluded_reason, (q.t_end_ns - q.t_send_ns) / 1e9 AS e2e_s, "
            "coalesce(q.finish_reason = 'length', false) AS truncated, q.* EXCLUDE (run_id) "
            "FROM requests q JOIN runs r USING (run_id) LEFT JOIN exclusions x USING (run_id)"
            + where + " ORDER BY r.started_at, q.run_id, q.request_index"
        )
        table = store.relation(sql, params).to_arrow_table()
        head = current_head(store).document(store.path)
    out = Path(args.output)
    try:
        if args.format == "parquet":
            meta = {**(table.schema.metadata or {}), PARQUET_KEY: json.dumps(head).encode()}
            pq.write_table(table.replace_schema_metadata(meta), out)
            where = "in its metadata"
        else:
            pacsv.write_csv(table, out)
            write_anchor(anchor_path(out), head)
            where = f"in {anchor_path(out).name}"
    except OSError as exc:
        raise CampaignError(f"{out}: cannot write ({first_line(exc)})") from None
    what = "run rows (run_summary)" if args.summary else "request rows"
    print(f"{out}: {table.num_rows} {what} ({args.format}); audit head seq {head['length']} {where}")
    return 0
