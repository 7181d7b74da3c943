"""Undecoded results into records: SSE framing, JSON, base64 and WAV decoding, outcome
classification, and the request's audio saved losslessly as FLAC with its SHA-256. This runs in
the parent process (DriverProcess's decode thread), never on the timing path (docs/timing.md).

Saved audio (docs/results.md, "Saved audio"): the request's 16-bit PCM as a FLAC file (soundfile,
subtype PCM_16: every reader gets back exactly the samples a WAV held), at
`<run>/<request>-<utt>.flac`. Identical files are stored once: each is a hard link to
`audio/<sha256[:2]>/<sha256>.flac`, so the same output of many repeats costs its bytes once.
Artifacts of older runs are WAV files; every reader reads both (stats/quality/audio.py)."""

from __future__ import annotations

import errno
import io
import os
import re
import threading
from pathlib import Path
from typing import Any

from data.hashing import sha256_bytes
from data.records import AudioFileRecord, ChunkRecord, RequestRecord
from engine_adapters.dialects import get_dialect
from engine_adapters.dialects.base import cut_detail
from engine_adapters.driver.results import RawResult
from engine_adapters.driver.spec import DriveSpec

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def decode_result(spec: DriveSpec, raw: RawResult) -> list[Any]:
    """Records for one sent request: decode its frames, classify its outcome (the first cause
    wins; an HTTP error status always wins), save its audio (FLAC) with SHA-256."""
    parser = get_dialect(spec.dialect).new_parser(spec.request_options)
    events = parser.feed_reads(raw.stamps, raw.chunks)
    if raw.overflow:
        parser.fail("decode_error", raw.overflow)
    if raw.clean_eof:
        events += parser.eof()
    st = parser.state
    outcome, detail = parser.outcome()
    if raw.failure is not None and (st.failure is None or raw.failure[0] == "http_status"):
        outcome, detail = raw.failure
        if outcome == "transport" and raw.stamps:  # the body broke after bytes had arrived
            detail = cut_detail(st.events, f"the connection ended after {sum(map(len, raw.chunks))} bytes ({detail})")
    rec = RequestRecord(
        run_id=spec.run_id, request_index=raw.index, utt_id=raw.utt_id, is_warmup=raw.is_warmup,
        outcome=outcome, t_send_ns=raw.t_send_ns, error_detail=detail, http_status=raw.http_status,
        t_first_byte_ns=raw.stamps[0] if raw.stamps else None, t_first_audio_ns=st.t_first_audio_ns,
        t_last_audio_ns=st.t_last_audio_ns, t_end_ns=raw.t_end_ns, audio_samples=st.samples,
        sample_rate=st.sample_rate, audio_chunks=st.audio_chunks, events=st.events,
        bytes_received=sum(map(len, raw.chunks)), text=st.text, finish_reason=st.finish_reason,
    )
    out: list[Any] = [rec]
    out += [ChunkRecord(spec.run_id, raw.index, k, e.t_arrival_ns, e.kind, e.samples, e.payload_bytes, e.server_emit_ns)
            for k, e in enumerate(events)]
    if st.samples and st.sample_rate:
        rel = audio_relpath(spec.run_id, raw.index, raw.utt_id)
        sha = store_audio(Path(spec.artifacts_dir), rel, encode_flac(b"".join(e.pcm for e in events if e.pcm),
                                                                     st.sample_rate))
        rec.audio_path, rec.audio_sha256 = rel, sha
        out.append(AudioFileRecord(sha, rel, spec.run_id, raw.index, st.sample_rate, st.samples))
    return out


def decode_batch(spec: DriveSpec, raws: list[RawResult]) -> list[Any]:
    out: list[Any] = []
    for r in raws:
        out += decode_result(spec, r)
    return out


AUDIO_SUFFIX = ".flac"
CONTENT_DIR = "audio"  # under the artifacts folder: one file per distinct content, by SHA-256


def audio_relpath(run_id: str, request_index: int, utt_id: str) -> str:
    return f"{_SAFE.sub('_', run_id)}/{request_index}-{_SAFE.sub('_', utt_id)}{AUDIO_SUFFIX}"


def encode_flac(pcm: bytes, rate: int) -> bytes:
    """16-bit mono PCM (s16le) as a FLAC file: lossless, so it decodes to exactly these samples."""
    import numpy as np
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.frombuffer(pcm, dtype="<i2"), rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all (a full disk leaves no partial file holding what room
    is left); a unique temporary name, so two writers of one path never meet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.part")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def store_audio(artifacts_dir: Path, rel: str, data: bytes) -> str:
    """Save an audio file's bytes at `artifacts_dir / rel`, returning their SHA-256. The bytes are
    stored once per content (`CONTENT_DIR`), `rel` a hard link to them; where the file system
    refuses a link, `rel` holds a copy."""
    sha = sha256_bytes(data)
    blob = artifacts_dir / CONTENT_DIR / sha[:2] / f"{sha}{Path(rel).suffix}"
    dest = artifacts_dir / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not blob.is_file():
        _write_atomic(blob, data)
    link = dest.with_name(f"{dest.name}.{os.getpid()}-{threading.get_ident()}.link")
    try:
        os.link(blob, link)
        os.replace(link, dest)
    except OSError as exc:
        link.unlink(missing_ok=True)
        if exc.errno not in (errno.EMLINK, errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        _write_atomic(dest, data)
    return sha
