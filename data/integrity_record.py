"""`audit verify` checks for the campaign's record beyond measurements (docs/integrity.md):
imported results, profiler windows and stored rechecks, each tied to the audit events that
announced it. Used by data/integrity.py (the store) and console/evidence_record.py (the bundle).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from data.digest import table_digests
from data.integrity_checks import check_result, rows_against_events
from data.store import Store


def _digested(store: Store, evs: list[dict[str, Any]], *, table: str, key: str, order: tuple[str, ...], kind: str,
              noun: str) -> tuple[list[str], int]:
    """Rows announced in groups (one event per `key` value, with {rows, sha256, columns}):
    every group equals its digest, every group has its event, every event its rows."""
    announced = {e["subject"]: e for e in evs if e["kind"] == kind}
    keys = [r[0] for r in store.con.execute(f"SELECT DISTINCT {key} FROM {table} ORDER BY 1").fetchall()]
    problems = [f"{noun} {k}: no {kind} event for it (inserted by hand)" for k in keys if k not in announced]
    by_cols: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for k, e in announced.items():
        by_cols[tuple(e["payload"]["digest"]["columns"])].append(k)
    for cols, ks in by_cols.items():
        got = table_digests(store, table, list(cols), key, order, keys=ks)
        for k in ks:
            e = announced[k]
            want = e["payload"]["digest"]
            if got[k].rows != want["rows"]:
                problems.append(f"{noun} {k}: {got[k].rows} row(s), its {kind} event (seq {e['seq']}) says "
                                f"{want['rows']} (rows deleted or added)")
            elif got[k].sha256 != want["sha256"]:
                problems.append(f"{noun} {k}: rows differ from the digest recorded at seq {e['seq']} (edited)")
    return problems, sum(1 for k in keys if k in announced)


def check_imported(store: Store, evs: list[dict[str, Any]]):
    """Each imported figure is the one its import announced; `value` equals the text it came from
    (the digest covers the text: a DOUBLE has no exact text form, data/digest.py)."""
    problems, n = _digested(store, evs, table="imported_results", key="import_id", order=("row_number",),
                            kind="results_imported", noun="import")
    bad = store.query("SELECT import_id, row_number, value, value_text FROM imported_results "
                      "WHERE value IS DISTINCT FROM TRY_CAST(value_text AS DOUBLE) ORDER BY 1, 2")
    problems += [f"import {r['import_id']} row {r['row_number']}: value {r['value']!r} is not its text "
                 f"{r['value_text']!r} (edited)" for r in bad]
    return check_result("imported results", problems, f"{n} import(s) match their results_imported events")


def check_profiler_windows(store: Store, evs: list[dict[str, Any]]):
    """Each window matches the event of its last write; its start_seq/stop_seq are those events."""
    first: dict[str, int] = {}
    for e in evs:
        if e["kind"] == "profiler_window":
            first.setdefault(e["subject"], e["seq"])

    def seqs(r: dict[str, Any], p: dict[str, Any], seq: int) -> list[str]:
        out = []
        if r["start_seq"] != first.get(r["window_id"]):
            out.append(f"start_seq is {r['start_seq']} but its first profiler_window event is seq "
                       f"{first.get(r['window_id'])}")
        if p.get("action") == "stop" and r["stop_seq"] != seq:
            out.append(f"stop_seq is {r['stop_seq']} but it was stopped at seq {seq}")
        return out

    problems, n, _ = rows_against_events(store, evs, table="profiler_windows", key="window_id", kind="profiler_window",
                                          noun="profiler window", verb="recorded", fields=("engine", "tool", "status"),
                                          extra=seqs, order="start_seq", last=True)
    problems += unexcluded_overlaps(store)
    return check_result("profiler windows", problems, f"{n} profiler window(s) match their profiler_window events")


def unexcluded_overlaps(store: Store) -> list[str]:
    """An ended run that overlapped a window but has no exclusion would be in aggregates while
    profiled (its exclusion deleted with its event, or never made)."""
    from data.profiler import overlaps

    ended = {r[0] for r in store.con.execute("SELECT DISTINCT subject FROM audit_events WHERE kind = 'run_ended'")
             .fetchall()}
    excluded = {r[0] for r in store.con.execute("SELECT run_id FROM exclusions").fetchall()}
    return [f"run {o.run_id}: overlapped profiler window {o.window_id} (audit sequence) but is not excluded"
            for o in overlaps(store) if o.run_id in ended and o.run_id not in excluded]


def check_rechecks(store: Store, evs: list[dict[str, Any]]):
    problems, n = _digested(store, evs, table="recheck_results", key="recheck_id",
                            order=("run_id", "request_index", "scorer_id"), kind="recheck_stored", noun="recheck")
    return check_result("rechecks", problems, f"{n} recheck(s) match their recheck_stored events")


CHECKS = (("imported results", check_imported), ("profiler windows", check_profiler_windows),
          ("rechecks", check_rechecks))
