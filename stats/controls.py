"""Synthetic controls: the gate proves itself on generated data with known answers before it may
issue a real verdict (docs/statistics.md).

Each control builds a long table (same shape as `stats.quality.scores_frame`) from a fixed data
seed at the campaign's own quality concurrencies and measured repeats, runs `evaluate_gates` with
the campaign's margins, draws, seed and method, and compares the outcome with the answer the
construction guarantees. A plan with quality concurrencies [1, 4] gets control data at 1 and 4;
data generated at fixed concurrencies would leave the plan's cells empty and fail every control.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from data.errors import CampaignError
from stats.gates import FAIL, INCONCLUSIVE, PASS, GateConfig, GateResult, evaluate_gates

DATA_SEED = 7_2026
N_IDS = 64
REPEATS = 3
CONCURRENCIES = (1, 16, 32)


@dataclass(frozen=True)
class ControlResult:
    name: str
    description: str
    expected: str
    observed: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def baseline_table(n_ids: int = N_IDS, repeats: int | Sequence[int] = REPEATS, concurrencies=CONCURRENCIES,
                   data_seed: int = DATA_SEED) -> pd.DataFrame:
    """A plausible baseline arm: ~3 % WER, SIM ≈ 65 ± 3, MOS ≈ 3.5 ± 0.3, per-repeat jitter.
    `repeats`: a count (repeats 0..n-1) or the repeat indices themselves."""
    repeats = range(repeats) if isinstance(repeats, int) else tuple(repeats)
    rng = np.random.default_rng(data_seed)
    ids = [f"spk{i % 7:02d}-utt{i:04d}" for i in range(n_ids)]
    words = rng.integers(8, 30, n_ids)
    sim_id = rng.normal(65.0, 3.0, n_ids)
    mos_id = rng.normal(3.5, 0.3, n_ids)
    rows = []
    for c in concurrencies:
        for r in repeats:
            errs = rng.binomial(words, 0.03)
            sim = sim_id + rng.normal(0, 0.3, n_ids)
            mos = mos_id + rng.normal(0, 0.02, n_ids)
            for i, uid in enumerate(ids):
                rows.append(("baseline", c, r, uid, int(errs[i]), int(words[i]), float(sim[i]), float(mos[i])))
    return pd.DataFrame(rows, columns=["arm", "concurrency", "repeat", "utt_id", "wer_errors", "wer_words", "sim", "mos"])


def with_candidate(base: pd.DataFrame, *, extra_errors: Callable[[np.ndarray], np.ndarray] | None = None,
                   sim_shift: float = 0.0, mos_shift: float = 0.0, sim_noise: float = 0.0,
                   mos_noise: float = 0.0, data_seed: int = DATA_SEED + 1) -> pd.DataFrame:
    """Candidate arm = baseline rows plus the injected change (shifts are drops when positive)."""
    rng = np.random.default_rng(data_seed)
    cand = base.copy()
    cand["arm"] = "candidate"
    if extra_errors is not None:
        cand["wer_errors"] = cand["wer_errors"] + extra_errors(cand["utt_id"].to_numpy())
    cand["sim"] = cand["sim"] - sim_shift + rng.normal(0, sim_noise, len(cand)) if sim_noise else cand["sim"] - sim_shift
    cand["mos"] = (cand["mos"] - mos_shift + rng.normal(0, mos_noise, len(cand))
                   if mos_noise else cand["mos"] - mos_shift)
    return pd.concat([base, cand], ignore_index=True)


def _wer_scale(margin_pp: float) -> int:
    """Injected WER changes are sized for a 0.2 pp margin and grow with wider margins, so 'beyond
    the margin' stays true for any plan (~8x the margin)."""
    return max(1, math.ceil(float(margin_pp) / 0.2))


def _every_third(ids: np.ndarray, scale: int = 1) -> np.ndarray:
    """+scale errors on every third id (in every repeat): ~+1.7·scale pp WER."""
    num = np.array([int(u.rsplit("utt", 1)[1]) for u in ids])
    return (num % 3 == 0).astype(int) * scale


OUTLIER_ID = "spk03-utt0017"


def _outlier(ids: np.ndarray, scale: int = 1) -> np.ndarray:
    """One utterance gains 12·scale errors per repeat; every other id is unchanged."""
    return (ids == OUTLIER_ID).astype(int) * 12 * scale


def _bounds(result: GateResult) -> list[float | None]:
    return [c.bound for c in result.checks]


def control_shape(config: GateConfig) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(concurrencies, measured repeats) the control data is generated at: the campaign's own,
    else the reference campaign's (1/16/32, 3 repeats)."""
    concs = tuple(int(c) for c in config.concurrencies) if config.concurrencies else CONCURRENCIES
    reps = tuple(int(r) for r in config.repeats) if config.repeats else tuple(range(REPEATS))
    return concs, reps


def run_controls(config: GateConfig) -> list[ControlResult]:
    """Run every control with the campaign's concurrencies, repeats, margins, B, seed and method."""
    concs, reps = control_shape(config)
    base = baseline_table(repeats=reps, concurrencies=concs)
    m = config.margins
    k = _wer_scale(m["wer"])
    first_c, last_c = concs[0], concs[-1]
    out: list[ControlResult] = []

    def control(name: str, description: str, expected: str, frame: pd.DataFrame, *,
                status=None, extra: Callable[[GateResult], tuple[bool, str]] | None = None,
                cfg: GateConfig | None = None) -> GateResult:
        res = evaluate_gates(frame, cfg or config, scorer_status=status, source=f"control:{name}")
        ok = res.verdict == expected
        slack = [(c.bound - c.margin, c) for c in res.checks if c.bound is not None]
        worst = max(slack, key=lambda t: t[0], default=None)
        detail = f"verdict {res.verdict}"
        if worst is not None:
            w = worst[1]
            detail += f"; tightest check C{w.concurrency} {w.metric} bound {w.bound:.4g} vs margin {w.margin:g}"
        if extra is not None:
            extra_ok, extra_detail = extra(res)
            ok = ok and extra_ok
            detail += f"; {extra_detail}"
        out.append(ControlResult(name, description, expected, res.verdict, ok, detail))
        return res

    identical = with_candidate(base)
    control("identical-arms", "candidate outputs identical to baseline", PASS, identical)
    control("wer-beyond-margin", f"+{k} error(s) on every third utterance (~+{1.7 * k:g} pp WER)", FAIL,
            with_candidate(base, extra_errors=lambda ids: _every_third(ids, k)),
            extra=lambda r: _failed_metrics(r, {"wer"}))
    control("sim-beyond-margin", f"SIM lowered by {2 * m['sim']:g} on every output", FAIL,
            with_candidate(base, sim_shift=2 * float(m["sim"]), sim_noise=0.2),
            extra=lambda r: _failed_metrics(r, {"sim"}))
    control("mos-beyond-margin", f"MOS lowered by {2 * m['mos']:g} on every output", FAIL,
            with_candidate(base, mos_shift=2 * float(m["mos"]), mos_noise=0.01),
            extra=lambda r: _failed_metrics(r, {"mos"}))
    control("inside-margins", "small SIM/MOS drops (a tenth of each margin), WER unchanged, 64 ids", PASS,
            with_candidate(base, sim_shift=0.1 * float(m["sim"]), mos_shift=0.1 * float(m["mos"]),
                           sim_noise=0.2, mos_noise=0.005))
    missing = identical[~((identical["arm"] == "candidate") & (identical["concurrency"] == last_c)
                          & (identical["utt_id"] == "spk01-utt0008"))]
    control("missing-id", f"one utterance missing from the candidate at C{last_c}", INCONCLUSIVE, missing,
            extra=lambda r: (any("spk01-utt0008" in c.reason for c in r.checks), "gap names spk01-utt0008"))
    _repeat_controls(control, config, concs, reps)
    no_mos = identical.assign(mos=np.nan)
    control("scorer-unavailable", "MOS scorer unavailable (no local model)", INCONCLUSIVE, no_mos,
            status={"wer": "ok", "sim": "ok", "mos": "unavailable: model directory not found"})
    control("single-outlier", f"one utterance ({OUTLIER_ID}) carries the whole WER change", FAIL,
            with_candidate(base, extra_errors=lambda ids: _outlier(ids, k)), extra=_names_outlier)

    # Boundary: a margin exactly equal to the computed bound must fail (pass iff bound < margin).
    inside = with_candidate(base, sim_shift=0.1 * float(m["sim"]), sim_noise=0.2)
    probe = evaluate_gates(inside, config, attribution=False)
    edge_bound = next(c.bound for c in probe.checks if c.metric == "sim" and c.concurrency == first_c)
    if edge_bound is None:
        raise CampaignError(f"control bound-equals-margin: the SIM check at C{first_c} computed no bound")
    edge = replace(config, margins={**dict(m), "sim": edge_bound})
    control("bound-equals-margin", f"SIM margin at C{first_c} set equal to its computed bound "
            f"({edge_bound:.6g}); equal fails", FAIL, inside, cfg=edge,
            extra=lambda r: _failed_metrics(r, {"sim"}, only_c=first_c))

    # Same seed -> identical bounds; another seed -> different bounds (the seed is really used).
    data = with_candidate(base, extra_errors=lambda ids: _every_third(ids, k), sim_shift=0.1, sim_noise=0.3, mos_noise=0.01)
    a = _bounds(evaluate_gates(data, config, attribution=False))
    b = _bounds(evaluate_gates(data, config, attribution=False))
    c = _bounds(evaluate_gates(data, replace(config, seed=config.seed + 1), attribution=False))
    same, differs = a == b, a != c
    out.append(ControlResult("same-seed", "the same data and seed twice give identical bounds; seed+1 differs",
                             "identical", "identical" if same else "different", same and differs,
                             f"{len(a)} bounds compared; seed+1 changes them: {differs}"))
    return out


GAP_ID = "spk02-utt0030"


def _repeat_controls(control: Callable[..., GateResult], config: GateConfig, concs: tuple[int, ...],
                     reps: tuple[int, ...]) -> None:
    """Unequal repeat sets must come out INCONCLUSIVE (docs/statistics.md, coverage). They need
    two or more repeats; a one-repeat campaign runs them on repeats r, r+1, r+2 with the same
    margins, B, seed and method."""
    if len(reps) < 2:
        reps = tuple(reps[0] + i for i in range(REPEATS))
        config = replace(config, repeats=reps if config.repeats is not None else None)
    base = baseline_table(repeats=reps, concurrencies=concs)
    first, later = reps[0], reps[1:]
    shown = ", ".join(str(r) for r in later)
    worse = with_candidate(base)
    cand = worse["arm"] == "candidate"
    worse.loc[cand, "wer_errors"] = 2 * worse.loc[cand, "wer_errors"]
    only_first = worse[~cand | (worse["repeat"] == first)]
    control("candidate-missing-repeats",
            f"candidate has only repeat {first} of {len(reps)} for every utterance, with twice the baseline's "
            f"errors in it", INCONCLUSIVE, only_first, cfg=config,
            extra=lambda r: _all_gaps_name(r, f"candidate lacks repeat{'s' if len(later) > 1 else ''} {shown}"))
    identical = with_candidate(base)
    base_first = identical[(identical["arm"] == "candidate") | (identical["repeat"] == first)]
    control("baseline-missing-repeats", f"baseline has only repeat {first} of {len(reps)} for every utterance",
            INCONCLUSIVE, base_first, cfg=config,
            extra=lambda r: _all_gaps_name(r, f"baseline lacks repeat{'s' if len(later) > 1 else ''} {shown}"))
    last_c, last_r = concs[-1], reps[-1]
    one = identical[~((identical["arm"] == "candidate") & (identical["concurrency"] == last_c)
                      & (identical["utt_id"] == GAP_ID) & (identical["repeat"] == last_r))]
    needle = f"{GAP_ID} (candidate lacks repeat {last_r})"
    control("one-id-missing-one-repeat", f"{GAP_ID} lacks candidate repeat {last_r} at C{last_c}", INCONCLUSIVE,
            one, cfg=config,
            extra=lambda r: (all(needle in c.reason for c in r.checks if c.concurrency == last_c)
                             and all(c.status != INCONCLUSIVE for c in r.checks if c.concurrency != last_c),
                             f"C{last_c} gaps name {needle}"))


def _all_gaps_name(res: GateResult, needle: str) -> tuple[bool, str]:
    """Every check is a coverage gap whose reason says which repeats an arm lacks."""
    ok = all(c.status == INCONCLUSIVE and "coverage gap" in c.reason and needle in c.reason for c in res.checks)
    return ok, f"every check names '{needle}': {ok}"


def _failed_metrics(res: GateResult, metrics: set[str], only_c: int | None = None) -> tuple[bool, str]:
    failed = {(c.concurrency, c.metric) for c in res.checks if c.status == FAIL}
    got = {m for _, m in failed}
    if only_c is not None:
        ok = any(m in metrics and cc == only_c for cc, m in failed)
        return ok, f"failed checks: {sorted(failed)}"
    return got == metrics, f"failed metrics: {sorted(got)}"


def _names_outlier(res: GateResult) -> tuple[bool, str]:
    tops = {a["top_id"] for a in res.attribution}
    ok = tops == {OUTLIER_ID} and all(a["survives_without_top"] is False for a in res.attribution)
    return ok, f"attribution top id(s): {sorted(t for t in tops if t)}; survives without it: " + \
        str(sorted({a['survives_without_top'] for a in res.attribution}, key=str))


def all_ok(results: list[ControlResult]) -> bool:
    return bool(results) and all(r.ok for r in results)
