"""The verdict document of an equivalence verdict (docs/equivalence.md, docs/verdict.schema.json):
the same envelope as the quality and throughput documents (stats/verdict_doc.py), with the pair,
the frozen tolerances, the log-mel parameters, every per-utterance row, and a numpy snippet that
re-derives the verdict from those rows."""

from __future__ import annotations

import dataclasses
from typing import Any

from data.equivalence_spec import EquivalencePair, EquivalenceSpec
from data.store import Store
from stats.equivalence import EquivalenceResult, MelParams
from stats.verdict_doc import SCHEMA_VERSION, finite, plan_section, runs_section

RULE = ("PASS iff every utterance x repeat has both outputs and every bounded measure is within its frozen "
        "tolerance (PASS (bit-exact) when every output's WAV SHA-256 matched); FAIL when any bound is exceeded "
        "(the worst named); INCONCLUSIVE when an output is missing or failed (named), whatever the others show")

REDERIVE = '''\
import json
doc = json.load(open("verdict.json"))
rows = doc["checks"]
gaps = [r for r in rows if r["measure"] in ("output", "tensors")]
failed = [r for r in rows if r["passed"] is False]
verdict = "INCONCLUSIVE" if gaps or not rows else "FAIL" if failed else "PASS"
exact = verdict == "PASS" and all(r["value"] == 1 for r in rows if r["measure"] == "pcm_identical")
print(verdict, "(bit-exact)" if exact else "")
'''


def equivalence_document(*, verdict_id: str, created_at: Any, plan: Any, store: Store, pair: EquivalencePair,
                         spec: EquivalenceSpec, result: EquivalenceResult, rows: list[dict[str, Any]],
                         inputs: dict[str, Any]) -> dict[str, Any]:
    runs, exclusions = runs_section(store, plan.hash)
    return finite({
        "schema_version": SCHEMA_VERSION,
        "verdict_id": verdict_id,
        "created_at": created_at.isoformat(),
        "kind": "equivalence",
        "name": pair.name,
        "verdict": result.verdict,
        "label": result.label,
        "reasons": result.reasons,
        "rule": RULE,
        "plan": plan_section(store, plan),
        "metrics_version": None,
        "equivalence": {"reference": pair.reference, "candidate": pair.candidate, "tolerances": pair.tolerances,
                        "concurrency": spec.concurrency, "repeats": spec.repeats, "utterances": spec.utterances,
                        "pool": spec.pool, "reuse_stored": spec.reuse_stored, "tensors": spec.tensors,
                        "log_mel": dataclasses.asdict(MelParams())},
        "checks": rows,
        "attribution": [],
        "inputs": inputs,
        "throughput": [],
        "runs": runs,
        "exclusions": exclusions,
        "reproduce": {"commands": [f"campaign equivalence {plan.source_path or 'plan.json'} --db campaign.duckdb",
                                   f"campaign export verdict {verdict_id} -o verdict.json"],
                      "numpy": REDERIVE,
                      "note": "each row's value is re-computable from the two WAVs its audio hashes name "
                              "(stats/equivalence.py); infinity is written \"inf\""},
    })
