"""The engine's own figures beside the console's, per run (docs/results.md, "Server metrics").

Server side: the change of each cumulative family between the run's first and last successful
scrape (`server_metrics`), so requests of earlier runs on the same launch do not count; a counter
that went down (the engine restarted) counts from zero. Histogram means are exact (sum / count);
the engine's names are normalised so `vllm:omni_*` (vLLM-Omni before 0.24) reads as `vllm_omni:*`.

Client side: the same requests as the engine saw, so every request of the run, warm-ups included
(the engine cannot tell them apart), each figure defined the way the engine defines its own (the
pairs and where each clock starts: docs/results.md). A pair is flagged when |server - client|
exceeds its tolerance (`TOLERANCES`); a figure one side does not have is shown, never flagged.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from data.store import Store
from stats.metrics.continuity import continuity_rates, deficit_underrun_s, pause_resume_underrun_s
from stats.metrics.compute import load_run_records, request_rtf

NS = 1e9
OLD_VLLM_PREFIX, VLLM_PREFIX, SGLANG_PREFIX = "vllm:omni_", "vllm_omni:", "sglang_omni:"


@dataclass(frozen=True)
class Tolerance:
    """|server - client| <= max(absolute, relative x |client|)."""
    absolute: float
    relative: float = 0.0

    def allows(self, server: float, client: float) -> bool:
        return abs(server - client) <= max(self.absolute, self.relative * abs(client)) + 1e-12


# What the two sides may differ by without a flag (docs/results.md, "Server metrics" says why)
TOLERANCES: dict[str, Tolerance] = {
    "ttfa_mean_s": Tolerance(0.050, 0.10),
    "rtf_mean": Tolerance(0.05, 0.10),
    "chunk_interval_mean_s": Tolerance(0.010, 0.10),
    "underrun_mean_s": Tolerance(0.025, 0.10),
    "continuity_c50": Tolerance(0.05),
    "continuity_c100": Tolerance(0.05),
    "continuity_c200": Tolerance(0.05),
    "audio_s_total": Tolerance(0.05, 0.01),
    "requests_completed": Tolerance(0),
    "requests_failed": Tolerance(0),
}
UNITS = {"ttfa_mean_s": "s", "rtf_mean": "", "chunk_interval_mean_s": "s", "underrun_mean_s": "s",
         "audio_s_total": "s", "requests_completed": "requests", "requests_failed": "requests"}


@dataclass(frozen=True)
class Pair:
    figure: str
    server: float | None
    client: float | None
    difference: float | None  # server - client
    tolerance: Tolerance
    flagged: bool  # both sides present and beyond tolerance


@dataclass(frozen=True)
class Reconciliation:
    run_id: str
    engine_family: str | None  # "vllm_omni" or "sglang_omni"; None: no server samples
    scrapes: int
    failed_scrapes: int
    baseline: bool  # a successful scrape before the first request
    pairs: tuple[Pair, ...]

    @property
    def flagged(self) -> list[str]:
        return [p.figure for p in self.pairs if p.flagged]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly (for a run summary, an export or the evidence bundle)."""
        return {"run_id": self.run_id, "engine_family": self.engine_family, "scrapes": self.scrapes,
                "failed_scrapes": self.failed_scrapes, "baseline": self.baseline, "flagged": self.flagged,
                "pairs": [{"figure": p.figure, "unit": UNITS.get(p.figure, ""), "server": p.server, "client": p.client,
                           "difference": p.difference, "tolerance_abs": p.tolerance.absolute,
                           "tolerance_rel": p.tolerance.relative, "flagged": p.flagged} for p in self.pairs]}


def normalise(family: str) -> str:
    return VLLM_PREFIX + family[len(OLD_VLLM_PREFIX):] if family.startswith(OLD_VLLM_PREFIX) else family


def _deltas(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[tuple[str, str], float], int, int, bool]:
    """(sample name, labels_json) -> last - first successful scrape (a series absent from the first
    is 0 there), scrapes, failed scrapes, and whether scrape 0 (before the first request) succeeded."""
    by_seq: dict[int, dict[tuple[str, str], float]] = defaultdict(dict)
    ok: set[int] = set()
    failed: set[int] = set()
    for r in rows:
        if r["family"] is None:  # the scrape's own row (console/server_scrape.py)
            (failed if r["error"] else ok).add(r["scrape_seq"])
            continue
        by_seq[r["scrape_seq"]][(normalise(r["sample"]), r["labels_json"])] = float(r["value"])
    good = sorted(ok)
    if not good:
        return {}, len(ok | failed), len(failed), False
    first = by_seq.get(good[0], {}) if len(good) > 1 else {}
    out = {}
    for key, v in by_seq.get(good[-1], {}).items():
        before = first.get(key, 0.0)
        out[key] = v - before if v >= before else v
    return out, len(ok | failed), len(failed), good[0] == 0 and len(good) > 1


def _sum(deltas: Mapping[tuple[str, str], float], sample: str, **labels: str) -> float | None:
    vals = [v for (name, lj), v in deltas.items() if name == sample
            and all(json.loads(lj).get(k) == want for k, want in labels.items())]
    return float(sum(vals)) if vals else None


def _mean(deltas: Mapping[tuple[str, str], float], family: str) -> float | None:
    s, n = _sum(deltas, family + "_sum"), _sum(deltas, family + "_count")
    return s / n if s is not None and n else None


def server_figures(rows: Sequence[Mapping[str, Any]]) -> tuple[str | None, dict[str, float | None], int, int, bool]:
    """(engine family, figures, scrapes, failed scrapes, baseline) from one run's server_metrics rows."""
    d, scrapes, failed, baseline = _deltas(rows)
    names = {name for name, _ in d}
    if any(n.startswith(VLLM_PREFIX) for n in names):
        p = VLLM_PREFIX
        underruns = _sum(d, p + "audio_underrun_s_count")
        ok = _sum(d, p + "audio_continuity_ok_total", threshold_ms="100")
        return "vllm_omni", {
            "ttfa_mean_s": _mean(d, p + "audio_ttfp_s"), "rtf_mean": _mean(d, p + "audio_rtf"),
            "chunk_interval_mean_s": None, "underrun_mean_s": _mean(d, p + "audio_underrun_s"),
            "continuity_c100": (ok or 0.0) / underruns if underruns else None,
            "audio_s_total": _sum(d, p + "audio_duration_s_sum"),
            "requests_completed": _sum(d, p + "requests_success_total"),
            "requests_failed": _sum(d, p + "requests_failed_total") or 0.0,
        }, scrapes, failed, baseline
    if any(n.startswith(SGLANG_PREFIX) for n in names):
        p = SGLANG_PREFIX
        underruns = _sum(d, p + "audio_underrun_s_count")
        figures: dict[str, float | None] = {
            "ttfa_mean_s": _mean(d, p + "audio_ttfp_s"), "rtf_mean": _mean(d, p + "audio_rtf"),
            "chunk_interval_mean_s": _mean(d, p + "audio_chunk_interval_s"),
            "underrun_mean_s": _mean(d, p + "audio_underrun_s"),
            "audio_s_total": _sum(d, p + "audio_duration_s_sum"),
            "requests_completed": _sum(d, p + "audio_e2e_latency_s_count"),
            "requests_failed": None,  # SGLang-Omni's audio families count no failures
        }
        for ms in (50, 100, 200):
            ok = _sum(d, p + "audio_continuity_ok_total", threshold_ms=str(ms))
            figures[f"continuity_c{ms}"] = (ok or 0.0) / underruns if underruns else None
        return "sglang_omni", figures, scrapes, failed, baseline
    return None, {}, scrapes, failed, baseline


def client_figures(requests: Sequence[Mapping[str, Any]], chunks_by_request: Mapping[int, Sequence[tuple[int, int]]],
                   family: str) -> dict[str, float | None]:
    """The console's figures over every request of the run, defined as `family`'s engine defines its own."""
    ok = [r for r in requests if r["outcome"] == "ok"]
    ttfa = [(r["t_first_audio_ns"] - r["t_send_ns"]) / NS for r in requests if r["t_first_audio_ns"] is not None]
    rtfs = [x for r in ok if r["sample_rate"]
            and (x := request_rtf(r["t_send_ns"], r["t_last_audio_ns"], (r["audio_samples"] or 0) / r["sample_rate"]))
            is not None]
    streams = []  # (arrivals s, durations s) of each successful request with audio
    for r in ok:
        chunks = chunks_by_request.get(r["request_index"], ())
        if r["sample_rate"] and chunks:
            streams.append(([t / NS for t, _ in chunks], [s / r["sample_rate"] for _, s in chunks]))
    gaps = [b - a for arr, _ in streams for a, b in zip(arr, arr[1:])]
    if family == "vllm_omni":
        underruns: list[float | None] = [deficit_underrun_s(a, d) for a, d in streams]
    else:  # the SGLang-Omni server scores a one-chunk stream as 0 (its benchmark does not score it)
        underruns = [pause_resume_underrun_s(a, d) if len(a) > 1 else 0.0 for a, d in streams]
    scored = [u for u in underruns if u is not None]
    rates = continuity_rates(underruns, family)
    out: dict[str, float | None] = {
        "ttfa_mean_s": sum(ttfa) / len(ttfa) if ttfa else None,
        "rtf_mean": sum(rtfs) / len(rtfs) if rtfs else None,
        "chunk_interval_mean_s": sum(gaps) / len(gaps) if gaps else None,
        "underrun_mean_s": sum(scored) / len(scored) if scored else None,
        "audio_s_total": float(sum(sum(d) for _, d in streams)),
        "requests_completed": float(len(ok)),
        "requests_failed": float(len(requests) - len(ok)),
    }
    for ms in (50, 100, 200):
        out[f"continuity_c{ms}"] = rates.rate(ms)
    return out


def reconcile(server: Mapping[str, float | None], client: Mapping[str, float | None],
              tolerances: Mapping[str, Tolerance] = TOLERANCES) -> tuple[Pair, ...]:
    """The pairs for every figure the server publishes (a None server figure is shown, unflagged)."""
    pairs = []
    for figure, tol in tolerances.items():
        if figure not in server:
            continue
        s, c = server[figure], client.get(figure)
        both = s is not None and c is not None
        diff = s - c if s is not None and c is not None else None
        pairs.append(Pair(figure, s, c, diff, tol, both and not tol.allows(s, c)))  # type: ignore[arg-type]
    return tuple(pairs)


def reconcile_run(store: Store, run_id: str) -> Reconciliation:
    """One stored run's reconciliation (its server_metrics rows against its requests and chunks)."""
    rows = store.query("SELECT scrape_seq, family, sample, labels_json, value, error FROM server_metrics "
                       "WHERE run_id = ? ORDER BY scrape_seq", [run_id])
    family, server, scrapes, failed, baseline = server_figures(rows)
    pairs: tuple[Pair, ...] = ()
    if family is not None:
        requests, chunks = load_run_records(store, run_id)
        pairs = reconcile(server, client_figures(requests, chunks, family))
    return Reconciliation(run_id, family, scrapes, failed, baseline, pairs)


# -- display (campaign report, the HTML report, the TUI run detail) --------------------------------

LABELS = {"ttfa_mean_s": "TTFA mean", "rtf_mean": "RTF mean", "chunk_interval_mean_s": "chunk interval mean",
          "underrun_mean_s": "underrun mean", "continuity_c50": "continuity c50", "continuity_c100": "continuity c100",
          "continuity_c200": "continuity c200", "audio_s_total": "audio total", "requests_completed": "requests ok",
          "requests_failed": "requests failed"}
# figure -> (display unit, scale from the stored unit, format)
_SHOWN = {"s": ("ms", 1000.0, ".1f"), "": ("", 1.0, ".3f"), "requests": ("", 1.0, ".0f"), "ratio": ("%", 100.0, ".1f")}
COLUMNS = ("run", "figure", "server", "client", "server − client", "tolerance", "flag")
FLAG = "BEYOND TOLERANCE"


def _shown(figure: str) -> tuple[str, float, str]:
    unit = UNITS.get(figure, "ratio")
    if figure == "audio_s_total":
        return "s", 1.0, ".2f"
    return _SHOWN[unit]


def figure_label(figure: str) -> str:
    unit = _shown(figure)[0]
    return f"{LABELS.get(figure, figure)}" + (f" ({unit})" if unit else "")


def _fmt(figure: str, value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    _, scale, spec = _shown(figure)
    return format(value * scale, ("+" if signed else "") + spec)


def tolerance_text(figure: str, tol: Tolerance) -> str:
    unit, scale, spec = _shown(figure)
    absolute = f"{format(tol.absolute * scale, spec)}{(' ' + unit) if unit else ''}"
    return f"±max({absolute}, {tol.relative * 100:g} %)" if tol.relative else f"±{absolute}"


def pair_row(p: Pair) -> list[str]:
    """One pair as display cells: figure, server, client, difference, tolerance, flag."""
    return [figure_label(p.figure), _fmt(p.figure, p.server), _fmt(p.figure, p.client),
            _fmt(p.figure, p.difference, signed=True), tolerance_text(p.figure, p.tolerance), FLAG if p.flagged else ""]


def summary_line(rec: Reconciliation) -> str:
    """What the pairs rest on: the engine family, the scrapes, the baseline, the flags."""
    if rec.engine_family is None:
        if not rec.scrapes:
            return f"run {rec.run_id}: no server samples (its engine was not scraped)"
        return f"run {rec.run_id}: no server samples ({rec.scrapes} scrapes, {rec.failed_scrapes} failed)"
    flags = f"{len(rec.flagged)} beyond tolerance ({', '.join(LABELS.get(f, f) for f in rec.flagged)})" \
        if rec.flagged else "all within tolerance"
    return (f"run {rec.run_id}: {rec.engine_family}, {rec.scrapes} scrapes ({rec.failed_scrapes} failed)"
            + ("" if rec.baseline else ", no scrape before the first request: counts since the engine started")
            + f"; {flags}")
