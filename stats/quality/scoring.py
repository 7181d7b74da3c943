"""Scoring a plan's quality cells into `quality_scores`, and accounting for every expected output.

Which outputs are expected: for each quality arm (quality.baseline, quality.candidate) and each
quality concurrency, the plan's aggregate runs (`data.queries.aggregate_runs`: measured,
complete, not excluded) drawn from the quality pool, and every non-warmup request in them.
A cell with fewer runs than `sweep.measured_repeats` contributes "run missing" gaps.

Scoring is idempotent and resumable: rows are keyed (run_id, request_index, scorer_id), existing
ones (ok or error) are skipped, and each batch commits on its own, so an interrupted pass loses
at most one batch. Failed requests and missing audio get no rows; they are coverage gaps
computed from `requests`, never dropped.

Each distinct content (audio bytes + reference text / prompt wav) is scored once per pass and the
result copied to every row with that content, and to later passes' rows (see `content_key`);
`ScoreSummary` says how many rows were computed and how many reused.
"""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from data.errors import CampaignError
from data.plan_model import Plan
from data.store import Store, utcnow
from data.hashing import sha256_file
from stats.quality.audio import prefetching
from stats.quality.base import METRICS, ScoreItem, ScoreResult, Scorer
from stats.quality.registry import (UnknownScorer, make_scorer, plan_scorers, scorer_class,
                                    scorer_status)
from stats.quality.text import normalize_text

ARMS = ("baseline", "candidate")
FRAME_COLUMNS = ["arm", "engine", "concurrency", "repeat", "run_id", "utt_id", "wer_errors", "wer_words",
                 "sim", "mos", "gap"]


@dataclass(frozen=True)
class Expected:
    """One output the plan's quality cells expect (run_id None: the whole run is missing)."""
    arm: str
    engine: str
    concurrency: int
    repeat: int
    run_id: str | None
    request_index: int | None
    utt_id: str | None
    outcome: str | None = None
    error_detail: str | None = None
    audio_path: str | None = None
    audio_sha256: str | None = None
    finish_reason: str | None = None


@dataclass
class ScoreSummary:
    scorer_id: str
    metric: str
    expected: int = 0
    existing: int = 0
    scored_ok: int = 0
    scored_error: int = 0
    not_scorable: dict[str, int] = field(default_factory=dict)  # cause -> count (no row written)
    seconds: float = 0.0
    computed: int = 0       # distinct content keys the model scored in this pass
    reused_pass: int = 0    # rows that copied a result computed earlier in this pass
    reused_stored: int = 0  # rows that copied an ok row stored by an earlier pass
    batches: int = 0        # insert transactions, each announced by a scores_stored event


def default_artifacts_dir(store: Store) -> Path:
    """Same default as `campaign run`: an `artifacts` folder next to the database."""
    return store.path.resolve().parent / "artifacts"


def resolve_audio(artifacts_dir: Path, audio_path: str) -> Path:
    p = Path(audio_path)
    return p if p.is_absolute() else artifacts_dir / p


def _aggregate_runs(store: Store, plan_hash: str, engine: str, concurrency: int, pool: str | None) -> list[dict]:
    from data.queries import aggregate_runs
    return aggregate_runs(store, plan_hash, engine, concurrency, pool=pool)


def _pool_ids(plan: Any, pool: str | None) -> list[str | None]:
    """Utterance ids a missing run would have had (the quality pool), or [None] if unknowable."""
    try:
        from data.manifest import load_plan_workload
        return [u.utt_id for u in load_plan_workload(plan).pool(pool)] or [None]
    except (CampaignError, ImportError, AttributeError, KeyError, TypeError):
        return [None]


def expected_outputs(store: Store, plan: Plan) -> list[Expected]:
    """Every (run, request) the plan's quality cells expect, plus placeholders for missing runs."""
    q = plan.quality
    pool = q.scored_pool
    repeats = plan.sweep.measured_repeats
    out: list[Expected] = []
    arm_engines = {"baseline": [q.baseline] if q.baseline else [], "candidate": plan.quality_candidates}
    for arm, engine in ((a, e) for a in ARMS for e in arm_engines[a]):
        for conc in q.scored_concurrencies:
            runs = _aggregate_runs(store, plan.hash, engine, int(conc), pool)
            for run in runs:
                reqs = store.query(
                    "SELECT request_index, utt_id, outcome, error_detail, audio_path, audio_sha256, finish_reason "
                    "FROM requests WHERE run_id = ? AND NOT is_warmup ORDER BY request_index", [run["run_id"]])
                out += [Expected(arm, engine, int(conc), int(run["repeat_index"]), run["run_id"], r["request_index"],
                                 r["utt_id"], r["outcome"], r["error_detail"], r["audio_path"], r["audio_sha256"],
                                 r["finish_reason"])
                        for r in reqs]
            have = {int(r["repeat_index"]) for r in runs}
            for rep in range(repeats):
                if len(have) >= repeats:
                    break
                if rep not in have:
                    have.add(rep)
                    out += [Expected(arm, engine, int(conc), rep, None, None, u) for u in _pool_ids(plan, pool)]
    return out


def truncation_gap(e: Expected, plan: Plan) -> str | None:
    """A truncated output (finish_reason "length": cut by a token limit) is not the utterance the
    gate compares, so it is a coverage gap unless the plan sets `quality.allow_truncated`
    (docs/quality.md). It is still scored, so the figures show what the cut did."""
    if e.finish_reason == "length" and not plan.quality.allow_truncated:
        return "truncated: finish_reason 'length' (output cut by a token limit; quality.allow_truncated is false)"
    return None


# -- scoring ----------------------------------------------------------------------------------
def not_scorable(e: Expected, artifacts_dir: Path) -> str | None:
    """Why an expected output has nothing to score (a coverage gap cause), or None."""
    if e.run_id is None:
        return f"run missing: no measured run for {e.engine} c{e.concurrency} repeat {e.repeat}"
    if e.outcome != "ok":
        return f"request failed: {e.outcome}"
    if not e.audio_path:
        return "audio missing: no audio path recorded"
    if not resolve_audio(artifacts_dir, e.audio_path).is_file():
        return f"audio missing: {resolve_audio(artifacts_dir, e.audio_path)}"
    return None


def _row(e: Expected, scorer: Scorer, res: ScoreResult, audio_sha: str | None) -> dict:
    row = {"run_id": e.run_id, "request_index": e.request_index, "utt_id": e.utt_id, "metric": scorer.metric,
           "scorer_id": scorer.scorer_id, "scorer_version": scorer.version, "model_hash": scorer.model_hash,
           "status": res.status, "error": res.error, "audio_sha256": audio_sha, "scored_at": utcnow(),
           "value": None if res.value is None or (isinstance(res.value, float) and math.isnan(res.value)) else res.value}
    if res.wer is not None:
        row.update(wer_substitutions=res.wer.substitutions, wer_deletions=res.wer.deletions,
                   wer_insertions=res.wer.insertions, wer_ref_words=res.wer.ref_words,
                   hypothesis=res.hypothesis, ref_norm=res.wer.ref_norm, hyp_norm=res.wer.hyp_norm)
    return row


def existing_rows(store: Store, scorer_id: str) -> dict[tuple[str, int], str | None]:
    """(run_id, request_index) -> model_hash of this scorer's stored rows."""
    rows = store.con.execute("SELECT run_id, request_index, model_hash FROM quality_scores WHERE scorer_id = ?",
                             [scorer_id]).fetchall()
    return {(r, i): h for r, i, h in rows}


# -- reuse by content ---------------------------------------------------------------------------
# A score is a pure function of (scorer id, model hash, audio bytes, and the normalised reference
# text for WER / the prompt wav bytes for SIM). Lossless engines return byte-identical audio across
# repeats, concurrencies and profiles, so each distinct content key is computed once per pass and
# copied to every (run, request) row that has it; ok rows stored by earlier passes with the same
# scorer id and model hash are copied too. Rows stay one per (run, request, scorer).
_COPIED = ("status", "error", "value", "wer_substitutions", "wer_deletions", "wer_insertions", "wer_ref_words",
           "hypothesis", "ref_norm", "hyp_norm", "scorer_version", "model_hash", "scored_at")


def content_key(metric: str, audio_sha: str, target_text: str, prompt_sha: str | None) -> tuple:
    """What a score depends on besides the scorer and its model (which are fixed within a pass)."""
    if metric == "wer":
        return ("wer", audio_sha, normalize_text(target_text))
    if metric == "sim":
        return ("sim", audio_sha, prompt_sha)
    return (metric, audio_sha)


def _stored_key(metric: str, audio_sha: str, ref_norm: str, utt_id: str, plan_hash: str | None) -> tuple:
    """Key to match rows of earlier passes, for a new item and a stored row alike. Stored rows keep
    the normalised reference (ref_norm) but not the prompt wav's hash, so SIM rows match only
    within the same plan and utterance (same prompt)."""
    if metric == "wer":
        return ("wer", audio_sha, ref_norm)
    if metric == "sim":
        return ("sim", audio_sha, utt_id, plan_hash)
    return (metric, audio_sha)


def stored_results(store: Store, scorer: Scorer, shas: set[str]) -> dict[tuple, dict]:
    """Ok rows of earlier passes made by this scorer and model, keyed like `_stored_key`."""
    if not shas:
        return {}
    rows = store.query(
        "SELECT q.*, r.plan_hash AS run_plan_hash FROM quality_scores q LEFT JOIN runs r USING (run_id) "
        "WHERE q.scorer_id = ? AND q.model_hash = ? AND q.status = 'ok' AND q.audio_sha256 IS NOT NULL "
        "ORDER BY q.scored_at, q.run_id, q.request_index", [scorer.scorer_id, scorer.model_hash])
    out: dict[tuple, dict] = {}
    for r in rows:
        if r["audio_sha256"] not in shas:
            continue
        out.setdefault(_stored_key(scorer.metric, r["audio_sha256"], r["ref_norm"] or "", r["utt_id"],
                                   r["run_plan_hash"]), r)
    return out


def _copied_row(e: Expected, scorer: Scorer, src: dict) -> dict:
    return {"run_id": e.run_id, "request_index": e.request_index, "utt_id": e.utt_id, "metric": scorer.metric,
            "scorer_id": scorer.scorer_id, "audio_sha256": src["audio_sha256"], **{k: src[k] for k in _COPIED}}


def _file_hash_cached(cache: dict[Path, str], path: Path | None) -> str | None:
    if path is None:
        return None
    if path not in cache:
        try:
            cache[path] = sha256_file(path)
        except OSError:
            cache[path] = f"unreadable:{path}"  # the scorer reports the error; equal paths share it
    return cache[path]


def score_expected(store: Store, expected: Sequence[Expected], scorer: Scorer, *, workload: Any,
                   artifacts_dir: Path, plan_hash: str | None = None,
                   on_progress: Callable[[int, int], None] | None = None) -> ScoreSummary:
    """Score what is scorable and not yet stored for this scorer, computing each distinct content
    key once (see `content_key`); one transaction per batch of computations."""
    import time

    t0 = time.perf_counter()
    summary = ScoreSummary(scorer.scorer_id, scorer.metric, expected=len(expected))
    ok, why = scorer.available()
    if not ok:
        raise CampaignError(f"scorer {scorer.name}: unavailable: {why}")
    have = existing_rows(store, scorer.scorer_id)
    todo: list[tuple[Expected, ScoreItem]] = []
    by_id = workload.by_id if workload is not None else {}
    for e in expected:
        cause = not_scorable(e, artifacts_dir)
        if cause:
            key = cause.split(":")[0]
            summary.not_scorable[key] = summary.not_scorable.get(key, 0) + 1
            continue
        if (e.run_id, e.request_index) in have:
            summary.existing += 1
            continue
        # not_scorable found a stored output: a run, a request and its utterance
        assert e.run_id is not None and e.request_index is not None and e.utt_id is not None and e.audio_path
        utt = by_id.get(e.utt_id)
        todo.append((e, ScoreItem(e.run_id, e.request_index, e.utt_id, resolve_audio(artifacts_dir, e.audio_path),
                                  utt.target_text if utt else "", utt.prompt_wav if utt else None, e.audio_sha256)))
    stale = {h for h in have.values() if h and h != scorer.model_hash} if have else set()
    if todo and stale:
        raise CampaignError(
            f"scorer {scorer.scorer_id}: stored rows were made with model hash {sorted(stale)[0][:12]}, this model is "
            f"{scorer.model_hash[:12]}; refusing to mix models under one scorer id (use the original model folder)")

    # rows that need no model: bad input (error rows) and copies of earlier passes' rows
    direct: list[dict] = []
    ready: list[tuple[Expected, ScoreItem, str]] = []
    for e, item in todo:
        if by_id and e.utt_id not in by_id:
            direct.append(_row(e, scorer, ScoreResult.failed(f"utterance {e.utt_id} not in the workload"), None))
            continue
        sha = sha256_file(item.audio_path)
        if e.audio_sha256 and sha != e.audio_sha256:
            direct.append(_row(e, scorer, ScoreResult.failed(
                f"audio hash mismatch: file {sha[:12]} != recorded {e.audio_sha256[:12]}"), sha))
            continue
        ready.append((e, ScoreItem(item.run_id, item.request_index, item.utt_id, item.audio_path, item.target_text,
                                   item.prompt_wav, sha), sha))
    stored = stored_results(store, scorer, {sha for _, _, sha in ready})
    prompt_shas: dict[Path, str] = {}
    groups: dict[tuple, list[tuple[Expected, ScoreItem, str]]] = {}
    for e, item, sha in ready:
        src = stored.get(_stored_key(scorer.metric, sha, normalize_text(item.target_text), item.utt_id, plan_hash))
        if src is not None:
            direct.append(_copied_row(e, scorer, src))
            summary.reused_stored += 1
            continue
        prompt_sha = _file_hash_cached(prompt_shas, item.prompt_wav) if scorer.metric == "sim" else None
        groups.setdefault(content_key(scorer.metric, sha, item.target_text, prompt_sha), []).append((e, item, sha))
    if direct:
        _store_rows(store, scorer, plan_hash, direct)
        summary.batches += 1
        _count(summary, direct)

    keys = list(groups)
    total = len(keys)
    if on_progress:
        on_progress(0, total)
    if keys:
        scorer.ensure_loaded()
    for start, results in scored_in_batches(scorer, [groups[k][0][1] for k in keys]):
        batch = keys[start:start + len(results)]
        rows = [_row(e, scorer, res, sha) for k, res in zip(batch, results) for e, _, sha in groups[k]]
        _store_rows(store, scorer, plan_hash, rows)
        summary.batches += 1
        _count(summary, rows)
        summary.computed += len(batch)
        summary.reused_pass += len(rows) - len(batch)
        if on_progress:
            on_progress(start + len(batch), total)
    summary.seconds = time.perf_counter() - t0
    if rows_written := summary.scored_ok + summary.scored_error:
        _audit(store, plan_hash, scorer, summary, rows_written)
    return summary


def score_files(scorer: Scorer, items: Sequence[ScoreItem]) -> list[ScoreResult]:
    """Score arbitrary files (`campaign scorers run`) through the calls `score_expected` makes:
    availability, one model load, `score_batch` per `batch_size` items. Nothing is stored."""
    ok, why = scorer.available()
    if not ok:
        raise CampaignError(f"scorer {scorer.name}: unavailable: {why}")
    scorer.ensure_loaded()
    return [r for _, results in scored_in_batches(scorer, items) for r in results]


def scored_in_batches(scorer: Scorer, items: Sequence[ScoreItem]) -> Iterator[tuple[int, list[ScoreResult]]]:
    """(index of the batch's first item, its results) for each `batch_size` items in order. A
    device scorer's next batch of WAVs is read on worker threads while the model scores the
    current one (stats.quality.audio.Prefetcher), and its next batch is submitted before the
    current one's results are collected (Scorer.submit_batch), so the device does not wait for
    the CPU to stage a batch or for the caller to store one."""
    size = scorer.batch_size
    batches = [list(items[s:s + size]) for s in range(0, len(items), size)]
    reads_as = scorer.reads_as
    if not scorer.prefetches:
        for k, batch in enumerate(batches):
            yield k * size, scorer.score_batch(batch)
        return
    with prefetching(pinned=str(scorer.device).startswith("cuda")) as ahead, _short_gil_turns():
        if batches:
            ahead.submit([it.audio_path for it in batches[0]], resampler=reads_as)
        pending: tuple[int, Callable[[], list[ScoreResult]]] | None = None
        for k, batch in enumerate(batches):
            if k + 1 < len(batches):
                ahead.submit([it.audio_path for it in batches[k + 1]], resampler=reads_as)
            finish = scorer.submit_batch(batch)
            ahead.forget([it.audio_path for it in batch], resampler=reads_as)
            if pending is not None:
                yield pending[0], pending[1]()
            pending = (k * size, finish)
        if pending is not None:
            yield pending[0], pending[1]()


READER_SWITCH_S = 0.0005  # the interpreter's thread switch interval while a device scorer's batches run


@contextmanager
def _short_gil_turns() -> Iterator[None]:
    """While the prefetcher's readers run, the thread that launches the model's kernels waits for
    the GIL whenever a reader runs Python; the default 5 ms switch interval let a reader hold it
    that long. 0.5 ms measured +12 % files-to-scores on the H200 (docs/quality.md, "Throughput")."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(min(saved, READER_SWITCH_S))
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


def _store_rows(store: Store, scorer: Scorer, plan_hash: str | None, rows: Sequence[dict]) -> None:
    """Insert `rows` and, in the same transaction, the `scores_stored` event that announces them
    with their digest (data/score_digest.py), so no stored score is ever outside the audit chain."""
    from data.audit import append_event
    from data.score_digest import announce

    with store.transaction():
        for row in rows:
            store.insert("quality_scores", row)
        stored = announce(store, scorer.scorer_id, rows)
        append_event(store, "scores_stored", plan_hash=plan_hash, subject=scorer.scorer_id, payload=stored.payload())


def _count(summary: ScoreSummary, rows: Sequence[dict]) -> None:
    summary.scored_ok += sum(r["status"] == "ok" for r in rows)
    summary.scored_error += sum(r["status"] == "error" for r in rows)


def _audit(store: Store, plan_hash: str | None, scorer: Scorer, s: ScoreSummary, written: int) -> None:
    from data.audit import append_event
    append_event(store, "scores_recorded", plan_hash=plan_hash, subject=scorer.scorer_id,
                 payload={"scorer_id": scorer.scorer_id, "metric": scorer.metric, "version": scorer.version,
                          "model_hash": scorer.model_hash, "rows_ok": s.scored_ok, "rows_error": s.scored_error,
                          "rows_written": written, "batches": s.batches, "computed": s.computed, "reused_in_pass": s.reused_pass,
                          "reused_stored": s.reused_stored, "skipped_existing": s.existing,
                          "not_scorable": s.not_scorable})


def score_plan(store: Store, plan: Plan, *, scorers: Iterable[str] | None = None, artifacts_dir: Path | None = None,
               device: str | None = None, batch_size: int | None = None, batch_sizes: Mapping[str, int] | None = None,
               on_start: Callable[[Scorer, int], None] | None = None,
               on_progress: Callable[[Scorer, int, int], None] | None = None,
               wrap: Callable[[Scorer], Any] | None = None) -> list[ScoreSummary]:
    """Score every expected output of the plan's quality cells with the named scorers (default:
    the plan's quality.scorers). `batch_sizes` gives named scorers their own batch size (the
    others take `batch_size`, else their default). Unavailable scorers raise one CampaignError naming why. `wrap`
    replaces each scorer by a stand-in with the same interface (console/cluster/scoring.py
    shards its batches across GPU actors)."""
    from data.manifest import load_plan_workload

    names = list(scorers) if scorers else list(plan_scorers(plan).values())
    paths, dtypes = plan.quality.model_paths, plan.quality.dtypes
    artifacts_dir = artifacts_dir or default_artifacts_dir(store)
    per = dict(batch_sizes or {})
    if unknown := sorted(set(per) - set(names)):
        raise CampaignError(f"--batch-size {unknown[0]}={per[unknown[0]]}: {unknown[0]} is not scored in this pass "
                            f"(scorers: {', '.join(names)})")
    try:
        built = [make_scorer(n, paths, dtypes=dtypes, device=device, batch_size=per.get(n, batch_size)) for n in names]
    except UnknownScorer as exc:
        raise CampaignError(f"--scorer: {exc}") from None
    except ValueError as exc:
        raise CampaignError(f"quality.dtypes: {exc}") from None
    for s in built:
        ok, why = s.available()
        if not ok:
            raise CampaignError(f"scorer {s.name}: unavailable: {why}")
    if wrap is not None:
        built = [wrap(s) for s in built]
    expected = expected_outputs(store, plan)
    workload = load_plan_workload(plan)
    out = []
    for s in built:
        try:
            if on_start:
                on_start(s, len(expected))
            cb = (lambda d, t, _s=s: on_progress(_s, d, t)) if on_progress else None
            out.append(score_expected(store, expected, s, workload=workload, artifacts_dir=artifacts_dir,
                                      plan_hash=plan.hash, on_progress=cb))
        finally:
            s.close()
    return out


# -- coverage and the long table ---------------------------------------------------------------
def _scores_by_key(store: Store, scorer_ids: Sequence[str]) -> dict[tuple[str, int, str], dict]:
    if not scorer_ids:
        return {}
    marks = ", ".join("?" for _ in scorer_ids)
    rows = store.query(
        "SELECT run_id, request_index, scorer_id, status, error, value, wer_substitutions, wer_deletions, "
        f"wer_insertions, wer_ref_words FROM quality_scores WHERE scorer_id IN ({marks})", list(scorer_ids))
    return {(r["run_id"], r["request_index"], r["scorer_id"]): r for r in rows}


def _score_row(scores: Mapping[tuple[str, int, str], dict], e: Expected, scorer_id: str | None) -> dict | None:
    """The stored score row of one expected output for one scorer, if any."""
    if not scorer_id or e.run_id is None or e.request_index is None:
        return None
    return scores.get((e.run_id, e.request_index, scorer_id))


def metric_scorer_ids(plan: Any) -> dict[str, str | None]:
    """metric -> scorer_id the plan uses for it (None for an unknown scorer name)."""
    out: dict[str, str | None] = {}
    for metric, name in plan_scorers(plan).items():
        try:
            out[metric] = scorer_class(name).scorer_id
        except UnknownScorer:
            out[metric] = None
    return out


def _metric_cause(e: Expected, row: dict | None, status: str, base_cause: str | None) -> str | None:
    if base_cause:
        return base_cause
    if row is not None:
        return None if row["status"] == "ok" else f"scorer error: {row['error']}"
    if status != "ok":
        return f"scorer {status}"
    return "not scored yet"


def scores_frame(store: Store, plan: Any, artifacts_dir: Path | None = None):
    """Contract 7: one row per expected (run, utterance) of the plan's quality cells with WER error
    counts and words, SIM and MOS (the `mos` column holds the plan's 'mos' scorer, DNSMOS or
    UTMOS22: `frame.attrs['scorers']` / `['labels']` say which), and `gap` = None or the cause(s)
    of whatever is missing. Missing values are NaN; rows are never dropped."""
    import pandas as pd

    artifacts_dir = artifacts_dir or default_artifacts_dir(store)
    ids = metric_scorer_ids(plan)
    status = scorer_status(plan)
    scores = _scores_by_key(store, [i for i in ids.values() if i])
    records = []
    for e in expected_outputs(store, plan):
        base = not_scorable(e, artifacts_dir) or truncation_gap(e, plan)
        vals: dict[str, float] = {"wer_errors": math.nan, "wer_words": math.nan, "sim": math.nan, "mos": math.nan}
        causes: dict[str, str] = {}
        for metric in METRICS:
            sid = ids[metric]
            row = _score_row(scores, e, sid)
            cause = _metric_cause(e, row, status[metric], base)
            if cause:
                causes[metric] = cause
                continue
            assert row is not None  # _metric_cause names a cause for every output without a stored row
            if metric == "wer":
                vals["wer_errors"] = row["wer_substitutions"] + row["wer_deletions"] + row["wer_insertions"]
                vals["wer_words"] = row["wer_ref_words"]
            else:
                vals[metric] = row["value"] if row["value"] is not None else math.nan
        gap = None
        if causes:
            distinct = set(causes.values())
            gap = distinct.pop() if len(distinct) == 1 and len(causes) == len(METRICS) else \
                "; ".join(f"{m}: {c}" for m, c in causes.items())
        records.append({"arm": e.arm, "engine": e.engine, "concurrency": e.concurrency, "repeat": e.repeat,
                        "run_id": e.run_id, "utt_id": e.utt_id, **vals, "gap": gap})
    df = pd.DataFrame.from_records(records, columns=FRAME_COLUMNS)
    for col in ("wer_errors", "wer_words", "sim", "mos"):
        df[col] = df[col].astype("float64")
    df["gap"] = df["gap"].astype(object).where(df["gap"].notna(), None)
    names = plan_scorers(plan)
    df.attrs["scorers"] = {m: ids[m] or names[m] for m in METRICS}
    df.attrs["labels"] = {m: scorer_label(names[m]) for m in METRICS}
    df.attrs["scorer_status"] = status
    return df


def scorer_label(name: str) -> str:
    """A scorer's label ('DNSMOS OVRL (P.835)'), its name where the registry does not know it."""
    try:
        return scorer_class(name).label
    except UnknownScorer:
        return name


@dataclass(frozen=True)
class CoverageLine:
    arm: str
    engine: str
    concurrency: int
    metric: str
    expected: int
    scored: int
    gaps: dict[str, int]  # cause class -> count


def coverage(store: Store, plan: Any, artifacts_dir: Path | None = None) -> tuple[list[CoverageLine], list[dict]]:
    """Per (arm, concurrency, metric) counts, and every gap (run, request, utt, metric, cause)."""
    artifacts_dir = artifacts_dir or default_artifacts_dir(store)
    ids = metric_scorer_ids(plan)
    status = scorer_status(plan)
    scores = _scores_by_key(store, [i for i in ids.values() if i])
    lines: dict[tuple, CoverageLine] = {}
    gaps: list[dict] = []
    for e in expected_outputs(store, plan):
        base = not_scorable(e, artifacts_dir)
        for metric in METRICS:
            key = (e.arm, e.engine, e.concurrency, metric)
            line = lines.setdefault(key, CoverageLine(e.arm, e.engine, e.concurrency, metric, 0, 0, {}))
            row = _score_row(scores, e, ids[metric])
            cause = _metric_cause(e, row, status[metric], base)
            scored = cause is None
            gaps_ = dict(line.gaps)
            if cause:
                cls = cause.split(":")[0]
                gaps_[cls] = gaps_.get(cls, 0) + 1
                gaps.append({"arm": e.arm, "engine": e.engine, "concurrency": e.concurrency, "repeat": e.repeat,
                             "run_id": e.run_id, "request_index": e.request_index, "utt_id": e.utt_id,
                             "metric": metric, "cause": cause})
            lines[key] = CoverageLine(line.arm, line.engine, line.concurrency, metric, line.expected + 1,
                                      line.scored + scored, gaps_)
    return list(lines.values()), gaps
