"""Imported results: outside figures kept as hypotheses, never as measurements (docs/results.md,
"Imported results").

`campaign import results FILE --source TEXT --ref TEXT` reads a CSV (columns engine, concurrency,
metric, value, unit) or a JSON file (a list of such objects, or {"results": [...]}, each object
optionally with `requests`: the source's per-request rows) and stores every figure in
`imported_results` with its provenance, and one `results_imported` audit event holding the digest
of the rows (so `audit verify` and `evidence verify` find an edited or deleted figure). Nothing
that aggregates, gates or issues a verdict reads that table: a figure someone else measured is a
hypothesis to test, not evidence. A bad file is refused whole with one line naming the file, row
and field; nothing is stored.
"""

from __future__ import annotations

import csv
import io
import json
import math
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data.audit import append_event, atomic, whoami
from data.digest import digestible_columns, table_digests
from data.errors import CampaignError
from data.hashing import canonical_json, sha256_bytes

if TYPE_CHECKING:
    from data.store import Store

TABLE = "imported_results"
REQUIRED = ("engine", "metric", "value", "unit")
FIELDS = ("engine", "concurrency", "metric", "value", "unit", "requests")
MARK = "imported, not measured"  # how every view labels an imported figure


@dataclass(frozen=True)
class Figure:
    row_number: int
    engine: str
    concurrency: int | None
    metric: str
    value_text: str
    value: float
    unit: str
    requests: list[Any] | None


def _text(where: str, name: str, raw: Any, required: bool) -> str | None:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        if required:
            raise CampaignError(f"{where}: field {name!r} is missing or empty")
        return None
    if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
        raise CampaignError(f"{where}: field {name!r}: {raw!r} is not text")
    return str(raw).strip()


def _figure(where: str, n: int, rec: dict[str, Any]) -> Figure:
    unknown = sorted(set(rec) - set(FIELDS))
    if unknown:
        raise CampaignError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})")
    engine, metric, unit = (_text(where, k, rec.get(k), True) for k in ("engine", "metric", "unit"))
    value_text = _text(where, "value", rec.get("value"), True)
    assert engine and metric and unit and value_text
    try:
        value = float(value_text)
    except ValueError:
        raise CampaignError(f"{where}: field 'value': {value_text!r} is not a number") from None
    if not math.isfinite(value):
        raise CampaignError(f"{where}: field 'value': {value_text!r} is not a finite number")
    conc_text = _text(where, "concurrency", rec.get("concurrency"), False)
    concurrency = None
    if conc_text is not None:
        try:
            concurrency = int(conc_text)
        except ValueError:
            raise CampaignError(f"{where}: field 'concurrency': {conc_text!r} is not a whole number") from None
        if not 1 <= concurrency <= 1_000_000:
            raise CampaignError(f"{where}: field 'concurrency': {concurrency} is outside 1..1000000")
    requests = rec.get("requests")
    if requests is not None and not (isinstance(requests, list) and all(isinstance(r, dict) for r in requests)):
        raise CampaignError(f"{where}: field 'requests': must be a list of objects (the per-request rows)")
    return Figure(n, engine, concurrency, metric, value_text, value, unit, requests)


def parse(path: Path) -> list[Figure]:
    """Every figure of the file, or a CampaignError naming the file, row and field."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CampaignError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CampaignError(f"{path}: not UTF-8 text") from None
    suffix = path.suffix.lower()
    if suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        header = reader.fieldnames or []
        missing = [k for k in REQUIRED if k not in header]
        if missing:
            raise CampaignError(f"{path}:1: header lacks column {missing[0]!r} (needs {', '.join(REQUIRED)}; "
                                "concurrency optional)")
        if "requests" in header:
            raise CampaignError(f"{path}:1: per-request rows come in a JSON file (field 'requests'), not a CSV column")
        out = []
        for rec in reader:
            line = reader.line_num
            if None in rec:
                raise CampaignError(f"{path}:{line}: more fields than the header names")
            out.append(_figure(f"{path}:{line}", line, dict(rec)))
    elif suffix == ".json":
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise CampaignError(f"{path}: not valid JSON ({exc})") from None
        items = doc.get("results") if isinstance(doc, dict) else doc
        if not isinstance(items, list):
            raise CampaignError(f"{path}: expected a list of results or {{\"results\": [...]}}")
        out = []
        for i, rec in enumerate(items, 1):
            if not isinstance(rec, dict):
                raise CampaignError(f"{path}: result {i}: not an object")
            out.append(_figure(f"{path}: result {i}", i, rec))
    else:
        raise CampaignError(f"{path}: unknown format {suffix or '(no extension)'!r}: give a .csv or .json file")
    if not out:
        raise CampaignError(f"{path}: no results in the file")
    return out


def rows_digest(store: Store, import_id: str) -> dict[str, Any]:
    """{rows, sha256, columns} of one import's rows (data/digest.py), for its event."""
    cols = digestible_columns(TABLE)
    d = table_digests(store, TABLE, cols, "import_id", ("row_number",), keys=[import_id])[import_id]
    return {"rows": d.rows, "sha256": d.sha256, "columns": cols}


def import_results(store: Store, path: Path, source: str, reference: str) -> tuple[str, int, int]:
    """Store every figure of `path` with one `results_imported` event; (import id, rows, seq)."""
    if not source.strip():
        raise CampaignError("--source: say who published the figures")
    if not reference.strip():
        raise CampaignError("--ref: say where they were published (URL, commit, paper)")
    figures = parse(path)
    file_sha = sha256_bytes(path.read_bytes())
    prior = store.query(f"SELECT DISTINCT import_id FROM {TABLE} WHERE file_sha256 = ?", [file_sha])
    if prior:
        raise CampaignError(f"{path}: already imported as {prior[0]['import_id']} (same sha256 {file_sha[:16]}…)")
    now = datetime.now(timezone.utc)
    iid = f"imp-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    with atomic(store):
        for f in figures:
            store.insert(TABLE, {
                "import_id": iid, "row_number": f.row_number, "engine": f.engine, "concurrency": f.concurrency,
                "metric": f.metric, "value_text": f.value_text, "value": f.value, "unit": f.unit,
                "requests_json": canonical_json(f.requests) if f.requests is not None else None,
                "source": source.strip(), "reference": reference.strip(), "file_path": str(path),
                "file_sha256": file_sha, "imported_at": now, "imported_by": whoami()})
        seq = append_event(store, "results_imported", subject=iid, payload={
            "source": source.strip(), "reference": reference.strip(), "file_sha256": file_sha,
            "file": path.name, "digest": rows_digest(store, iid), "note": MARK})
    return iid, len(figures), seq


def imported_rows(store: Store) -> list[dict[str, Any]]:
    """Every imported figure, for the views that show them (marked, never aggregated)."""
    return store.query(f"SELECT * FROM {TABLE} ORDER BY imported_at, import_id, row_number")
