"""The quality metrics: one table that the scorers, the gates, the controls, the verdict documents
and the screens read (docs/quality.md, "The quality metrics").

Each metric has one name everywhere: the `quality_scores.metric` value, the gate's metric and check
name, the plan's margin key (`quality.margins`: wer_pp, sim, mos), the `campaign gate --scores`
column and flag. MOS is `mos` whichever scorer fills it (DNSMOS or UTMOS22); its check label names
the scorer. Older documents, score tables and flags said `utmos`: `LEGACY` maps it, so stored
documents and bundles still verify and old tables still load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class QualityMetric:
    name: str  # quality_scores.metric, gate metric, check name, score-table column (the value column)
    label: str  # the check's label; the scorer's label is appended (`check_label`)
    unit: str  # unit of the degradation the gate bounds
    margin_key: str  # the plan's quality.margins key
    flag: str  # `campaign gate --scores` / `campaign controls` margin flag
    default_scorer: str  # stats/quality/registry.py names the scorers
    value: str  # what one output's value is (quality_scores.value)
    degradation: str  # what the gate bounds, baseline vs candidate
    level: str = ""  # one engine's figure at one concurrency (quality under load, docs/results.md)
    level_unit: str = ""
    level_doc: str = ""


QUALITY_METRICS: tuple[QualityMetric, ...] = (
    QualityMetric("wer", "WER degradation", "pp", "wer_pp", "--wer-margin", "pocketsphinx",
                  "word error rate of the ASR transcript against the target text (ratio)",
                  "100 × (Σ errors_cand − Σ errors_base) / Σ words_base over resampled ids",
                  "WER", "%", "100 × Σ errors / Σ reference words over the cell's utterance ids (corpus WER)"),
    QualityMetric("sim", "SIM drop", "x100", "sim", "--sim-margin", "resemblyzer",
                  "speaker similarity to the prompt: cosine × 100",
                  "mean(SIM_base) − mean(SIM_cand) over resampled ids",
                  "SIM", "x100", "mean over the cell's utterance ids of each id's mean SIM"),
    QualityMetric("mos", "MOS drop", "MOS", "mos", "--mos-margin", "dnsmos",
                  "predicted mean opinion score (DNSMOS OVRL or UTMOS22, the plan's scorer)",
                  "mean(MOS_base) − mean(MOS_cand) over resampled ids",
                  "MOS", "MOS", "mean over the cell's utterance ids of each id's mean MOS"),
)
QUALITY_BY_NAME: dict[str, QualityMetric] = {m.name: m for m in QUALITY_METRICS}
NAMES: tuple[str, ...] = tuple(m.name for m in QUALITY_METRICS)
LEGACY: dict[str, str] = {"utmos": "mos"}  # older name -> name (documents, score tables, flags)


def canonical(name: str) -> str:
    """The metric's name now (an older document's `utmos` is `mos`)."""
    return LEGACY.get(name, name)


def check_label(metric: str, scorer_label: str | None = None) -> str:
    """A check's label naming what filled the slot: 'MOS drop (DNSMOS OVRL (P.835))', never a MOS
    slot of DNSMOS scores called UTMOS; 'WER degradation (pocketsphinx domain LM ...)', never a
    domain model's WER presented as a general recogniser's."""
    base = QUALITY_BY_NAME[canonical(metric)].label
    if not scorer_label:
        return base
    inner = re.fullmatch(r"(?:WER|SIM x100) \((.*)\)", scorer_label)  # 'WER (Whisper)' -> 'Whisper'
    return f"{base} ({inner.group(1) if inner else scorer_label})"


def check_labels(scorer_labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """metric -> check label, each naming its scorer when known."""
    labels = dict(scorer_labels or {})
    for old, new in LEGACY.items():
        if old in labels and new not in labels:
            labels[new] = labels[old]
    return {m: check_label(m, labels.get(m)) for m in NAMES}


def level_label(metric: str, scorer_label: str | None = None) -> str:
    """One engine's figure (quality under load), the MOS slot naming its scorer as `check_label`
    does: 'MOS (DNSMOS OVRL (P.835))', never DNSMOS scores called UTMOS."""
    base = QUALITY_BY_NAME[canonical(metric)].level
    return f"{base} ({scorer_label})" if scorer_label and canonical(metric) == "mos" else base
