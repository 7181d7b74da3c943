"""The report's view of equivalence verdicts (docs/equivalence.md): a figure of the per-utterance
distances against their tolerances, and a table per verdict with its label, worst distances and
named reasons. The verdicts shown are the plan's and its addenda's (an equivalence experiment is
often an addendum: console/demo.py)."""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

import numpy as np
from matplotlib.ticker import MaxNLocator

from console import figures as F
from console.equivalence import SHOWN, family_equivalence, fmt, summary
from stats.equivalence import from_json_number
from stats.results.plan_results import VerdictResult

PANELS = (("max_abs", "max |c - r| (full scale)", True), ("snr_db", "SNR (dB), reference as signal", False),
          ("log_mel_db", "log-mel distance (dB)", True))


def _rows(v: VerdictResult) -> list[dict[str, Any]]:
    return list((v.document or {}).get("checks") or [])


def equivalence_figure(verdicts: Sequence[VerdictResult]) -> F.FigureOut:
    title = "Equivalence: per-utterance distances against the tolerance"
    eq = [v for v in verdicts if v.kind == "equivalence" and v.document]
    fig, axes = F._figure(title, ncols=len(PANELS), width=13.0, height=3.8)
    if not eq:
        for ax, (measure, _, _) in zip(axes[0], PANELS):
            F._empty(ax, "no equivalence verdicts issued")
            ax.set_title(measure)
        return F.FigureOut("equivalence", title, "No equivalence verdict was issued for this plan "
                           "(docs/equivalence.md).", fig)
    names = [v.name or v.verdict_id for v in eq]
    for ax, (measure, label, upper) in zip(axes[0], PANELS):
        tol_drawn = False
        for i, v in enumerate(eq):
            rows = [r for r in _rows(v) if r["measure"] == measure]
            utts = sorted({f"{r['utt_id']} r{r['repeat']}" for r in rows})
            vals = {f"{r['utt_id']} r{r['repeat']}": from_json_number(r["value"]) for r in rows}
            x = np.arange(len(utts))
            y = np.array([vals[u] if vals[u] is not None else np.nan for u in utts], dtype=float)
            finite = np.isfinite(y)
            color = F.PALETTE[i % len(F.PALETTE)]
            ax.plot(x[finite], y[finite], "o-", color=color, ms=4, lw=1, label=f"{names[i]} ({v.verdict})")
            if (~finite).any():  # +inf SNR (bit-exact) is drawn at the top edge
                ax.scatter(x[~finite], [1.0] * int((~finite).sum()), marker="^", color=color,
                           transform=ax.get_xaxis_transform(), clip_on=False, label=f"{names[i]}: +inf (identical)")
            tols = {r["tolerance"] for r in rows if r["tolerance"] is not None}
            for t in tols:
                ax.axhline(t, color="#333333", ls="--", lw=1.0, label=None if tol_drawn else "tolerance")
                tol_drawn = True
        if upper and measure != "snr_db":
            pos = [from_json_number(r["value"]) for v in eq for r in _rows(v) if r["measure"] == measure]
            if any(p is not None and p > 0 for p in pos):
                ax.set_yscale("symlog", linthresh=1e-6)
                ax.set_ylim(bottom=0)  # distances are >= 0: 0 (identical) sits on the axis
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("utterance (pool order)")
        ax.set_ylabel(label)
        ax.set_title(measure + (" (lower is closer)" if upper else " (higher is closer)"))
        if eq:
            ax.legend(loc="best", fontsize=7)
    return F.FigureOut("equivalence", title, "Each pair's per-utterance max abs difference, SNR and log-mel "
                       "distance against its frozen tolerance (dashed); triangles at the top are +inf SNR, "
                       "i.e. identical samples. docs/equivalence.md defines each measure.", fig)


def equivalence_tables(verdicts: Sequence[VerdictResult]) -> str:
    e = html.escape
    parts = []
    for v in verdicts:
        if v.kind != "equivalence" or not v.document:
            continue
        doc = v.document
        worst = summary(_rows(v))
        cells = "".join(f"<td>{e(('min ' if m == 'snr_db' else 'max ') + m)}: {e(fmt(m, worst[m]))}</td>" for m in SHOWN)
        tol = ", ".join(f"{k} {val:g}" for k, val in sorted((doc.get("equivalence") or {}).get("tolerances", {}).items())
                        if isinstance(val, (int, float)) and not math.isnan(val))
        reasons = "".join(f"<li>{e(r)}</li>" for r in doc.get("reasons") or [])
        parts.append(f'<h3>{e(v.verdict_id)}: <b class="{e(v.verdict)}">{e(doc.get("label") or v.verdict)}</b></h3>'
                     f"<p>equivalence · {e(v.name or '-')} · issued {e(v.created)} UTC · plan {e((v.plan_hash or '')[:12])} · "
                     f"C={e(str((doc.get('equivalence') or {}).get('concurrency')))} · tolerances: {e(tol or '-')}</p>"
                     f"<table class=checks><tr>{cells}</tr></table>" + (f"<ul>{reasons}</ul>" if reasons else ""))
    return "".join(parts)


__all__ = ["equivalence_figure", "equivalence_tables", "family_equivalence"]
