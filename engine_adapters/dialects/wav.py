"""WAV chunk decoding and encoding for WAV-per-delta streams.

Hand-written RIFF parsing (rather than soundfile on a BytesIO) because the driver decodes every
chunk on the timing path and must *reject* truncated or mislabelled chunks: libsndfile quietly
reads what it can from a short data chunk, which would hide a corrupt stream.
"""

from __future__ import annotations

import io
import struct
import wave
from dataclasses import dataclass

_PCM = 1
_EXTENSIBLE = 0xFFFE
_UNKNOWN_SIZES = (0xFFFFFFFF, 0x7FFFFFFF)  # streaming writers' "size not known" markers


class WavError(ValueError):
    """A chunk that is not a complete 16-bit mono PCM WAV."""


@dataclass(frozen=True)
class DecodedAudio:
    pcm: bytes  # s16le mono samples
    sample_rate: int

    @property
    def samples(self) -> int:
        return len(self.pcm) // 2


def decode_wav(data: bytes) -> DecodedAudio:
    """Decode one standalone WAV file (16-bit PCM, mono); raise WavError naming the defect."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise WavError("not a RIFF/WAVE file")
    pos = 12
    fmt: tuple[int, int, int, int] | None = None
    n = len(data)
    while pos + 8 <= n:
        cid = data[pos:pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body = pos + 8
        if cid == b"fmt ":
            if size < 16 or body + 16 > n:
                raise WavError("truncated fmt chunk")
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", data, body)
            if tag == _EXTENSIBLE and size >= 40 and body + 26 <= n:
                (tag,) = struct.unpack_from("<H", data, body + 24)
            fmt = (tag, channels, rate, bits)
        elif cid == b"data":
            if fmt is None:
                raise WavError("data chunk before fmt chunk")
            tag, channels, rate, bits = fmt
            if tag != _PCM or bits != 16:
                raise WavError(f"unsupported WAV encoding (format tag {tag}, {bits} bits); expected 16-bit PCM")
            if channels != 1:
                raise WavError(f"expected mono, got {channels} channels")
            if rate <= 0:
                raise WavError(f"invalid sample rate {rate}")
            end = n if size in _UNKNOWN_SIZES else body + size
            if end > n:
                raise WavError(f"truncated WAV: data chunk declares {size} bytes, {n - body} present")
            pcm = data[body:end]
            if len(pcm) % 2:
                raise WavError(f"odd number of PCM bytes ({len(pcm)}) in 16-bit WAV")
            return DecodedAudio(bytes(pcm), rate)
        pos = body + size + (size & 1)
    raise WavError("no data chunk" if fmt else "no fmt chunk")


def encode_wav(pcm: bytes, sample_rate: int) -> bytes:
    """A 16-bit mono WAV file holding `pcm` (s16le)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm)
    return buf.getvalue()
