"""The gate's terminal output: the noninferiority checks table, a decision rule's table and the
synthetic controls (`campaign gate`, `campaign controls`); imported when one of them runs."""

from __future__ import annotations

import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.text import Text

from console.output import print_rows

from data.errors import CampaignError
from data.pool_status import REUSED, UNTOUCHED, with_evidence
from stats.controls import all_ok, run_controls
from stats.gates import FAIL, INCONCLUSIVE, PASS, GateConfig
from stats.results.checks import CheckRow
from stats.rule_noise import NoiseNote, noise_summary

STYLE = {PASS: "green", FAIL: "bold red", INCONCLUSIVE: "yellow"}

# `campaign gate --format csv|json`: one row per check of every verdict judged, CheckRow's fields
MACHINE_COLUMNS = ("verdict", *(f.name for f in fields(CheckRow) if f.name != "ratios"), "ratios")


def machine_rows(verdict: str, checks: Sequence[CheckRow]) -> list[list[Any]]:
    """The checks as `MACHINE_COLUMNS` rows (raw values; the ratios joined by spaces)."""
    return [[verdict, *(getattr(c, n) for n in MACHINE_COLUMNS[1:-1]), " ".join(f"{r:g}" for r in c.ratios)]
            for c in checks]


def _fmt(v, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:+.{digits}f}" if isinstance(v, float) else str(v)


def print_checks(console: Console, result, title: str, evidence=None,
                 machine: list[list[Any]] | None = None) -> None:
    """The checks table; `evidence`: the quality pool's status (data.pool_status.PoolStatus);
    `machine`: collect the checks as `machine_rows` instead of printing the table (--format)."""
    checks = [CheckRow.from_quality(check.as_dict()) for check in result.checks]  # the one row type (stats/results/checks.py)
    if machine is not None:
        machine += machine_rows(title, checks)
    else:
        rows = []
        for c in checks:
            pct = "%" if c.metric == "wer" else ""
            unit = c.unit if c.unit == "pp" else f" {c.unit}"  # '+1.6667pp', '+0.1200 x100'
            rows.append([str(c.concurrency), c.label, "-" if c.base_value is None else f"{c.base_value:.3f}{pct}",
                         "-" if c.cand_value is None else f"{c.cand_value:.3f}{pct}", _fmt(c.point) + unit,
                         _fmt(c.bound) + unit, f"{c.margin:g}{unit}", f"{c.n_ids}/{c.n_expected}",
                         Text(c.status, style=STYLE[c.status]), ("diagnostic: " if c.diagnostic_only else "") + c.reason])
        print_rows(["C", "metric", "base", "cand", "point", "upper bound", "margin", "ids", "result", "note"], rows,
                   title=title, console=console, right=("C", "base", "cand", "point", "upper bound", "margin", "ids"))
    cfg = result.config
    console.print(f"bootstrap: {cfg.method}, B={cfg.draws}, seed={cfg.seed}, one-sided {cfg.confidence:g} upper "
                  f"bound; pass iff bound < margin. Input: {result.inputs['rows']} rows, sha256 "
                  f"{result.inputs['sha256'][:16]}…")
    if result.config.repeats is not None:
        console.print(f"coverage: every id needs exactly measured repeats {', '.join(map(str, result.config.repeats))} "
                      "in both arms (the plan's sweep.measured_repeats); otherwise its checks are INCONCLUSIVE")
    else:
        console.print("coverage: every id needs the same measured repeats in both arms (every repeat the table has at "
                      "its concurrency); otherwise its checks are INCONCLUSIVE")
    extra = result.inputs.get("not_judged_concurrencies") or []
    if extra:
        console.print(f"not part of the verdict: C{', C'.join(map(str, extra))} in the table (required: "
                      f"C{', C'.join(map(str, result.inputs['required_concurrencies']))})")
    if evidence is not None:
        style = {UNTOUCHED: "green", REUSED: "bold yellow"}.get(evidence.status, "")
        console.print(f"evidence: [{style or 'default'}]{evidence.status}[/] — {evidence.summary}")
    for a in result.attribution:
        if not a["contributions"] or a["net_error_change"] == 0:
            continue
        top = a["contributions"][0]
        wt = a.get("without_top") or {}
        console.print(
            f"C{a['concurrency']} WER attribution: net {a['net_error_change']:+d} errors; top {top['utt_id']} "
            f"{top['delta']:+d} ({(top['share_of_net'] or 0) * 100:.0f}% of net)"
            + (f"; without it {wt['point_pp']:+.4f}pp (bound {wt['bound_pp']:+.4f}), change "
               f"{'survives' if a['survives_without_top'] else 'does not survive'}" if wt else "")
            + " [diagnostic only]")
    shown = with_evidence(result.verdict, evidence.status if evidence is not None else None)
    console.print(f"Quality verdict: [{STYLE[result.verdict]}]{shown}[/]")


def print_rule(console: Console, rr, noise: Sequence[NoiseNote] = (), machine: list[list[Any]] | None = None) -> None:
    """A decision rule's table, each cell's result phrased as the test applied, then the runs whose
    host steal or spread is above the thresholds (`noise`, stats/rule_noise.py); `machine`: collect
    its cells as `machine_rows` instead of printing the table (--format)."""
    title = f"decision rule {rr.name}: {rr.candidate} / {rr.reference} {rr.metric}"
    if machine is not None:
        machine += machine_rows(title, [CheckRow.from_rule_cell(asdict(c)) for c in rr.cells])
    else:
        rows = []
        for c in rr.cells:
            rep = lambda vals: ", ".join("-" if v["value"] is None else f"{v['value']:.1f}" for v in vals)  # noqa: E731
            sp = lambda s: "-" if s["median"] is None else f"{s['median']:.1f} ({(s['cv'] or 0) * 100:.1f}%)"  # noqa: E731
            test = CheckRow.from_rule_cell(asdict(c)).test  # 'lower bound 0.660 ≤ 1.0 → FAIL'
            rows.append([str(c.concurrency), rep(c.candidate), rep(c.reference), sp(c.candidate_spread),
                         sp(c.reference_spread), ", ".join(f"{p['ratio']:.3f}" for p in c.pairs),
                         _fmt(c.geo_mean_ratio, 3).lstrip("+"), _fmt(c.lower_bound_ratio, 3).lstrip("+"),
                         Text(test, style=STYLE[c.status]), c.reason])
        print_rows(["C", "candidate repeats", "reference repeats", "cand median (CV)", "ref median (CV)", "ratios",
                    "geo-mean", f"lower {rr.confidence:g}", "result", "note"], rows, title=title, console=console)
    console.print(f"bound: {rr.method}; pass iff lower bound > {rr.min_ratio:g}. "
                  f"Rule verdict: [{STYLE[rr.verdict]}]{rr.verdict}[/]")
    if noise:
        console.print(f"[yellow]{noise_summary(noise)}:[/]", highlight=False)
        for n in noise:
            console.print(f"  {n.text()}", highlight=False, soft_wrap=True, markup=False)


def print_controls(console: Console, results, fmt: str = "table") -> None:
    rows = [[r.name, r.expected, r.observed, Text("yes", style="green") if r.ok else Text("NO", style="bold red"),
             r.detail] for r in results]
    print_rows(["control", "expected", "observed", "ok", "detail"], rows, fmt, title="synthetic controls",
               console=console)


def require_controls(console: Console, cfg: GateConfig, store_path=None):
    """The synthetic controls for `cfg`, reused from the cache beside the store at `store_path`
    when they ran with exactly these settings and code (stats/controls_cache.py); refuses the
    verdict if any misses its known answer."""
    from stats.controls_cache import cache_path, controls_for

    path = cache_path(store_path) if store_path is not None and Path(store_path).is_file() else None
    got = controls_for(cfg, path, run_controls)
    results = got.results
    if not all_ok(results):
        print_controls(console, results)
        bad = ", ".join(r.name for r in results if not r.ok)
        raise CampaignError(f"synthetic controls failed ({bad}): the gate refuses to issue a verdict")
    how = (f"reused: the same settings and code ran them at {got.cached_at}" if got.cached_at
           else "ran now" + (f", kept in {path.name}" if path is not None else ""))
    console.print(f"synthetic controls: {len(results)}/{len(results)} gave their known answer ({how}; "
                  f"key {got.key[:12]})")
    return results
