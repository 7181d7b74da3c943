"""Workload manifests and holdout reservation.

A manifest freezes what a plan's requests are made of: the meta.lst SHA-256, the selected
utterance ids of every pool the plan uses (in order) and the SHA-256 of every prompt wav. Its hash
covers no absolute path, so moving a checkout does not change it. The holdout pool is reserved
when the plan is frozen: freezing is refused if any holdout id already appears in any stored
request, and opening the holdout later is an explicit audit event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data.audit import append_event, atomic, events
from data.errors import CampaignError
from data.hashing import canonical_json, sha256_file, sha256_text
from data.store import Store, utcnow
from data.workload import Workload, load_workload, pool_error_message

if TYPE_CHECKING:
    from data.plan_model import Plan

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
ALL = "(all)"  # pool name used in manifests when a plan selects every utterance


@dataclass(frozen=True)
class Manifest:
    hash: str
    root: Path
    locale: str
    meta_sha256: str
    pools: dict[str, list[str]]
    prompt_wav_sha256: dict[str, str]
    pools_file_sha256: str | None = None  # set when the plan names a workload.pools_file

    @property
    def doc(self) -> dict[str, Any]:
        doc = {"schema": "omni-campaign-manifest/1", "locale": self.locale, "meta_sha256": self.meta_sha256,
               "pools": self.pools, "prompt_wav_sha256": self.prompt_wav_sha256}
        if self.pools_file_sha256 is not None:
            doc["pools_file_sha256"] = self.pools_file_sha256
        return doc


def resolve_workload_root(root: str, plan_path: str | None = None) -> Path:
    """Absolute as given; relative: next to the plan file, else the current directory, else the
    project root (where the bundled sample lives)."""
    p = Path(root)
    if p.is_absolute():
        return p
    bases = ([Path(plan_path).resolve().parent] if plan_path else []) + [Path.cwd(), PACKAGE_ROOT]
    for base in bases:
        if (base / p).exists():
            return (base / p).resolve()
    return p


def plan_pools(plan: "Plan") -> list[str | None]:
    """Pools a plan draws requests from: tuning, holdout and the quality pool."""
    out: list[str | None] = []
    for name in (plan.workload.pool, plan.workload.holdout_pool, plan.quality.pool if plan.quality.baseline else None):
        if name not in out and (name is not None or not out):
            out.append(name)
    return [p for p in out if p is not None] or [None]


def plan_pools_file(plan: "Plan") -> Path | None:
    """The plan's `workload.pools_file` (relative: next to the plan file, else the cwd)."""
    name = getattr(plan.workload, "pools_file", None)
    return resolve_workload_root(name, plan.source_path) if name else None


def load_plan_workload(plan: "Plan") -> Workload:
    root = resolve_workload_root(plan.workload.root, plan.source_path)
    return load_workload(root, plan.workload.locale, plan_pools_file(plan))


def build_manifest(plan: "Plan", label: str = "plan") -> Manifest:
    """Hash the workload as the plan uses it; refuses missing pools or prompt wavs, and pools that
    include a bad meta.lst line (data/workload.py)."""
    try:
        wl = load_plan_workload(plan)
    except CampaignError as exc:
        raise CampaignError(f"{label}: workload.root: {exc}") from None
    pools: dict[str, list[str]] = {}
    for name in plan_pools(plan):
        if name is not None and name not in wl.pools:
            raise CampaignError(f"{label}: workload: pool {name!r} not found in {wl.root} (have: {', '.join(sorted(wl.pools)) or 'none'})")
        bad = wl.pool_errors(name)
        if bad:  # a pool is never silently shortened by a line that did not parse
            raise CampaignError(f"{label}: workload: {pool_error_message(name, bad)}")
        pools[name or ALL] = [u.utt_id for u in wl.pool(name)]
    by_id = wl.by_id
    hashes: dict[str, str] = {}
    for ids in pools.values():
        for utt_id in ids:
            if utt_id in hashes:
                continue
            wav = by_id[utt_id].prompt_wav
            if not wav.is_file():
                raise CampaignError(f"{label}: workload: prompt wav of {utt_id} missing: {wav}")
            hashes[utt_id] = sha256_file(wav)
    meta_sha = wl.meta_sha256()
    doc: dict[str, Any] = {"schema": "omni-campaign-manifest/1", "locale": wl.locale, "meta_sha256": meta_sha,
                           "pools": pools, "prompt_wav_sha256": hashes}
    pools_file = plan_pools_file(plan)
    pools_sha = sha256_file(pools_file) if pools_file is not None else None
    if pools_sha is not None:  # the pools file is part of what the manifest freezes
        doc["pools_file_sha256"] = pools_sha
    return Manifest(sha256_text(canonical_json(doc)), wl.root, wl.locale, meta_sha, pools, hashes, pools_sha)


def freeze_manifest(store: Store, plan: "Plan", label: str = "plan", built: Manifest | None = None) -> Manifest:
    """Build (unless `built` is given), check against the plan's pinned hash (if any) and store the
    manifest (idempotent)."""
    m = built or build_manifest(plan, label)
    pinned = plan.workload.manifest_sha256
    if pinned and pinned != m.hash:
        raise CampaignError(f"{label}: workload.manifest_sha256: {pinned} does not match the workload on disk ({m.hash})")
    if store.scalar("SELECT count(*) FROM workload_manifests WHERE manifest_hash = ?", [m.hash]):
        return m
    with atomic(store):
        store.insert("workload_manifests", {
            "manifest_hash": m.hash, "root": str(m.root), "locale": m.locale, "meta_sha256": m.meta_sha256,
            "utterances": len(m.prompt_wav_sha256), "manifest_json": canonical_json(m.doc), "created_at": utcnow(),
        })
        append_event(store, "manifest_frozen", plan_hash=None, subject=m.hash,
                     payload={"root": str(m.root), "locale": m.locale, "meta_sha256": m.meta_sha256,
                              "pools": {k: len(v) for k, v in m.pools.items()}})
    return m


def holdout_ids(plan: "Plan", manifest: Manifest) -> list[str]:
    name = plan.workload.holdout_pool
    return list(manifest.pools.get(name, [])) if name else []


def check_holdout_unused(store: Store, plan: "Plan", manifest: Manifest, label: str = "plan",
                         inherited: bool = False) -> None:
    """Refuse a plan whose tuning pool overlaps its holdout, whose other pools hold ids another
    frozen plan reserved and has not opened, or (unless its reservation is `inherited` from its
    parent, audited when that was frozen) whose holdout ids were already requested (the
    pre-freeze reuse audit)."""
    ids = holdout_ids(plan, manifest)
    for name, pool_ids in manifest.pools.items():
        if name != plan.workload.holdout_pool and (hit := reserved_ids_sent(store, pool_ids)):
            raise reserved_refusal(f"{label}: workload pool {name!r}", *hit)
    if not ids:
        return
    tuning = set(manifest.pools.get(plan.workload.pool or ALL, []))
    overlap = [i for i in ids if i in tuning]
    if overlap:
        raise CampaignError(f"{label}: workload.holdout_pool: {len(overlap)} holdout id(s) are also in tuning pool "
                            f"{plan.workload.pool!r}: {', '.join(overlap[:8])}{' ...' if len(overlap) > 8 else ''}")
    if inherited:
        return
    store.con.execute("CREATE OR REPLACE TEMP TABLE _holdout_ids (utt_id VARCHAR)")
    store.con.executemany("INSERT INTO _holdout_ids VALUES (?)", [[i] for i in ids])
    rows = store.query(
        "SELECT q.utt_id, list(DISTINCT q.run_id ORDER BY q.run_id) AS runs FROM requests q "
        "JOIN _holdout_ids h USING (utt_id) GROUP BY q.utt_id ORDER BY q.utt_id"
    )
    store.con.execute("DROP TABLE _holdout_ids")
    if rows:
        shown = "; ".join(f"{r['utt_id']} (runs {', '.join(r['runs'][:3])}{' ...' if len(r['runs']) > 3 else ''})" for r in rows[:6])
        raise CampaignError(f"{label}: workload.holdout_pool {plan.workload.holdout_pool!r}: {len(rows)} of {len(ids)} "
                            f"holdout id(s) already appear in stored requests: {shown}{' ...' if len(rows) > 6 else ''}; "
                            f"reserve genuinely unused ids")


def plan_lineage(store: Store, plan_hash: str) -> list[str]:
    """The plan hash and its ancestors (addendum -> parent -> ...)."""
    out = [plan_hash]
    while True:
        parent = store.scalar("SELECT parent_hash FROM plans WHERE plan_hash = ?", [out[-1]])
        if not parent or parent in out:
            return out
        out.append(parent)


def holdout_opened(store: Store, plan_hash: str) -> dict[str, Any] | None:
    """The holdout_opened event for this plan or an ancestor, if any."""
    for h in plan_lineage(store, plan_hash):
        evs = events(store, kind="holdout_opened", plan_hash=h)
        if evs:
            return evs[0]
    return None


def open_holdout(store: Store, plan: "Plan", reason: str,
                 selection: list[dict[str, Any]] | None = None) -> tuple[int, bool]:
    """Record the explicit decision to open the reserved holdout, with the selection it follows
    (the selected candidates and the verdicts behind them, docs/plans.md); (seq, newly_opened)."""
    if not plan.workload.holdout_pool:
        raise CampaignError(f"plan {plan.hash[:12]}: workload.holdout_pool is not set; nothing to open")
    if not reason.strip():
        raise CampaignError("--reason: must not be empty")
    prior = holdout_opened(store, plan.hash)
    if prior:
        return int(prior["seq"]), False
    seq = append_event(store, "holdout_opened", plan_hash=plan.hash, subject=plan.workload.holdout_pool,
                       payload={"reason": reason, "pool": plan.workload.holdout_pool,
                                **({"selection": selection} if selection is not None else {})})
    return seq, True


@dataclass(frozen=True)
class Reservation:
    """A holdout pool some frozen plan reserved and has not opened."""

    plan_hash: str
    name: str
    pool: str
    seq: int  # its freeze event
    ids: frozenset[str]

    def describe(self) -> str:
        return f"holdout pool {self.pool!r} of plan {self.name!r} ({self.plan_hash[:12]}, reserved at seq {self.seq}, not opened)"


def unopened_reservations(store: Store) -> list[Reservation]:
    """Every holdout reserved by a plan (or addendum) frozen in the store and not yet opened, in
    chain order: no request path outside that plan's own quality arms may send its ids
    (docs/statistics.md, "Who may send a reserved id")."""
    out = []
    for ev in events(store, kind="plan_frozen") + events(store, kind="addendum_frozen"):
        pool = ev["payload"].get("holdout_pool")
        manifest = stored_manifest(store, ev["payload"]["manifest_hash"]) if pool and ev["payload"].get("manifest_hash") else None
        if not manifest or holdout_opened(store, ev["plan_hash"]):
            continue
        out.append(Reservation(ev["plan_hash"], ev["payload"].get("name") or ev["subject"], pool, ev["seq"],
                               frozenset(manifest["pools"].get(pool, []))))
    return sorted(out, key=lambda r: r.seq)


def reserved_ids_sent(store: Store, utt_ids: list[str], plan_hash: str | None = None,
                      pool: str | None = None) -> tuple[Reservation, list[str]] | None:
    """The first unopened reservation whose ids a run would send, with those ids (in send order);
    None when it sends none. A plan's quality arm (its opened holdout pool) may send its own ids."""
    own = {h for h in (plan_lineage(store, plan_hash) if plan_hash and pool else [])
           for ev in events(store, kind="plan_frozen", plan_hash=h) + events(store, kind="addendum_frozen", plan_hash=h)
           if ev["payload"].get("holdout_pool") == pool}
    for r in unopened_reservations(store):
        if r.plan_hash in own:
            continue
        hit = list(dict.fromkeys(u for u in utt_ids if u in r.ids))
        if hit:
            return r, hit
    return None


def reserved_refusal(what: str, reservation: Reservation, ids: list[str]) -> CampaignError:
    shown = ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
    return CampaignError(f"{what} would send {len(ids)} id(s) of the {reservation.describe()}: {shown}; nothing but "
                         "that plan's quality arms may send them (draw from the tuning pool; docs/statistics.md, "
                         "\"Who may send a reserved id\")")


def frozen_manifest(store: Store, plan_hash: str) -> dict[str, Any] | None:
    """The manifest a plan (or addendum) was frozen with, by its freeze event."""
    h = store.scalar("SELECT json_extract_string(payload_json, '$.manifest_hash') FROM audit_events "
                     "WHERE kind IN ('plan_frozen', 'addendum_frozen') AND plan_hash = ? ORDER BY seq LIMIT 1", [plan_hash])
    return stored_manifest(store, h) if h else None


def stored_manifest(store: Store, manifest_hash: str) -> dict[str, Any] | None:
    row = store.query("SELECT manifest_json FROM workload_manifests WHERE manifest_hash = ?", [manifest_hash])
    return json.loads(row[0]["manifest_json"]) if row else None
