"""Per-run metrics computed once and stored (`run_metrics` table, docs/results.md).

Every view asks `metrics_for_runs` for the runs it shows. A stored row is used when its
`metrics_version`, parameter hash and request count match and it holds every registry metric;
otherwise the run's requests and chunks
are read (one query for all missing runs) and `metrics_from_records` computes them. On a writable
store the fresh rows are stored for runs that have ended; a read-only reader (the TUI) computes
what is missing in memory and stores nothing.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping, Sequence

from data.metric_params import MetricParams
from data.store import Store, utcnow
from stats.metrics.compute import _REQUEST_COLUMNS, V2_KEYS, RunMetrics, metrics_from_records
from stats.metrics.registry import METRICS_BY_NAME, METRICS_VERSION

ParamsOf = MetricParams | Callable[[Mapping[str, Any]], MetricParams]


def _in_list(ids: Sequence[str]) -> str:
    return ", ".join("?" for _ in ids)


def _chunks_of(store: Store, ids: Sequence[str]) -> dict[str, dict[int, list[tuple[int, int]]]]:
    """Audio-bearing chunks (t_arrival_ns, samples) by run and request, in arrival order."""
    out: dict[str, dict[int, list[tuple[int, int]]]] = {i: {} for i in ids}
    if not ids:
        return out
    cols = store.relation(
        f"SELECT run_id, request_index, t_arrival_ns, samples FROM chunks WHERE run_id IN ({_in_list(ids)}) "
        "AND samples > 0 ORDER BY run_id, request_index, t_arrival_ns, chunk_index", list(ids)).fetchnumpy()
    run_ids, idx, t, s = (cols[k].tolist() for k in ("run_id", "request_index", "t_arrival_ns", "samples"))
    for rid, i, ti, si in zip(run_ids, idx, t, s):
        out[rid].setdefault(i, []).append((ti, si))
    return out


def _requests_of(store: Store, ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    if not ids:
        return out
    for r in store.query(f"SELECT run_id, {', '.join(_REQUEST_COLUMNS)} FROM requests WHERE run_id IN "
                         f"({_in_list(ids)}) ORDER BY run_id, request_index", list(ids)):
        out[r.pop("run_id")].append(r)
    return out


def compute_from_rows(store: Store, runs: Sequence[tuple[str, MetricParams]]) -> dict[str, RunMetrics]:
    """Metrics of `runs` (run_id, params) computed from their stored rows now (the uncached path)."""
    ids = [rid for rid, _ in runs]
    requests, chunks = _requests_of(store, ids), _chunks_of(store, ids)
    return {rid: metrics_from_records(rid, requests[rid], chunks[rid], p) for rid, p in runs}


def metrics_for_runs(store: Store, runs: Iterable[Mapping[str, Any]], params: ParamsOf) -> dict[str, RunMetrics]:
    """run_id -> RunMetrics for each run row (needs run_id and status) under `params` (one value, or a
    function of the run row: the TUI uses each run's recorded parameters)."""
    runs = list(runs)
    want = [(r["run_id"], params(r) if callable(params) else params) for r in runs]
    if not want:
        return {}
    ids = [rid for rid, _ in want]
    counts = dict(store.con.execute(
        f"SELECT run_id, count(*) FROM requests WHERE run_id IN ({_in_list(ids)}) GROUP BY run_id", ids).fetchall())
    stored = {(r[0], r[1]): (r[2], r[3]) for r in store.con.execute(
        f"SELECT run_id, params_sha256, requests, metrics_json FROM run_metrics WHERE metrics_version = ? "
        f"AND run_id IN ({_in_list(ids)})", [METRICS_VERSION, *ids]).fetchall()}
    out: dict[str, RunMetrics] = {}
    missing: list[tuple[str, MetricParams]] = []
    for rid, p in want:
        hit = stored.get((rid, p.sha256))
        row = json.loads(hit[1]) if hit is not None and hit[0] == counts.get(rid, 0) else None
        if row is not None and all(name in row for name in METRICS_BY_NAME):  # a metric added since: recompute
            out[rid] = RunMetrics.from_dict(row)
        else:
            missing.append((rid, p))
    if missing:
        fresh = compute_from_rows(store, missing)
        out.update(fresh)
        ended = {r["run_id"] for r in runs if r.get("status") not in (None, "running")}
        if not store.read_only:
            store_metrics(store, [(fresh[rid], counts.get(rid, 0)) for rid, _ in missing if rid in ended])
    return out


def store_metrics(store: Store, rows: Sequence[tuple[RunMetrics, int]]) -> None:
    """Insert or replace stored metrics (derived data: no audit event; docs/results.md)."""
    if not rows:
        return
    now = utcnow()
    with store.transaction() as con:
        con.executemany(
            "INSERT OR REPLACE INTO run_metrics (run_id, metrics_version, params_sha256, params_json, requests, "
            "metrics_json, computed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [[m.run_id, m.metrics_version, m.params.sha256, m.params.canonical_json(), n, json.dumps(m.to_dict()), now]
             for m, n in rows])


def as_stored(fresh: RunMetrics, stored: Mapping[str, Any]) -> dict[str, Any]:
    """`fresh`'s stored form cut to as many keys as `stored` holds: a row stored before metrics were
    added (docs/metrics.md, "Adding a metric") holds a prefix of today's keys, since new metrics
    follow the old ones, so a faithful old row equals this byte for byte. Never fewer keys than
    version 2 stored (a row cut shorter is not one any console wrote)."""
    d = fresh.to_dict()
    keys = list(d)
    least = max(keys.index(k) for k in V2_KEYS) + 1
    return {k: d[k] for k in keys[:max(len(stored), least)]}


def stored_metrics_problems(store: Store) -> tuple[int, list[str]]:
    """(rows checked, problems): every stored `run_metrics` row recomputed from the run's rows now
    and compared field by field. The table is a cache that every view reads, so an edited row
    would change what users see without touching a measurement (`audit verify`, docs/integrity.md)."""
    rows = store.query("SELECT run_id, metrics_version, params_sha256, params_json, requests, metrics_json "
                       "FROM run_metrics ORDER BY run_id, metrics_version, params_sha256")
    problems: list[str] = []
    current = [r for r in rows if r["metrics_version"] == METRICS_VERSION]
    problems += [f"run {r['run_id']}: stored metrics of version {r['metrics_version']!r}, not a version this "
                 f"console computes ({METRICS_VERSION})" for r in rows if r["metrics_version"] != METRICS_VERSION]
    todo: list[tuple[str, MetricParams]] = []
    for r in current:
        params = MetricParams.from_mapping(json.loads(r["params_json"]))
        if params.sha256 != r["params_sha256"]:
            problems.append(f"run {r['run_id']}: stored metrics' params_json does not hash to params_sha256 (edited)")
        else:
            todo.append((r["run_id"], params))
    fresh = {}
    for rid, params in todo:  # one run at a time: a store may hold many parameter sets per run
        fresh[(rid, params.sha256)] = compute_from_rows(store, [(rid, params)])[rid]
    counts = dict(store.con.execute("SELECT run_id, count(*) FROM requests GROUP BY run_id").fetchall())
    for r in current:
        m = fresh.get((r["run_id"], r["params_sha256"]))
        if m is None:
            continue
        if r["requests"] != counts.get(r["run_id"], 0):
            continue  # stale, not wrong: every view recomputes a row whose request count changed
        stored = json.loads(r["metrics_json"])
        derived = json.loads(json.dumps(as_stored(m, stored)))
        if list(stored) != list(derived):
            problems.append(f"run {r['run_id']}: stored metrics hold keys {', '.join(list(stored)[:4])} ... not in the "
                            "order this console stores them, or with metrics missing before later ones (edited)")
            continue
        wrong = [k for k, v in derived.items() if stored.get(k) != v]
        if wrong:
            problems.append(f"run {r['run_id']}: stored metrics differ from the ones its requests and chunks give "
                            f"({', '.join(wrong[:4])}) (edited)")
    return len(rows), problems

