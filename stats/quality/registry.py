"""Scorers by name, and where their model folders come from.

Model folders: the plan's `quality.model_paths.<scorer name>` wins (it is frozen with the
plan); otherwise the environment variable below; bundled scorers need neither. See
docs/quality.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from data.plan_model import Plan, QualitySpec
from stats.quality.base import METRICS, Scorer
from stats.quality.dnsmos import DnsmosScorer
from stats.quality.pocketsphinx_asr import PocketsphinxDomainScorer, PocketsphinxScorer
from stats.quality.sim import ResemblyzerScorer, SeedTtsSimScorer, WavlmScorer
from stats.quality.utmos import Utmos22Scorer
from stats.quality.whisper_asr import WhisperScorer

SCORERS: dict[str, type[Scorer]] = {
    cls.name: cls for cls in (
        PocketsphinxScorer, PocketsphinxDomainScorer, WhisperScorer, ResemblyzerScorer, WavlmScorer, SeedTtsSimScorer, DnsmosScorer,
        Utmos22Scorer)
}
BY_SCORER_ID: dict[str, type[Scorer]] = {cls.scorer_id: cls for cls in SCORERS.values()}
ENV_VARS = {"whisper": "CAMPAIGN_WHISPER_DIR", "wavlm-ecapa": "CAMPAIGN_WAVLM_DIR", "seedtts-sim": "CAMPAIGN_SEEDTTS_SIM_DIR",
            "utmos22": "CAMPAIGN_UTMOS_DIR", "pocketsphinx-domain": "CAMPAIGN_DOMAIN_LM_TEXTS"}
DEFAULT_SCORERS = {"wer": "pocketsphinx", "sim": "resemblyzer", "mos": "dnsmos"}


class UnknownScorer(ValueError):
    """A scorer name that is not in the registry."""


def scorer_class(name: str) -> type[Scorer]:
    cls = SCORERS.get(name) or BY_SCORER_ID.get(name)
    if cls is None:
        raise UnknownScorer(f"unknown scorer {name!r} (known: {', '.join(sorted(SCORERS))})")
    return cls


def model_dir_for(name: str, model_paths: Mapping[str, Any] | None = None,
                  env: Mapping[str, str] | None = None) -> Path | None:
    """The plan's quality.model_paths entry, else the scorer's environment variable, else None."""
    env = os.environ if env is None else env
    cls = scorer_class(name)
    paths = dict(model_paths or {})
    value = paths.get(cls.name) or paths.get(cls.scorer_id)
    if not value and cls.name in ENV_VARS:
        value = env.get(ENV_VARS[cls.name])
    return Path(str(value)).expanduser() if value else None


def dtype_for(name: str, dtypes: Mapping[str, Any] | None = None) -> str | None:
    """The plan's quality.dtypes entry for this scorer: keyed by its name or id, else by the metric
    it measures (`{"sim": "tf32"}`: whichever scorer the plan gives SIM); None: the scorer's
    default (docs/quality.md)."""
    cls = scorer_class(name)
    d = dict(dtypes or {})
    value = d.get(cls.name) or d.get(cls.scorer_id) or d.get(cls.metric)
    return str(value) if value else None


def make_scorer(name: str, model_paths: Mapping[str, Any] | None = None, *,
                dtypes: Mapping[str, Any] | None = None, **kw) -> Scorer:
    """A scorer instance (nothing loaded yet; call available() / ensure_loaded())."""
    cls = scorer_class(name)
    if "dtype" not in kw:
        kw["dtype"] = dtype_for(name, dtypes)
    return cls(model_dir_for(name, model_paths), **kw)


def plan_quality(plan: Plan | QualitySpec) -> QualitySpec:
    """The plan's `quality` section (given a Plan, or the section itself)."""
    return plan.quality if isinstance(plan, Plan) else plan


def plan_scorers(plan: Plan | QualitySpec) -> dict[str, str]:
    """metric -> scorer name for the plan (defaults fill metrics the plan leaves out)."""
    named = plan_quality(plan).scorers
    return {m: str(named.get(m) or DEFAULT_SCORERS[m]) for m in METRICS}


def scorer_status(plan: Plan | QualitySpec) -> dict[str, str]:
    """Contract for the gates: metric -> 'ok' | 'unavailable: why' for the plan's scorers."""
    paths = plan_quality(plan).model_paths
    dtypes = plan_quality(plan).dtypes
    out: dict[str, str] = {}
    for metric, name in plan_scorers(plan).items():
        try:
            cls = scorer_class(name)
        except UnknownScorer as exc:
            out[metric] = f"unavailable: {exc}"
            continue
        if cls.metric != metric:
            out[metric] = f"unavailable: scorer {name!r} measures {cls.metric}, not {metric}"
            continue
        try:
            ok, why = make_scorer(name, paths, dtypes=dtypes, device="cpu").available()
        except ValueError as exc:  # e.g. a dtype the scorer does not offer
            ok, why = False, str(exc)
        out[metric] = "ok" if ok else f"unavailable: {why}"
    return out
