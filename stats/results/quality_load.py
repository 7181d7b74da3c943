"""Quality under load (docs/results.md, "Quality under load"): WER, SIM and MOS of each engine at
each measured concurrency, from the stored quality scores, with a percentile bootstrap interval
over utterance ids. The one computation the HTML report (table and figure) and the TUI read.

A cell is one engine at one concurrency: the outputs of its aggregate runs (`data.queries.
aggregate_runs`: measured, complete, not excluded) in the plan's scored pool, scored ok by the
plan's scorer for the metric. As in the gate (docs/statistics.md), an utterance id's repeats are
aggregated first (WER errors and words summed, SIM and MOS averaged) and the ids, in ascending
order, are the bootstrap's clusters, resampled with the protocol's own index matrix
(`stats.bootstrap.replicates_many`, the plan's draws and seed): a level is a "degradation" from a
baseline of zeros, so the WER replicate is 100 × Σ E[idx] / Σ N[idx] and the SIM / MOS replicate
mean(x[idx]). The interval is the central percentile interval at the plan's confidence, whatever
method the gate uses: it describes a cell, it decides nothing.

Concurrencies: every one the plan measures (`sweep.concurrencies`, `quality.concurrencies`) and
every one that has scores, not only those the gate judges; a cell without scores says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from data.plan_model import Plan
from data.queries import aggregate_runs
from data.store import Store
from stats.bootstrap import CellArrays, point_estimates, replicates_many
from stats.quality.metrics import NAMES, QUALITY_BY_NAME, level_label
from stats.quality.registry import plan_scorers
from stats.quality.scoring import metric_scorer_ids, scorer_label

NO_RUN = "no quality run"  # no aggregate run of the engine at this concurrency in the scored pool
NOT_SCORED = "not scored"  # runs, but no ok score of the plan's scorer for the metric
DIGITS = {"wer": 2, "sim": 2, "mos": 3}  # shown decimals (WER %, SIM x100, MOS)


@dataclass(frozen=True)
class LevelText:
    """What every view prints for one metric of a cell: the estimate, and its interval and ids."""
    value: str
    interval: str


@dataclass(frozen=True)
class Level:
    """One metric of one cell: the estimate and its central percentile interval (None with < 2 ids)."""
    value: float
    low: float | None
    high: float | None
    ids: int  # utterance ids (the bootstrap's clusters)
    outputs: int  # scored outputs (ids × repeats)


@dataclass(frozen=True)
class LoadCell:
    engine: str
    concurrency: int
    runs: int  # aggregate runs in the scored pool
    levels: dict[str, Level | None]  # metric -> level; None: `note(metric)` says why

    def note(self, metric: str) -> str:
        """Why a metric has no level: no quality run here, or runs without ok scores."""
        if self.levels.get(metric) is not None:
            return ""
        return NO_RUN if not self.runs else NOT_SCORED

    def text(self, metric: str) -> LevelText:
        lv, d = self.levels.get(metric), DIGITS[metric]
        if lv is None:
            return LevelText(self.note(metric), "")
        if lv.low is None or lv.high is None:
            return LevelText(f"{lv.value:.{d}f}", f"{lv.ids} id: no interval")
        return LevelText(f"{lv.value:.{d}f}", f"[{lv.low:.{d}f}, {lv.high:.{d}f}] {lv.ids} ids")


@dataclass(frozen=True)
class QualityLoad:
    plan_hash: str
    engines: tuple[str, ...]
    concurrencies: tuple[int, ...]  # every measured concurrency, ascending
    cells: list[LoadCell]
    labels: dict[str, str]  # metric -> 'WER', 'SIM', 'MOS (DNSMOS OVRL (P.835))'
    units: dict[str, str]  # metric -> '%', 'x100', 'MOS'
    scorers: dict[str, str]  # metric -> scorer id of the plan
    confidence: float
    draws: int
    seed: int
    pool: str | None = None
    gated: tuple[int, ...] = field(default=())  # the concurrencies the gate judges (quality.concurrencies)

    def header(self, metric: str) -> str:
        """'WER (%)', 'SIM (x100)', 'MOS (DNSMOS OVRL (P.835))': the label with its unit unless it names it."""
        label, unit = self.labels[metric], self.units[metric]
        return label if label.split(" ")[0] == unit else f"{label} ({unit})"

    def method(self) -> str:
        """How each figure and its interval are computed, as the HTML report and its figure say it."""
        return (f"over the cell's utterance ids (WER: 100 × Σ errors / Σ words; SIM, MOS: mean of each id's mean "
                f"across repeats), with its central {100 * self.confidence:g} % percentile bootstrap interval over "
                f"ids (B={self.draws}, seed {self.seed}). Scorers: "
                + ", ".join(f"{m} {self.scorers[m]}" for m in NAMES) + ".")

    def caption(self) -> str:
        """What the table's rows are, as the TUI and the text report title it."""
        return (f"quality runs (pool {self.pool or 'any'}) at every measured C; {100 * self.confidence:g} % "
                f"percentile bootstrap over utterance ids, B={self.draws}; * gated")

    def cell(self, engine: str, concurrency: int) -> LoadCell | None:
        return next((c for c in self.cells if c.engine == engine and c.concurrency == concurrency), None)

    @property
    def has_levels(self) -> bool:
        return any(lv is not None for c in self.cells for lv in c.levels.values())


@dataclass
class _Acc:
    """Per-utterance sums of one (engine, concurrency, metric)."""
    sums: dict[str, list[float]] = field(default_factory=dict)  # utt -> [value or errors, words, n]

    def add(self, utt: str, value: float, words: float) -> None:
        s = self.sums.setdefault(utt, [0.0, 0.0, 0.0])
        s[0] += value
        s[1] += words
        s[2] += 1


def _scores(store: Store, run_ids: list[str], scorer_ids: dict[str, str | None]) -> list[dict[str, Any]]:
    pairs = [(m, s) for m, s in scorer_ids.items() if s]
    if not run_ids or not pairs:
        return []
    marks = ", ".join("?" for _ in run_ids)
    which = " OR ".join("(q.metric = ? AND q.scorer_id = ?)" for _ in pairs)
    return store.query(
        "SELECT q.run_id, q.utt_id, q.metric, q.value, "
        "q.wer_substitutions + q.wer_deletions + q.wer_insertions AS errors, q.wer_ref_words AS words "
        "FROM quality_scores q JOIN requests r USING (run_id, request_index) "
        f"WHERE q.run_id IN ({marks}) AND NOT r.is_warmup AND q.status = 'ok' AND ({which})",
        [*run_ids, *[x for p in pairs for x in p]])


def _cell_arrays(metric: str, acc: _Acc) -> CellArrays | None:
    """The cell's per-id aggregates as the bootstrap's arrays, the baseline arm all zeros."""
    ids = tuple(sorted(acc.sums))
    if not ids:
        return None
    v = np.array([acc.sums[u][0] for u in ids], float)
    zero = np.zeros(len(ids))
    if metric == "wer":
        words = np.array([acc.sums[u][1] for u in ids], float)
        if words.sum() <= 0:
            return None
        return CellArrays(ids, zero, v, words, zero, zero, zero, zero)
    mean = v / np.array([acc.sums[u][2] for u in ids], float)
    if metric == "sim":
        return CellArrays(ids, zero, zero, zero + 1, mean, zero, zero, zero)
    return CellArrays(ids, zero, zero, zero + 1, zero, zero, mean, zero)


def quality_under_load(store: Store, plan: Plan) -> QualityLoad:
    """Every (engine, measured concurrency) cell's WER, SIM and MOS with their intervals."""
    q, b = plan.quality, plan.bootstrap
    pool = q.scored_pool
    scorer_ids = metric_scorer_ids(plan)
    names = plan_scorers(plan)
    runs = aggregate_runs(store, plan.hash, pool=pool)
    engine_of = {r["run_id"]: (r["engine"], int(r["concurrency"])) for r in runs}
    accs: dict[tuple[str, int, str], _Acc] = {}
    for row in _scores(store, list(engine_of), scorer_ids):
        engine, conc = engine_of[row["run_id"]]
        metric = row["metric"]
        if metric == "wer":
            if row["errors"] is None or row["words"] is None:
                continue
            value, words = float(row["errors"]), float(row["words"])
        else:
            if row["value"] is None or not math.isfinite(row["value"]):
                continue
            value, words = float(row["value"]), 0.0
        accs.setdefault((engine, conc, metric), _Acc()).add(str(row["utt_id"]), value, words)

    arms = [e for e in [q.baseline, *plan.quality_candidates] if e]
    scored_engines = {e for e, _, _ in accs}
    engines = tuple(e.name for e in plan.engines if e.name in arms or e.name in scored_engines)
    concs = tuple(sorted({int(c) for c in plan.sweep.concurrencies} | {int(c) for c in q.scored_concurrencies}
                         | {c for _, c, _ in accs}))
    runs_in: dict[tuple[str, int], int] = {}
    for e, c in engine_of.values():
        runs_in[(e, c)] = runs_in.get((e, c), 0) + 1

    keys = [(e, c, m) for e in engines for c in concs for m in NAMES]
    arrays = {k: _cell_arrays(k[2], accs[k]) for k in keys if k in accs}
    todo = [(k, a) for k, a in arrays.items() if a is not None]
    reps = replicates_many([a for _, a in todo], [(k[2],) for k, _ in todo], draws=int(b.draws), seed=int(b.seed))
    tail = (1.0 - float(b.confidence)) / 2.0
    levels: dict[tuple[str, int, str], Level] = {}
    for (k, a), rep in zip(todo, reps):
        point = point_estimates(a)[k[2]]
        low, high = (float(x) for x in np.quantile(rep[k[2]], [tail, 1.0 - tail])) if a.k > 1 else (None, None)
        outputs = int(sum(accs[k].sums[u][2] for u in a.ids))
        levels[k] = Level(float(point), low, high, a.k, outputs)

    cells = [LoadCell(e, c, runs_in.get((e, c), 0), {m: levels.get((e, c, m)) for m in NAMES})
             for e in engines for c in concs]
    labels = {m: level_label(m, scorer_label(names[m])) for m in NAMES}
    return QualityLoad(plan.hash, engines, concs, cells, labels,
                       {m: QUALITY_BY_NAME[m].level_unit for m in NAMES},
                       {m: scorer_ids[m] or names[m] for m in NAMES}, float(b.confidence), int(b.draws), int(b.seed),
                       pool, tuple(int(c) for c in q.scored_concurrencies))
