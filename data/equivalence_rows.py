"""The stored rows of equivalence verdicts (`equivalence_measures`) against the verdicts that own
them: a row set must equal, field for field, the `checks` of its verdict, whose SHA-256 the
`verdict_issued` event records (docs/equivalence.md, docs/integrity.md). So an edited, added or
deleted row is caught without a digest of its own."""

from __future__ import annotations

import json
import math
from typing import Any

from data.store import Store

KEY_FIELDS = ("reference", "candidate", "utt_id", "repeat", "measure", "value", "tolerance", "passed", "detail",
              "ref_run_id", "ref_request_index", "ref_audio_sha256", "cand_run_id", "cand_request_index",
              "cand_audio_sha256")


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def stored_rows(store: Store, verdict_id: str) -> list[dict[str, Any]]:
    """The table's rows of one verdict in the checks' JSON form (repeat, infinity as "inf")."""
    rows = store.query("SELECT * FROM equivalence_measures WHERE verdict_id = ?", [verdict_id])
    return [{**{k: r[k] for k in KEY_FIELDS if k in r}, "repeat": r["repeat_index"], "value": _json_value(r["value"])}
            for r in rows]


def _key(r: dict[str, Any]) -> str:
    return json.dumps([r.get(k) if r.get(k) != "" else None for k in KEY_FIELDS], sort_keys=True, default=str)


def equivalence_problems(store: Store, only: str | None = None,
                         checks: list[dict[str, Any]] | None = None) -> tuple[list[str], int]:
    """(problems, verdicts checked): rows without an equivalence verdict, and verdicts whose rows
    differ from their checks. `only` with `checks`: one verdict against the given checks (an
    evidence bundle holds the verdict documents, not the verdicts table)."""
    problems: list[str] = []
    verdicts: list[tuple[str, list[dict[str, Any]]]]
    if only is not None:
        verdicts = [(only, checks or [])]
    else:
        verdicts = [(v["verdict_id"], json.loads(v["checks_json"] or "[]")) for v in
                    store.query("SELECT verdict_id, checks_json FROM verdicts WHERE kind = 'equivalence'")]
        known = {vid for vid, _ in verdicts}
        for r in store.query("SELECT DISTINCT verdict_id FROM equivalence_measures"):
            if r["verdict_id"] not in known:
                problems.append(f"equivalence_measures: rows for {r['verdict_id']}, which is no equivalence verdict")
    for vid, issued in verdicts:
        got, want = sorted(map(_key, stored_rows(store, vid))), sorted(map(_key, issued))
        if got != want:
            changed = len(set(got) ^ set(want))
            problems.append(f"equivalence verdict {vid}: its equivalence_measures rows differ from the "
                            f"checks it was issued with ({len(got)} stored, {len(want)} issued, {changed} differing)")
    return problems, len(verdicts)
