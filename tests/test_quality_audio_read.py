"""stats.quality.audio.read_native: plain PCM16 / float32 WAVs are read without soundfile (one
file read, one conversion) and give exactly soundfile's samples; every other file goes to
soundfile, and a broken one is one AudioError line."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from stats.quality import audio


def _soundfile(path):
    data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    return (data[:, 0] if data.shape[1] == 1 else data.mean(axis=1)), sr


@pytest.mark.parametrize("subtype, channels, fmt", [
    ("PCM_16", 1, "WAV"), ("PCM_16", 2, "WAV"), ("PCM_16", 1, "WAVEX"), ("FLOAT", 1, "WAV"), ("FLOAT", 3, "WAV"),
    ("PCM_24", 1, "WAV"), ("PCM_32", 1, "WAV"), ("DOUBLE", 1, "WAV"), ("PCM_U8", 1, "WAV"), ("PCM_16", 1, "FLAC"),
])
def test_samples_equal_soundfiles_for_every_format(tmp_path, subtype, channels, fmt):
    rng = np.random.default_rng(3)
    wave = np.clip(0.4 * rng.standard_normal((24011, channels)), -1, 1).astype(np.float32)
    wave[0] = -1.0  # the int16 extremes too
    wave[1] = 32767 / 32768
    path = tmp_path / f"x.{'flac' if fmt == 'FLAC' else 'wav'}"
    sf.write(path, wave, 24000, subtype=subtype, format=fmt)
    want, want_sr = _soundfile(path)
    plain = subtype in ("PCM_16", "FLOAT") and fmt in ("WAV", "WAVEX")
    assert (audio._read_plain_wav(path, False) is not None) == plain
    got, sr = audio.read_native(path)
    assert sr == want_sr == 24000 and got.dtype == np.float32
    assert np.array_equal(got, want)


def test_extra_chunks_before_the_data_are_skipped(tmp_path):
    path = tmp_path / "list.wav"
    pcm = (np.arange(-500, 500, dtype=np.int16) * 31)
    fmt = b"fmt " + (16).to_bytes(4, "little") + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + \
        (16000).to_bytes(4, "little") + (32000).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    lst = b"LIST" + (5).to_bytes(4, "little") + b"INFOx" + b"\0"  # odd size, padded
    data = b"data" + (pcm.nbytes).to_bytes(4, "little") + pcm.tobytes()
    body = b"WAVE" + fmt + lst + data
    path.write_bytes(b"RIFF" + len(body).to_bytes(4, "little") + body)
    got, sr = audio.read_native(path)
    want, _ = _soundfile(path)
    assert sr == 16000 and np.array_equal(got, want) and audio._read_plain_wav(path, False) is not None


@pytest.mark.parametrize("content, needle", [
    (b"", "unreadable audio"),
    (b"not a wav at all", "unreadable audio"),
    (b"RIFF\x24\x00\x00\x00WAVEfmt ", "unreadable audio"),  # truncated header
])
def test_broken_files_are_one_line(tmp_path, content, needle):
    path = tmp_path / "bad.wav"
    path.write_bytes(content)
    with pytest.raises(audio.AudioError) as err:
        audio.read_native(path)
    assert needle in str(err.value) and "bad.wav" in str(err.value) and "\n" not in str(err.value)


def test_header_only_wav_is_empty(tmp_path):
    path = tmp_path / "empty.wav"
    sf.write(path, np.zeros((0, 1), np.float32), 24000, subtype="PCM_16")
    with pytest.raises(audio.AudioError, match="empty audio"):
        audio.read_native(path)


def test_truncated_data_chunk_reads_what_is_there_as_soundfile_does(tmp_path):
    path = tmp_path / "cut.wav"
    sf.write(path, (0.1 * np.random.default_rng(1).standard_normal(24000)).astype(np.float32), 24000,
             subtype="PCM_16")
    path.write_bytes(path.read_bytes()[:-1001])  # the header still declares the whole data chunk
    got, _ = audio.read_native(path)
    want, _ = _soundfile(path)
    assert len(got) == 23499 and np.array_equal(got, want)
