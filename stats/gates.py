"""Noninferiority gates: the nine (concurrency × metric) checks and the verdict (docs/statistics.md).

Input is the quality long table (one row per arm, concurrency, repeat, utterance id) — either
`stats.quality.scores_frame` or a user's own CSV/Parquet. Within each id the measured repeats are
aggregated first (WER error and word counts summed, SIM and MOS averaged); ids are then the
bootstrap's clusters. A check is computed only over full coverage: every id must have exactly one
usable value at every expected measured repeat in both arms (the plan's `sweep.measured_repeats`
in plan mode; in `--scores` mode every repeat either arm has at that concurrency). Any id that
misses that — a missing, failed, incomplete or excluded run, a failed request, a repeat one arm
lacks — or an unavailable scorer makes the check INCONCLUSIVE, never PASS; the reason names the
ids and repeats, and the bound over the covered ids is shown as a diagnostic only.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, cast

import numpy as np
import pandas as pd

from data.bootstrap_params import BOOTSTRAP_DEFAULTS, METHODS
from data.errors import CampaignError
from data.plan_model import Plan
from stats.bootstrap import CellArrays, bounds_many, cell_bounds
from stats.quality.metrics import LEGACY, NAMES as QUALITY_NAMES, QUALITY_METRICS, canonical, check_labels

ARMS = ("baseline", "candidate")
METRICS = QUALITY_NAMES  # wer, sim, mos (stats/quality/metrics.py)
VALUE_COLUMNS = ("wer_errors", "wer_words", "sim", "mos")  # the input table's value columns, in hash order
COLUMNS = ("arm", "concurrency", "repeat", "utt_id", *VALUE_COLUMNS)
UNITS = {m.name: m.unit for m in QUALITY_METRICS}
LABELS = {m.name: m.label for m in QUALITY_METRICS}


def metric_labels(scorer_labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """Check labels that name what filled each slot: the MOS slot says whether DNSMOS or UTMOS22
    scored it, so DNSMOS scores are never reported as UTMOS."""
    return check_labels(scorer_labels)


def current_names(df: pd.DataFrame) -> pd.DataFrame:
    """A score table with this console's column names: an older table's (or a stored bundle's)
    `utmos` column is the `mos` column (stats/quality/metrics.py, LEGACY). Values untouched."""
    rename = {old: new for old, new in LEGACY.items() if old in df.columns and new not in df.columns}
    if not rename:
        return df
    out = df.rename(columns=rename)
    out.attrs = dict(df.attrs)
    return out
PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"


@dataclass(frozen=True)
class GateConfig:
    """Margins and bootstrap parameters: plan fields, or flags for `gate --scores`."""

    margins: Mapping[str, float]
    draws: int = BOOTSTRAP_DEFAULTS.draws
    seed: int = BOOTSTRAP_DEFAULTS.seed
    method: str = BOOTSTRAP_DEFAULTS.method
    confidence: float = BOOTSTRAP_DEFAULTS.confidence
    concurrencies: tuple[int, ...] | None = None
    repeats: tuple[int, ...] | None = None  # expected measured repeats (the plan's); None: as the table has them

    def __post_init__(self) -> None:
        if any(k in LEGACY for k in self.margins):  # an older caller's 'utmos' margin is the MOS margin
            object.__setattr__(self, "margins", {canonical(k): v for k, v in self.margins.items()})
        for m in METRICS:
            v = self.margins.get(m)
            if v is None or not math.isfinite(float(v)):
                raise CampaignError(f"margin for {m}: missing or not a number ({v!r})")
        if self.method not in METHODS:
            raise CampaignError(f"bootstrap method {self.method!r}: expected one of {', '.join(METHODS)}")
        if int(self.draws) < 1:
            raise CampaignError(f"bootstrap draws {self.draws!r}: must be a positive integer")
        if not 0.5 <= float(self.confidence) < 1:
            raise CampaignError(f"bootstrap confidence {self.confidence!r}: must be in [0.5, 1)")
        if self.repeats is not None and not self.repeats:
            raise CampaignError("measured repeats: the expected set is empty")

    @classmethod
    def from_plan(cls, plan: Plan) -> "GateConfig":
        """The plan's margins and bootstrap, the holdout cells' concurrencies (`quality.concurrencies`
        or its default) and the sweep's measured repeats."""
        q, b, m = plan.quality, plan.bootstrap, plan.quality.margins
        concs = q.scored_concurrencies
        margins: dict[str, Any] = {q.name: getattr(m, q.margin_key) for q in QUALITY_METRICS}  # None: refused
        return cls(
            margins=margins,
            draws=int(b.draws),
            seed=int(b.seed),
            method=str(b.method).lower(),
            confidence=float(b.confidence),
            concurrencies=tuple(int(c) for c in concs) if concs else None,
            repeats=tuple(range(int(plan.sweep.measured_repeats))),
        )

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["margins"] = {m: float(self.margins[m]) for m in METRICS}
        d["concurrencies"] = list(self.concurrencies) if self.concurrencies else None
        d["repeats"] = list(self.repeats) if self.repeats is not None else None
        return d


@dataclass(frozen=True)
class Check:
    concurrency: int
    metric: str
    status: str  # PASS, FAIL, INCONCLUSIVE
    margin: float
    n_ids: int  # ids the estimate covers
    n_expected: int  # ids expected at this concurrency (union over both arms)
    point: float | None
    bound: float | None
    base_value: float | None  # baseline corpus WER % / mean SIM / mean MOS
    cand_value: float | None
    reason: str = ""
    diagnostic_only: bool = False  # True when the figures cover fewer ids than expected
    label: str = ""  # what the check measures, naming the scorer where it matters (see metric_labels)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unit"] = UNITS[self.metric]
        d["label"] = self.label or LABELS[self.metric]
        for k in ("point", "bound", "base_value", "cand_value"):
            v = d[k]
            d[k] = None if v is None or not math.isfinite(v) else float(v)
        return d


@dataclass
class GateResult:
    verdict: str
    checks: list[Check]
    config: GateConfig
    inputs: dict[str, Any]
    attribution: list[dict[str, Any]] = field(default_factory=list)
    ids: dict[int, list[str]] = field(default_factory=dict)

    def checks_dicts(self) -> list[dict[str, Any]]:
        return [c.as_dict() for c in self.checks]

    @property
    def labels(self) -> dict[str, str]:
        return {**LABELS, **{c.metric: c.label for c in self.checks if c.label}}


# -- input validation -------------------------------------------------------------------------

def validate_long_frame(df: pd.DataFrame, source: str = "scores") -> pd.DataFrame:
    """Check a user's long table and return it normalised; bad input -> one-line CampaignError."""
    df = current_names(df).reset_index(drop=True)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise CampaignError(f"{source}: missing column(s) {', '.join(missing)} (need {', '.join(COLUMNS)})")
    out = df.loc[:, [c for c in df.columns if c in COLUMNS or c == "gap"]].copy()
    out["arm"] = out["arm"].astype(str).str.strip()
    bad = out.index[~out["arm"].isin(ARMS)]
    if len(bad):
        raise CampaignError(f"{source}: row {_row(df, bad[0])}: arm {_show(df['arm'].loc[bad[0]])} is not 'baseline' or 'candidate'")
    for col in ("concurrency", "repeat"):
        out[col] = _int_column(df, col, source, allow_nan=False, minimum=0 if col == "repeat" else 1)
    ids = df["utt_id"]
    bad_ids = ids.isna() | (ids.astype(str).str.strip() == "")
    if bad_ids.any():
        raise CampaignError(f"{source}: row {_row(df, ids.index[bad_ids][0])}: utt_id is empty")
    out["utt_id"] = ids.astype(str).str.strip()
    out["wer_errors"] = _int_column(df, "wer_errors", source, allow_nan=True, minimum=0)
    out["wer_words"] = _int_column(df, "wer_words", source, allow_nan=True, minimum=1)
    for col in ("sim", "mos"):
        vals = pd.to_numeric(df[col], errors="coerce")
        bad = (vals.isna() & df[col].notna() & (df[col].astype(str).str.strip() != "")) | np.isinf(vals)
        if bad.any():
            i = df.index[bad][0]
            raise CampaignError(f"{source}: row {_row(df, i)}: {col} {_show(df[col].loc[i])} is not a finite number")
        out[col] = vals.astype(float)
    key = ["arm", "concurrency", "repeat", "utt_id"]
    dup = out.duplicated(key, keep=False)
    if dup.any():
        first = out.index[dup][0]
        r = out.loc[first]
        same = out.index[dup & (out[key] == r[key]).all(axis=1)]
        raise CampaignError(
            f"{source}: rows {_row(df, same[0])} and {_row(df, same[1])} are duplicates (arm={r['arm']} "
            f"concurrency={r['concurrency']} repeat={r['repeat']} utt_id={r['utt_id']}): one row per arm, "
            "concurrency, repeat and utt_id"
        )
    _refuse_raw_cosine(out["sim"], source)
    if out.empty:
        raise CampaignError(f"{source}: no rows")
    return out.reset_index(drop=True)


def _refuse_raw_cosine(sim: pd.Series, source: str) -> None:
    """SIM and its margin are on the x100 scale (docs/statistics.md, "Input"): a column whose every
    value lies within [-1, 1] is a raw cosine similarity, and judging it against a x100 margin would
    pass a drop 100 times the margin."""
    vals = sim.dropna()
    if len(vals) and bool(((vals >= -1) & (vals <= 1)).all()):
        raise CampaignError(f"{source}: sim: all {len(vals)} values lie within [-1, 1] (largest {vals.max():g}), "
                            "the raw cosine scale; SIM and --sim-margin are on the x100 scale: multiply sim by 100")


def _row(df: pd.DataFrame, label) -> int:
    """1-based data row number (the header line not counted)."""
    return int(label) + 1


def _show(v: Any) -> str:
    if isinstance(v, np.generic):
        v = v.item()
    return repr(v)


def _int_column(df: pd.DataFrame, col: str, source: str, *, allow_nan: bool, minimum: int) -> pd.Series:
    raw = df[col]
    vals = pd.to_numeric(raw, errors="coerce").astype(float)
    blank = raw.isna() | (raw.astype(str).str.strip() == "")
    unparsable = vals.isna() & ~blank
    bad = unparsable | (~vals.isna() & ((vals != np.floor(vals)) | (vals < minimum) | np.isinf(vals)))
    if not allow_nan:
        bad |= vals.isna()
    if bad.any():
        i = raw.index[bad][0]
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
        raise CampaignError(f"{source}: row {_row(df, i)}: {col} {_show(raw.loc[i])} is not {kind}")
    return vals if allow_nan else vals.astype(np.int64)


def canonical_table(df: pd.DataFrame) -> pd.DataFrame:
    """The eight input columns with fixed types, rows sorted by (arm, concurrency, repeat, utt_id)."""
    df = current_names(df)
    t = pd.DataFrame({
        "arm": df["arm"].astype(str), "concurrency": df["concurrency"].astype(np.int64),
        "repeat": df["repeat"].astype(np.int64),
        "utt_id": df["utt_id"].map(lambda u: "" if u is None or (isinstance(u, float) and math.isnan(u)) else str(u)),
        **{c: df[c].astype(np.float64) for c in VALUE_COLUMNS},
    })
    return t.sort_values(["arm", "concurrency", "repeat", "utt_id"], kind="mergesort").reset_index(drop=True)


HASH_RECIPE = (
    "sha256 over: b'omni-campaign-scores/1\\n'; then for arm and utt_id the values joined by "
    "'\\x1f' plus '\\n' (UTF-8); then concurrency and repeat as little-endian int64 bytes; then "
    "wer_errors, wer_words, sim, mos (an older table's utmos) as little-endian float64 bytes (NaN as numpy.nan) — rows "
    "sorted by (arm, concurrency, repeat, utt_id); a missing utt_id (a missing run whose ids are unknown) "
    "hashes as ''"
)


def frame_sha256(df: pd.DataFrame) -> str:
    """SHA-256 of the canonical input table (see HASH_RECIPE; binary so hashing stays cheap)."""
    t = canonical_table(df)
    h = hashlib.sha256(b"omni-campaign-scores/1\n")
    for c in ("arm", "utt_id"):
        h.update(("\x1f".join(t[c].tolist()) + "\n").encode())
    for c in ("concurrency", "repeat"):
        h.update(t[c].to_numpy(dtype="<i8").tobytes())
    for c in VALUE_COLUMNS:
        v = t[c].to_numpy(dtype="<f8")
        h.update(np.where(np.isnan(v), np.nan, v).astype("<f8").tobytes())
    return h.hexdigest()


# -- aggregation ------------------------------------------------------------------------------

# Which columns each arm needs for a metric (the candidate's word count is not used: WER is
# normalised by the baseline's reference words).
METRIC_COLUMNS: dict[str, dict[str, tuple[str, ...]]] = {
    "wer": {"baseline": ("wer_errors", "wer_words"), "candidate": ("wer_errors",)},
    "sim": {"baseline": ("sim",), "candidate": ("sim",)},
    "mos": {"baseline": ("mos",), "candidate": ("mos",)},
}


@dataclass(frozen=True)
class CellCoverage:
    """Per-id aggregates of one concurrency plus which ids each metric covers.

    Coverage rule (docs/statistics.md): an id is covered for a metric iff, in both arms, it has
    exactly one usable value at every expected repeat and none at any other repeat. The expected
    repeats are the plan's measured repeats (plan mode) or every repeat that appears at this
    concurrency in either arm (`--scores`). Checking each arm against its own repeat count would
    let a candidate with one repeat be divided by the baseline's three-repeat word total."""

    concurrency: int
    ids: tuple[str, ...]
    arrays: dict[str, np.ndarray]  # e_base, e_cand, n_base, sim_base, ... aligned with ids
    covered: dict[str, np.ndarray]  # metric -> bool mask over ids
    gaps: dict[str, str]  # utt_id -> a cause, where one is known
    repeats: tuple[int, ...] = ()  # the measured repeats every id must have in both arms
    seen_repeats: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # columns of `counts`
    counts: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # (arm, column) -> ids x seen_repeats

    def cell(self, metric: str | None = None) -> CellArrays:
        mask = np.ones(len(self.ids), bool) if metric is None else self.covered[metric]
        ids = tuple(i for i, keep in zip(self.ids, mask) if keep)
        a = {k: np.ascontiguousarray(v[mask], dtype=np.float64) for k, v in self.arrays.items()}
        return CellArrays(ids, **a)

    def repeat_problem(self, metric: str, index: int) -> str:
        """How id `index`'s measured repeats differ from the expected set, per arm ('' if they do not)."""
        want = set(self.repeats)
        parts = []
        for arm, cols in METRIC_COLUMNS[metric].items():
            if not self.counts:
                break
            n = np.min(np.stack([self.counts[(arm, c)][index] for c in cols]), axis=0)
            hi = np.max(np.stack([self.counts[(arm, c)][index] for c in cols]), axis=0)
            reps = [int(r) for r in self.seen_repeats]
            lacks = [r for r, k in zip(reps, n) if r in want and k == 0]
            twice = [r for r, k in zip(reps, hi) if r in want and k > 1]
            extra = [r for r, k in zip(reps, hi) if r not in want and k > 0]
            if lacks:
                parts.append(f"{arm} lacks repeat{'s' if len(lacks) > 1 else ''} {_list(lacks)}")
            if twice:
                parts.append(f"{arm} has repeat{'s' if len(twice) > 1 else ''} {_list(twice)} more than once")
            if extra:
                parts.append(f"{arm} has repeat{'s' if len(extra) > 1 else ''} {_list(extra)} outside the measured "
                             f"repeats")
        return "; ".join(parts)

    def gap_list(self, metric: str) -> list[dict[str, Any]]:
        """Every uncovered id of a metric: which repeats differ and the recorded cause, if any."""
        return [{"utt_id": uid, "repeats": self.repeat_problem(metric, i), "cause": self.gaps.get(uid)}
                for i, (uid, ok) in enumerate(zip(self.ids, self.covered[metric])) if not ok]


def _list(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def aggregate_cell(df_c: pd.DataFrame, concurrency: int, repeats: tuple[int, ...] | None = None) -> CellCoverage:
    """Aggregate one concurrency's rows within each utterance id (numpy bincounts: this runs on
    every gate, so it is kept as cheap as the bootstrap itself). `repeats`: the expected measured
    repeats (the plan's); None takes every repeat present at this concurrency in either arm."""
    df_c = current_names(df_c)
    df_c = df_c[df_c["utt_id"].notna()]  # a missing run of an unknowable pool: `repeats` finds the gap
    utt = df_c["utt_id"].astype(str).to_numpy(dtype=object)
    uniq, codes = np.unique(utt, return_inverse=True)  # ascending string order: column k = k-th id
    ids = tuple(str(u) for u in uniq)
    k = len(ids)
    arm = df_c["arm"].to_numpy(dtype=object)
    rep = df_c["repeat"].to_numpy(dtype=np.int64)
    expected = tuple(sorted({int(r) for r in (rep.tolist() if repeats is None else repeats)}))
    seen = np.unique(np.concatenate([np.asarray(expected, dtype=np.int64), rep]))
    width = len(seen)
    slot = codes * width + np.searchsorted(seen, rep)  # (id, repeat) cell of each row
    want = np.isin(seen, expected)
    arrays: dict[str, np.ndarray] = {}
    complete: dict[tuple[str, str], np.ndarray] = {}
    counts: dict[tuple[str, str], np.ndarray] = {}
    for arm_name, short in (("baseline", "base"), ("candidate", "cand")):
        sel = arm == arm_name
        cs = codes[sel]
        for col, key in (("wer_errors", "e"), ("wer_words", "n"), ("sim", "sim"), ("mos", "mos")):
            v = df_c[col].to_numpy(dtype=np.float64)[sel]
            ok = ~np.isnan(v)
            per_rep = np.bincount(slot[sel][ok], minlength=k * width).reshape(k, width)
            counts[(arm_name, col)] = per_rep
            complete[(arm_name, col)] = np.all(per_rep[:, want] == 1, axis=1) & np.all(per_rep[:, ~want] == 0, axis=1)
            nonnull = np.bincount(cs[ok], minlength=k)
            total = np.bincount(cs[ok], weights=v[ok], minlength=k)
            if key in ("e", "n"):
                arrays[f"{key}_{short}"] = np.where(nonnull > 0, total, np.nan)
            else:
                arrays[f"{key}_{short}"] = np.divide(total, nonnull, out=np.full(k, np.nan), where=nonnull > 0)
    arrays.pop("n_cand")
    covered = {m: np.logical_and.reduce([complete[(a, c)] for a, cols in METRIC_COLUMNS[m].items() for c in cols])
               for m in METRICS}
    gaps: dict[str, str] = {}
    if "gap" in df_c.columns:
        for uid, gap in df_c.loc[df_c["gap"].notna(), ["utt_id", "gap"]].itertuples(index=False):
            gaps.setdefault(str(uid), str(gap))
    return CellCoverage(concurrency, ids, arrays, covered, gaps, expected, seen, counts)


def _arm_values(cell: CellArrays, metric: str) -> tuple[float, float]:
    if metric == "wer":
        n = float(np.sum(cell.n_base))
        return 100.0 * float(np.sum(cell.e_base)) / n, 100.0 * float(np.sum(cell.e_cand)) / n
    b, c = (cell.sim_base, cell.sim_cand) if metric == "sim" else (cell.mos_base, cell.mos_cand)
    return float(np.mean(b)), float(np.mean(c))


def _missing_reason(cov: CellCoverage, metric: str, shown_max: int = 3) -> str:
    """Names the uncovered ids with how their repeats differ (and the stored cause, if any)."""
    gaps = cov.gap_list(metric)
    def one(g: dict[str, Any]) -> str:
        why = "; ".join(x for x in (g["repeats"], g["cause"]) if x)
        return f"{g['utt_id']} ({why})" if why else g["utt_id"]
    shown = ", ".join(one(g) for g in gaps[:shown_max])
    more = f" and {len(gaps) - shown_max} more" if len(gaps) > shown_max else ""
    return (f"coverage gap: {len(gaps)} of {len(cov.ids)} ids lack exactly one usable value per measured "
            f"repeat ({_list(list(cov.repeats))}) in both arms: {shown}{more}")


# -- nothing to judge -------------------------------------------------------------------------

def missing_evidence(frame: pd.DataFrame, arms: Mapping[str, str], shown_max: int = 3) -> str | None:
    """Why there is nothing to judge, or None. Nothing to judge (docs/statistics.md, "Nothing to
    judge"): an arm with no usable value of any metric at any concurrency (not run, or not scored
    yet). A verdict issued then would be a permanent INCONCLUSIVE about evidence never gathered.
    `arms`: arm -> engine name. Repeated gap causes are summarised, never listed once per id."""
    values = current_names(frame)[["wer_errors", "sim", "mos"]].notna().any(axis=1) if len(frame) else pd.Series(dtype=bool)
    empty = [a for a in ARMS if not bool(values[frame["arm"] == a].any())] if len(frame) else list(ARMS)
    if not empty:
        return None
    counts = ", ".join(f"{a} {arms.get(a, a)}: {int(values[frame['arm'] == a].sum()) if len(frame) else 0} of "
                       f"{int((frame['arm'] == a).sum()) if len(frame) else 0} expected outputs scored" for a in ARMS)
    lacking = frame[~values] if len(frame) else frame
    causes = (lacking["gap"] if "gap" in lacking.columns else pd.Series([None] * len(lacking), dtype=object))
    tally = causes.fillna("no score stored").astype(str).value_counts(sort=True)
    shown = "; ".join(f"{n}× {cause}" for cause, n in tally.iloc[:shown_max].items())
    more = f"; and {len(tally) - shown_max} more cause(s)" if len(tally) > shown_max else ""
    ids = sorted({str(u) for u in lacking["utt_id"].dropna()}) if len(lacking) else []
    named = ", ".join(ids[:shown_max]) + (f" and {len(ids) - shown_max} more" if len(ids) > shown_max else "")
    why = f"{len(ids)} id(s) lack every value ({named}); {len(lacking)} output(s) by cause: {shown}{more}" \
        if len(lacking) else "no expected outputs"
    return f"no {' or '.join(empty)} outputs scored ({counts}); {why}"


# -- the gates --------------------------------------------------------------------------------

def combine(statuses: list[str]) -> str:
    """PASS iff every check passes; FAIL if any fails; otherwise INCONCLUSIVE."""
    if not statuses:
        return INCONCLUSIVE
    if FAIL in statuses:
        return FAIL
    if INCONCLUSIVE in statuses:
        return INCONCLUSIVE
    return PASS


def decide(bound: float | None, margin: float) -> str:
    """A check passes iff its upper bound is strictly below the margin (equal fails)."""
    if bound is None or not math.isfinite(bound):
        return INCONCLUSIVE
    return PASS if bound < margin else FAIL


def scorer_problems(status: Mapping[str, str] | None) -> dict[str, str]:
    """metric -> why unavailable, from `scorer_status(plan)` (keys wer/sim/mos, or an older utmos)."""
    out: dict[str, str] = {}
    for metric, keys in (("wer", ("wer",)), ("sim", ("sim",)), ("mos", ("mos", "utmos"))):
        for k in keys:
            v = (status or {}).get(k)
            if v is not None and str(v) != "ok":
                out[metric] = str(v)
    return out


def evaluate_gates(frame: pd.DataFrame, config: GateConfig, *, scorer_status: Mapping[str, str] | None = None,
                   attribution: bool = True, source: str = "scores") -> GateResult:
    """Run every check of every quality concurrency and combine them into one verdict."""
    from stats.attribution import wer_attribution  # attribution builds on this module

    df = current_names(frame)
    concs = config.concurrencies or tuple(sorted(int(c) for c in df["concurrency"].unique()))
    unavailable = scorer_problems(scorer_status)
    checks: list[Check] = []
    attributions: list[dict[str, Any]] = []
    ids_by_c: dict[int, list[str]] = {}
    # pandas-stubs types a group key as any scalar; the "concurrency" column holds integers
    by_c = {int(cast(int, c)): g for c, g in df.groupby("concurrency", sort=False)}
    covs = [aggregate_cell(by_c.get(int(c), df.iloc[:0]), c, config.repeats) for c in concs]
    lacking = {c: [a for a in ARMS if c not in by_c or not (by_c[c]["arm"] == a).any()] for c in concs}
    full = [tuple(m for m in METRICS if m not in unavailable and cov.covered[m].all() and len(cov.ids) >= 2)
            for cov in covs]
    batch = [i for i, f in enumerate(full) if f]
    computed = dict(zip(batch, bounds_many([covs[i].cell() for i in batch], [full[i] for i in batch],
                                           draws=config.draws, seed=config.seed,
                                           confidence=config.confidence, method=config.method)))
    for i, (c, cov) in enumerate(zip(concs, covs)):
        ids_by_c[c] = list(cov.ids)
        results = computed.get(i, {})
        for m in METRICS:
            margin = float(config.margins[m])
            if m in unavailable:
                why = unavailable[m]
                why = why if why.startswith("unavailable") else f"unavailable: {why}"
                checks.append(Check(c, m, INCONCLUSIVE, margin, 0, len(cov.ids), None, None, None, None,
                                    f"scorer {why}"))
                continue
            if lacking[c]:
                checks.append(Check(c, m, INCONCLUSIVE, margin, 0, len(cov.ids), None, None, None, None,
                                    f"required concurrency C{c}: no {' or '.join(lacking[c])} rows"))
                continue
            if m in results:
                r = results[m]
                base, cand = _arm_values(cov.cell(), m)
                status = decide(r.bound, margin)
                reason = "" if status != INCONCLUSIVE else "bound could not be computed (degenerate resamples)"
                checks.append(Check(c, m, status, margin, len(cov.ids), len(cov.ids), r.point, r.bound,
                                    base, cand, reason))
                continue
            # Incomplete coverage (or fewer than two ids): diagnostic figures over what is there.
            part = cov.cell(m)
            reason = _missing_reason(cov, m) if not cov.covered[m].all() else "fewer than 2 ids"
            figures: tuple[float | None, float | None, float | None, float | None] = (None, None, None, None)
            if part.k >= 2:  # point, bound, baseline value, candidate value
                r = cell_bounds(part, draws=config.draws, seed=config.seed, confidence=config.confidence,
                                method=config.method, metrics=(m,))[m]
                figures = (r.point, r.bound, *_arm_values(part, m))
            checks.append(Check(c, m, INCONCLUSIVE, margin, part.k, len(cov.ids), *figures,
                                reason, diagnostic_only=True))
        if attribution and "wer" not in unavailable:
            part = cov.cell("wer")
            if part.k >= 2:
                attributions.append(wer_attribution(part, c, config))
    inputs = {
        "required_concurrencies": [int(c) for c in concs],
        "not_judged_concurrencies": sorted(c for c in by_c if c not in concs),
        "rows": int(len(df)),
        "rows_by_arm": {a: int((df["arm"] == a).sum()) for a in ARMS},
        "sha256": frame_sha256(df),
        "table": "long table: arm, concurrency, repeat, utt_id, wer_errors, wer_words, sim, mos",
        "source": source,
    }
    verdict = combine([ch.status for ch in checks])
    labels = metric_labels(frame.attrs.get("labels"))
    checks = [replace(ch, label=labels[ch.metric]) for ch in checks]
    return GateResult(verdict, checks, config, inputs, attributions, ids_by_c)
