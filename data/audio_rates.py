"""The sample rate an engine is expected to deliver, and the plan rule that compared arms share it
(docs/engines.md, "Sample rate").

Throughput (audio seconds per second) and every audio length are samples divided by the rate, so
a rate the engine merely announces would scale them: the driver accepts audio only at the rate
the plan expects of the engine (`request.sample_rate`, else its dialect's default), and a plan
whose compared arms expect different rates is refused. The defaults live here, not in the
dialects, because the plan check (data) cannot import engine_adapters.
"""

from __future__ import annotations

from typing import Any, Mapping

# what MiniCPM-o's talker produces on each dialect (docs/engines.md, Part 1)
DIALECT_SAMPLE_RATES = {"vllm-omni": 24_000, "sglang-omni": 24_000, "pcm": 24_000, "vllm-omni-realtime": 24_000}


def expected_rate(dialect: str, request: Mapping[str, Any] | None) -> int:
    """`request.sample_rate` when the engine entry sets it, else the dialect's default."""
    rate = (request or {}).get("sample_rate")
    return int(rate) if rate is not None else DIALECT_SAMPLE_RATES.get(dialect, 24_000)


def compared_arms(raw: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(field path, engine, the engine it is compared with) for every comparison a plan names:
    each quality candidate against the baseline, each decision rule's candidate against its
    reference."""
    q = raw.get("quality") or {}
    pairs: list[tuple[str, str, str]] = []
    if q.get("baseline"):
        if q.get("candidate"):
            pairs.append(("quality.candidate", q["candidate"], q["baseline"]))
        pairs += [(f"quality.candidates[{i}]", c, q["baseline"]) for i, c in enumerate(q.get("candidates") or [])]
    pairs += [(f"decision_rules[{i}].candidate", r["candidate"], r["reference"])
              for i, r in enumerate(raw.get("decision_rules") or []) if "candidate" in r and "reference" in r]
    return pairs


def rate_errors(raw: Mapping[str, Any]) -> list[str]:
    """One line per compared pair whose engines are expected to deliver different rates."""
    rates = {e["name"]: expected_rate(e.get("dialect", ""), e.get("request")) for e in raw.get("engines") or []}
    errs = []
    for where, a, b in compared_arms(raw):
        if a in rates and b in rates and rates[a] != rates[b]:
            errs.append(f"{where}: {a!r} is expected to deliver {rates[a]} Hz audio and {b!r}, which it is "
                        f"compared with, {rates[b]} Hz; compared arms must share a sample rate "
                        f"(engines[].request.sample_rate)")
    return errs
