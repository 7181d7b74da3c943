"""Which injected fault, if any, a request meets.

The draw is a hash of (request seed, text, prompt digest), not a shared random
stream, so a request's fate does not depend on arrival order or concurrency and a
test can reproduce it exactly. A request header can force or suppress a fault.
"""

from __future__ import annotations

from engine_adapters.reference.profiles import FAULT_KINDS

FAULT_HEADER = "X-Reference-Fault"
NO_FAULT = "none"
# Misbehaviours: the stream runs to its normal end but says something false, what a client must
# refuse rather than record (docs/engines.md, "Sample rate"; "Numbers an engine sends"):
# emit_ns_overflow: every SSE event's emit_ns is 2**63 past the real stamp (outside int64);
# wav_rate: every WAV chunk's header says WAV_FAULT_RATE, the samples are still 24 kHz;
# pcm_rate: a pcm stream's Content-Type says `audio/pcm; rate=PCM_FAULT_RATE`. Each changes only
# the dialect that has that field (emit_ns: SSE; WAV headers: vllm-omni and sglang-omni; pcm).
LABEL_FAULTS = ("emit_ns_overflow", "wav_rate", "pcm_rate")
EMIT_NS_FAULT_SHIFT = 1 << 63
WAV_FAULT_RATE = 8_000
PCM_FAULT_RATE = 16_000


class FaultHeaderError(ValueError):
    """The fault header names no known fault."""


def forced_fault(header_value: str | None) -> tuple[bool, str | None]:
    """(header present, fault kind or None for ``none``) from the ``X-Reference-Fault`` header."""
    if header_value is None:
        return False, None
    kind = header_value.strip().lower()
    if kind == NO_FAULT:
        return True, None
    if kind not in FAULT_KINDS:
        raise FaultHeaderError(
            f"{FAULT_HEADER}: unknown fault {header_value!r}; use one of {', '.join(FAULT_KINDS)} or {NO_FAULT}"
        )
    return True, kind


def draw_fault(rates: dict[str, float], draw_seed: int) -> str | None:
    """The fault for a request whose stable seed is ``draw_seed`` (64-bit), given per-kind rates."""
    if not rates:
        return None
    u = (draw_seed % (1 << 53)) / float(1 << 53)
    threshold = 0.0
    for kind in FAULT_KINDS:
        threshold += rates.get(kind, 0.0)
        if u < threshold:
            return kind
    return None
