"""The campaign's record in the evidence bundle (docs/results.md, "Evidence bundle"): workload
manifests (with their pools), imported results (marked: not measurements), profiler windows and
stored ASR rechecks, each whole-store (like the audit chain); the raw per-request table again as
`tables/requests.json.gz` (JSON lines, one request a line, for readers without Parquet); and the
part of REPRODUCE.md that says how to rebuild each engine and run the campaign again.

Verify loads these tables into the scratch store with the others (console/evidence.py) and runs
`audit verify`'s own checks on them (data/integrity.py `manifests`, data/integrity_record.py)
against the whole bundled chain, then checks that requests.json.gz holds exactly the rows of
tables/requests.parquet.
"""

from __future__ import annotations

import gzip
import json
from functools import partial
from pathlib import Path
from typing import Any, Callable

from data.store import Store

RECORD_TABLES = ("workload_manifests", "imported_results", "profiler_windows", "recheck_results")
ORDER = {"workload_manifests": "created_at, manifest_hash", "imported_results": "import_id, row_number",
         "profiler_windows": "start_seq", "recheck_results": "recheck_id, run_id, request_index, scorer_id"}
REQUESTS_JSON = "requests.json.gz"
RECORD_CHECKS = ("manifests", "imported results", "profiler windows", "rechecks")


def write_record(store: Store, out: Path, write_table: Callable[..., int]) -> dict[str, int]:
    """The record tables (whole store) into out/tables, and requests.json.gz from requests.parquet."""
    counts = {t: write_table(store, t, f"SELECT * FROM {t} ORDER BY {ORDER[t]}", [], out / "tables")
              for t in RECORD_TABLES}
    (out / "tables" / REQUESTS_JSON).write_bytes(gzip.compress(requests_lines(out), mtime=0))
    return counts


def requests_lines(root: Path) -> bytes:
    """tables/requests.parquet as JSON lines (sorted keys; NULL as null), the .json.gz's content."""
    import pyarrow.parquet as pq

    t = pq.read_table(root / "tables" / "requests.parquet")
    return "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in t.to_pylist()).encode()


def check_requests_json(root: Path) -> str:
    from console.evidence_steps import EvidenceMismatch

    p = root / "tables" / REQUESTS_JSON
    if not p.is_file():
        raise EvidenceMismatch(f"tables/{REQUESTS_JSON}: missing")
    try:
        got = gzip.decompress(p.read_bytes())
    except (OSError, EOFError) as exc:
        raise EvidenceMismatch(f"tables/{REQUESTS_JSON}: not gzip ({exc})") from None
    if got != requests_lines(root):
        raise EvidenceMismatch(f"tables/{REQUESTS_JSON}: differs from tables/requests.parquet (it is a copy of it)")
    return f"tables/{REQUESTS_JSON} holds exactly the rows of tables/requests.parquet"


def record_steps(root: Path, store: Store) -> list[tuple[str, Callable[[], Any]]]:
    """(name, step) for verify_bundle: the record tables against the whole bundled chain."""
    from console.evidence_steps import EvidenceMismatch, Step
    from data import integrity
    from data.audit import events

    def check(name: str) -> Step:
        c = dict(integrity.CHECKS)[name](store, events(store))
        if not c.ok:
            raise EvidenceMismatch(c.message)
        return Step(name, c.message)

    steps: list[tuple[str, Callable[[], Any]]] = [(n, partial(check, n)) for n in RECORD_CHECKS]
    steps.append(("requests json", lambda: Step("requests json", check_requests_json(root))))
    return steps


def rebuild_text(plan: Any) -> list[str]:
    """REPRODUCE.md's section on rebuilding each engine and running the campaign, from the plan
    alone (so verify can rebuild it): revision, source, patch, argv, environment names, deploy
    configuration, then the commands that ran the campaign."""
    doc = plan.document()
    lines = ["", "## Rebuilding each engine", "",
             "What each launch actually ran (source commit, tree, dirty flag, patch hash, deploy configuration with "
             "file hashes, checkpoint hashes) is in the launches' rows (`engine_launches`); the patches are "
             "under patches/ with patches/patches.json (`git checkout COMMIT && git apply --binary PATCH`). "
             "The plan states:", ""]
    for e in doc.get("engines") or []:
        lines += [f"- `{e.get('name')}` ({e.get('adapter')}, dialect {e.get('dialect')}): revision "
                  f"`{e.get('revision') or '-'}`, source `{json.dumps(e.get('source'), sort_keys=True)}`, patch "
                  f"`{e.get('patch') or '-'}`, config `{e.get('config_path') or '-'}`",
                  f"  argv: `{json.dumps(e.get('argv') or [])}`",
                  f"  environment (names; values are hashed in the plan): "
                  f"`{json.dumps(sorted((e.get('env') or {}).keys()) + list(e.get('env_passthrough') or []))}`"]
    path = plan.source_path or "plan.json"
    lines += ["", "## Running the campaign again", "",
              "With each engine rebuilt as above, the workload folder the manifest names (tables/workload_manifests: "
              "every prompt wav's hash and the pools) and the plan file (plans/<hash>.json, the frozen canonical "
              "JSON):", "",
              f"       campaign plan freeze {path} --db new.duckdb",
              f"       campaign run {path} --db new.duckdb",
              f"       campaign plan open-holdout {path} --reason \"...\" --db new.duckdb",
              f"       campaign run {path} --holdout --db new.duckdb",
              f"       campaign score {path} --db new.duckdb",
              f"       campaign validate {path} --db new.duckdb",
              f"       campaign gate {path} --db new.duckdb", "",
              "Imported results (tables/imported_results) are outside figures, imported, not measured: no "
              "aggregate or verdict reads them. Runs that overlapped a profiler window (tables/profiler_windows) "
              "are excluded with reason 'profiled: window W'.", ""]
    return lines
