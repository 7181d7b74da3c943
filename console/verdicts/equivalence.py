"""Equivalence verdicts: a candidate's outputs against the baseline's on the same prompts, judged
measure by measure against the frozen tolerances (docs/equivalence.md; the decision itself is
stats/equivalence.judge, run by `campaign equivalence`, console/equivalence.py). Here what every
view and `campaign evidence verify` need of it: for verify (docs/results.md) the
verdict re-derived from the bundle alone — its rows (tables/equivalence_measures) equal to the
document's checks, every audio hash equal to the bundled request's, byte identity re-derived from
those hashes, every tolerance the bundled plan's, every `passed` from value and tolerance, and the
verdict, its label and its named reasons from the rows (stats/equivalence.judge)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from console.evidence_steps import EvidenceMismatch
from console.verdicts.base import VerdictKind
from data.equivalence_rows import equivalence_problems
from data.store import Store

# the tolerance key each measure is judged against (a tensor row by its last part)
TOLERANCE_OF = {"length_diff": "max_length_diff", "max_abs": "max_abs", "snr_db": "min_snr_db",
                "log_mel_db": "max_log_mel_db", "tensor_max_abs": "tensor_max_abs", "max_rel": "tensor_max_rel",
                "cosine": "tensor_min_cosine"}


def _tolerance_key(measure: str) -> str | None:
    if measure.startswith("tensor:"):
        last = measure.rsplit(":", 1)[-1]
        return "tensor_max_abs" if last == "max_abs" else TOLERANCE_OF.get(last)
    return TOLERANCE_OF.get(measure)


def check_equivalence(store: Store, doc: dict[str, Any]) -> str:
    mismatch = EvidenceMismatch
    from data.plan_loading import plan_from_store
    from stats.equivalence import bound_holds, judge, measure_from_row

    vid = doc["verdict_id"]
    rows = doc.get("checks") or []
    problems, _ = equivalence_problems(store, only=vid, checks=rows)
    if problems:
        raise mismatch(problems[0])
    plan = plan_from_store(store, doc["plan"]["hash"])
    eq = plan.equivalence
    pair = next((p for p in (eq.pairs if eq else ()) if p.name == doc.get("name")), None)
    if pair is None:
        raise mismatch(f"verdict {vid}: the bundled plan {plan.hash[:12]} has no equivalence pair {doc.get('name')!r}")
    audio = {(r["run_id"], r["request_index"]): r["audio_sha256"]
             for r in store.query("SELECT run_id, request_index, audio_sha256 FROM requests")}
    for r in rows:
        where = f"verdict {vid} {r['utt_id']} r{r['repeat']} {r['measure']}"
        for arm in ("ref", "cand"):
            key = (r.get(f"{arm}_run_id"), r.get(f"{arm}_request_index"))
            if key[1] is not None and audio.get(key) != r.get(f"{arm}_audio_sha256"):
                raise mismatch(f"{where}: {arm} audio sha256 is not the bundled request's ({key[0]} #{key[1]})")
        if r["measure"] == "pcm_identical":
            same = r["ref_audio_sha256"] is not None and r["ref_audio_sha256"] == r["cand_audio_sha256"]
            if float(same) != r["value"]:
                raise mismatch(f"{where}: re-derived {float(same)} from the audio hashes, the document says {r['value']}")
        tkey = _tolerance_key(r["measure"])
        want = pair.tolerances.get(tkey) if tkey else None
        if tkey == "max_length_diff" and want is None:
            want = 0
        if r["tolerance"] != (None if want is None else float(want)):
            raise mismatch(f"{where}: tolerance {r['tolerance']} is not the frozen plan's {want}")
        m = measure_from_row(r)
        if r["measure"] not in ("output", "tensors", "pcm_identical", "samples_identical") and \
                bound_holds(m.measure, m.value, m.tolerance) != r["passed"]:
            raise mismatch(f"{where}: passed re-derived as {bound_holds(m.measure, m.value, m.tolerance)}, "
                           f"the document says {r['passed']}")
    result = judge([measure_from_row(r) for r in rows])
    for field, got in (("verdict", result.verdict), ("label", result.label), ("reasons", result.reasons)):
        if doc.get(field) != got:
            raise mismatch(f"verdict {vid}: {field} re-derived as {got!r}, the document says {doc.get(field)!r}")
    return f"{vid} {result.label}: {len(rows)} row(s), audio hashes, tolerances and the verdict re-derived"





class EquivalenceKind(VerdictKind):
    name: ClassVar[str] = "equivalence"

    def reverify(self, root: Path, store: Store, doc: dict[str, Any], seq: int) -> str:
        return check_equivalence(store, doc)

    def label(self, row: dict[str, Any]) -> str:
        """`PASS (bit-exact)` where every output was byte-identical."""
        return (json.loads(row.get("attribution_json") or "{}") or {}).get("label") or str(row["verdict"])

    def detail_lines(self, store: Store, row: dict[str, Any]) -> list[str]:
        """The worst distances; for a FAIL the measures that failed."""
        from console.equivalence import SHOWN, fmt, summary

        checks = json.loads(row.get("checks_json") or "[]")
        worst = summary(checks)
        text = ", ".join(f"{'min ' if m == 'snr_db' else 'max '}{m} {fmt(m, worst[m])}" for m in SHOWN)
        failed = sorted({c["measure"] for c in checks if c.get("passed") is False})
        return [text + (f"; failing measures: {', '.join(failed)}" if failed else "")]


KIND = EquivalenceKind()
