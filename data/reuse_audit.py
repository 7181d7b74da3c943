"""The holdout reuse audit beyond this store (`plan freeze --reuse-audit PATH...`, docs/plans.md,
"Holdout reuse beyond this store").

A holdout is only untouched if no earlier measurement anywhere used its prompts: another team's
store, an evidence bundle from an earlier round, the per-request CSV an engine's own benchmark
wrote. Each source is read for the utterance ids it requested; a reserved id found in one refuses
the freeze naming the source, and the sources audited are recorded in the freeze event (path, kind,
SHA-256, ids and requests read), which the acceptance record and the evidence bundle show.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import duckdb

from data.errors import CampaignError, first_line
from data.hashing import sha256_file

DUCKDB_MAGIC = b"DUCK"  # bytes 8-12 of a DuckDB database file


@dataclass(frozen=True)
class AuditedSource:
    path: str
    kind: str  # store | bundle | csv
    sha256: str  # of the file (a bundle: of its MANIFEST.sha256)
    ids: int  # distinct utterance ids it requested
    requests: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _kind(p: Path) -> str:
    if p.is_dir():
        if not (p / "tables" / "requests.parquet").is_file():
            raise CampaignError(f"--reuse-audit {p}: a folder but not an evidence bundle (no tables/requests.parquet)")
        return "bundle"
    if not p.is_file():
        raise CampaignError(f"--reuse-audit {p}: no such file or folder")
    with p.open("rb") as f:
        head = f.read(12)
    if head[8:12] == DUCKDB_MAGIC:
        return "store"
    if p.suffix.lower() == ".csv":
        return "csv"
    raise CampaignError(f"--reuse-audit {p}: not a campaign store, an evidence bundle or a per-request CSV")


def _counts(p: Path, kind: str) -> dict[str, int]:
    """utt_id -> requests, read without writing anything (a store is opened read-only)."""
    try:
        if kind == "store":
            con = duckdb.connect(str(p), read_only=True)
            sql = "SELECT utt_id, count(*) FROM requests GROUP BY utt_id"
        else:
            con = duckdb.connect()
            src = (f"read_parquet('{p / 'tables' / 'requests.parquet'}')" if kind == "bundle"
                   else f"read_csv('{p}', header = true, all_varchar = true)")
            cols = [c[0] for c in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()]
            if "utt_id" not in cols:
                raise CampaignError(f"--reuse-audit {p}: no utt_id column (have: {', '.join(cols)})")
            sql = f"SELECT utt_id, count(*) FROM {src} GROUP BY utt_id"
        try:
            return {str(u): int(n) for u, n in con.execute(sql).fetchall() if u is not None}
        finally:
            con.close()
    except duckdb.Error as exc:
        raise CampaignError(f"--reuse-audit {p}: cannot be read ({first_line(exc)})") from None


def audit_sources(paths: Sequence[str | Path], reserved: Sequence[str], label: str) -> list[AuditedSource]:
    """Read every source; refuse, naming the source and the ids, if any requested a reserved id."""
    out, wanted = [], list(dict.fromkeys(reserved))
    for raw in paths:
        p = Path(raw).expanduser().resolve()
        kind = _kind(p)
        counts = _counts(p, kind)
        hit = [u for u in wanted if u in counts]
        if hit:
            shown = ", ".join(hit[:6]) + (" ..." if len(hit) > 6 else "")
            raise CampaignError(f"{label}: workload.holdout_pool: {len(hit)} of {len(wanted)} holdout id(s) were "
                                f"already requested in {kind} {p}: {shown}; reserve genuinely unused ids")
        manifest = p / "MANIFEST.sha256"
        digest = sha256_file(p) if kind != "bundle" else sha256_file(manifest if manifest.is_file()
                                                                     else p / "tables" / "requests.parquet")
        out.append(AuditedSource(str(p), kind, digest, len(counts), sum(counts.values())))
    return out
