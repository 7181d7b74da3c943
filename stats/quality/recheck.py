"""ASR determinism check: re-transcribe stored outputs and compare with the stored transcript.

Used when one prompt dominates a WER change: if a fresh transcription of the same WAV with the
same model reproduces the stored hypothesis, the errors belong to the audio, not to ASR noise.
Nothing stored is changed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from data.errors import CampaignError
from data.store import Store
from stats.quality.asr import AsrScorer
from stats.quality.audio import AudioError
from stats.quality.registry import BY_SCORER_ID, make_scorer
from stats.quality.scoring import resolve_audio
from stats.quality.wer import wer_counts


@dataclass(frozen=True)
class RecheckResult:
    run_id: str
    request_index: int
    utt_id: str
    scorer_id: str
    stored_hypothesis: str | None
    new_hypothesis: str | None
    stored_errors: int | None
    new_errors: int | None
    same_model: bool
    reproduces: bool
    note: str = ""


def recheck(store: Store, utt_ids: Sequence[str], *, run_id: str | None = None, scorer_ids: Sequence[str] = (),
            model_paths: Mapping[str, Any] | None = None, artifacts_dir: Path, device: str | None = None
            ) -> list[RecheckResult]:
    """Re-transcribe every stored WER row of the chosen utterances (optionally one run)."""
    marks = ", ".join("?" for _ in utt_ids)
    sql = (f"SELECT q.run_id, q.request_index, q.utt_id, q.scorer_id, q.model_hash, q.hypothesis, q.ref_norm, "
           f"q.wer_substitutions + q.wer_deletions + q.wer_insertions AS errors, r.audio_path "
           f"FROM quality_scores q JOIN requests r USING (run_id, request_index) "
           f"WHERE q.metric = 'wer' AND q.status = 'ok' AND q.utt_id IN ({marks})")
    params: list[Any] = list(utt_ids)
    if run_id:
        sql += " AND q.run_id = ?"
        params.append(run_id)
    if scorer_ids:
        sql += f" AND q.scorer_id IN ({', '.join('?' for _ in scorer_ids)})"
        params += list(scorer_ids)
    rows = store.query(sql + " ORDER BY q.scorer_id, q.run_id, q.request_index", params)
    if not rows:
        where = f" in run {run_id}" if run_id else ""
        raise CampaignError(f"--recheck: no stored WER scores for {', '.join(utt_ids)}{where}")
    out: list[RecheckResult] = []
    for sid in sorted({r["scorer_id"] for r in rows}):
        cls = BY_SCORER_ID.get(sid)
        if cls is None:
            raise CampaignError(f"--recheck: stored scorer id {sid!r} is not a known scorer")
        scorer = make_scorer(cls.name, model_paths, device=device)
        ok, why = scorer.available()
        if not ok:
            raise CampaignError(f"--recheck: scorer {cls.name}: unavailable: {why}")
        assert isinstance(scorer, AsrScorer)
        mine = [r for r in rows if r["scorer_id"] == sid]
        try:
            texts = scorer.transcribe_paths([resolve_audio(artifacts_dir, r["audio_path"] or "") for r in mine])
            for r, t in zip(mine, texts):
                same_model = r["model_hash"] == scorer.model_hash
                if isinstance(t, AudioError):
                    out.append(RecheckResult(r["run_id"], r["request_index"], r["utt_id"], sid, r["hypothesis"], None,
                                             r["errors"], None, same_model, False, str(t)))
                    continue
                new_errors = wer_counts(r["ref_norm"] or "", t).errors
                note = "" if same_model else "model files differ from the stored scores' model"
                out.append(RecheckResult(r["run_id"], r["request_index"], r["utt_id"], sid, r["hypothesis"], t,
                                         r["errors"], new_errors, same_model, t == (r["hypothesis"] or ""), note))
        finally:
            scorer.close()
    return out
