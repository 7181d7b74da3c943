"""Loading stored WAVs for scorers: mono float32 at the scorer's rate (16 kHz for all of ours)."""

from __future__ import annotations

import contextvars
import os
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from struct import error as struct_error
from typing import Any, Callable, Iterator, Sequence, TypeVar

import numpy as np
import soundfile as sf
import soxr

from data.errors import first_line

SCORER_RATE = 16000


class AudioError(Exception):
    """A WAV cannot be read or holds no samples; becomes a scorer-error row, not a crash."""


NATIVE = "native"  # the resampler name under which the Prefetcher holds files read at their own rate


def load_audio(path: Path, rate: int = SCORER_RATE, resampler: str = "soxr") -> np.ndarray:
    """Read a WAV, mix to mono, resample to `rate`; float32.

    `soxr`: soxr HQ, clipped to [-1, 1] (the bundled scorers). `sinc`: the Hann-windowed sinc
    resampler the protocol's reference scripts use (stats.quality.resample), not clipped, so a
    protocol scorer sees the samples seed-tts-eval / SpeechMOS would. `fft`: scipy.signal.resample
    to int(n * rate / sr) samples in float64, as seed-tts-eval's run_wer.py feeds Whisper."""
    ahead = _PREFETCH.get()
    if ahead is not None and (loaded := ahead.take(path, rate, resampler)) is not None:
        return loaded.result()  # an AudioError raised on the worker re-raises here
    return _read(path, rate, resampler)


def load_native(path: Path) -> tuple[np.ndarray, int]:
    """(mono float32 samples, rate) at the file's own rate, for a scorer that resamples on its
    device (stats.quality.resample.resample_sinc_batch)."""
    ahead = _PREFETCH.get()
    if ahead is not None and (loaded := ahead.take(path, 0, NATIVE)) is not None:
        return loaded.result()
    return read_native(path)


def read_native(path: Path, pinned: bool = False) -> tuple[np.ndarray, int]:
    """(mono float32 samples, rate). `pinned`: the samples land straight in page-locked memory
    (torch's pinned host allocator), from which the device copies them without the CPU waiting;
    the returned array is a view that keeps that memory alive."""
    fast = _read_plain_wav(path, pinned)
    if fast is not None:
        return fast
    try:
        with sf.SoundFile(str(path)) as f:
            if f.frames <= 0:
                raise AudioError(f"empty audio {path}")
            data = f.read(f.frames, dtype="float32", always_2d=True, out=_buffer(f.frames, f.channels, pinned))
            sr = f.samplerate
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise AudioError(f"unreadable audio {path}: {first_line(exc)}") from None
    if data.shape[0] == 0:  # a header that promises frames the file does not hold
        raise AudioError(f"empty audio {path}")
    return _mono(data), int(sr)


def _read_plain_wav(path: Path, pinned: bool) -> tuple[np.ndarray, int] | None:
    """A 16-bit PCM or float32 WAV (what engines write) in one file read and one conversion;
    None for anything else, which soundfile then reads (and names the problem of).

    The samples equal soundfile's: int16 x 2**-15 is exact in float32, float32 is kept as is
    (tests/test_quality_audio_read.py). Why not soundfile here: it makes about twenty C calls per
    file, each giving up and retaking the GIL, and a device scorer's readers then queue behind the
    thread launching the model (docs/quality.md, "Throughput (session 6)")."""
    import io
    import warnings

    from scipy.io import wavfile

    try:
        raw = Path(path).read_bytes()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", wavfile.WavFileWarning)
            sr, data = wavfile.read(io.BytesIO(raw))
    except (OSError, ValueError, EOFError, struct_error):
        return None
    if data.dtype not in (np.int16, np.float32) or data.shape[0] == 0 or data.ndim > 2:
        return None
    src = data.reshape(data.shape[0], -1)
    out = _buffer(*src.shape, pinned)
    if data.dtype == np.int16:
        np.multiply(src, np.float32(2.0 ** -15), out=out, dtype=np.float32)
    else:
        out[...] = src
    return _mono(out), int(sr)


def _mono(data: np.ndarray) -> np.ndarray:
    """[frames, channels] -> [frames]: the only channel as is, else the channels' mean."""
    return data[:, 0] if data.shape[1] == 1 else data.mean(axis=1)


def _buffer(frames: int, channels: int, pinned: bool) -> np.ndarray:
    """float32 [frames, channels] to read into: page-locked when asked and CUDA is there."""
    if pinned:
        try:
            import torch
        except ImportError:
            torch = None  # type: ignore[assignment]
        if torch is not None and torch.cuda.is_available():
            return torch.empty((frames, channels), dtype=torch.float32, pin_memory=True).numpy()
    return np.empty((frames, channels), np.float32)


def _read(path: Path, rate: int, resampler: str) -> np.ndarray:
    mono, sr = read_native(path)
    if resampler == "sinc":
        from stats.quality.resample import resample_sinc
        return resample_sinc(mono, sr, rate)
    if resampler == "fft":
        if sr == rate:
            return mono
        from scipy.signal import resample
        return resample(mono.astype(np.float64), int(len(mono) * rate / sr)).astype(np.float32)
    if sr != rate:
        mono = soxr.resample(mono, sr, rate, quality="HQ").astype(np.float32)
    return np.clip(mono, -1.0, 1.0)


def load_each(paths: Sequence[Path], rate: int = SCORER_RATE,
              resampler: str = "soxr") -> tuple[list[np.ndarray | str], dict[int, np.ndarray]]:
    """`load_audio` per path, an unreadable file becoming its error text instead of failing the
    batch; also index -> waveform of those that loaded, which a scorer runs its model on."""
    return _each(paths, lambda p: load_audio(p, rate, resampler))


def load_each_native(paths: Sequence[Path]) -> tuple[list[tuple[np.ndarray, int] | str], dict[int, tuple[np.ndarray, int]]]:
    """`load_native` per path, as `load_each` does (an unreadable file becomes its error text)."""
    return _each(paths, load_native)


L = TypeVar("L")


def _each(paths: Sequence[Path], load: Callable[[Path], L]) -> tuple[list[L | str], dict[int, L]]:
    out: list[L | str] = []
    for path in paths:
        try:
            out.append(load(path))
        except AudioError as exc:
            out.append(str(exc))
    return out, {i: w for i, w in enumerate(out) if not isinstance(w, str)}


_PREFETCH: contextvars.ContextVar["Prefetcher | None"] = contextvars.ContextVar("audio_prefetch", default=None)


class Prefetcher:
    """Reads and resamples the next batch's WAVs on one worker thread while the model scores the
    current batch, so the device does not wait on file I/O (soundfile and torch's conv release the
    GIL). `load_audio` takes a prefetched result when one is pending for the same file, rate and
    resampler; the samples are exactly those `load_audio` would read itself.

    Each worker runs torch's CPU ops on one intra-op thread (a per-thread setting): the sinc
    resampler's small conv1d takes ~2 ms on one thread and far longer when many threads contend,
    and the workers parallelise over files instead."""

    def __init__(self, workers: int | None = None, pinned: bool = False) -> None:
        n = workers or min(4, max(1, (os.cpu_count() or 2) - 1))
        self.pinned = pinned  # native reads land in page-locked memory (a CUDA scorer's batches)
        self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="audio-prefetch",
                                        initializer=_one_torch_thread)
        self._pending: dict[tuple[str, int, str], Future[Any]] = {}

    def submit(self, paths: Sequence[Path | None], rate: int = SCORER_RATE, resampler: str = "soxr") -> None:
        for path in paths:
            key = _key(path, rate, resampler)
            if path is not None and key not in self._pending:
                self._pending[key] = (self._pool.submit(read_native, Path(path), self.pinned) if resampler == NATIVE
                                      else self._pool.submit(_read, Path(path), rate, resampler))

    def take(self, path: Path, rate: int, resampler: str) -> Future[Any] | None:
        return self._pending.pop(_key(path, rate, resampler), None)

    def forget(self, paths: Sequence[Path | None], rate: int = SCORER_RATE, resampler: str = "soxr") -> None:
        """Drop what a batch did not take (a file the scorer skipped), so nothing piles up."""
        for path in paths:
            fut = self._pending.pop(_key(path, rate, resampler), None)
            if fut is not None:
                fut.cancel()

    def close(self) -> None:
        for fut in self._pending.values():
            fut.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True)


def _key(path: Path | None, rate: int, resampler: str) -> tuple[str, int, str]:
    return str(path), 0 if resampler == NATIVE else rate, resampler  # a native read has no target rate


def _one_torch_thread() -> None:
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


@contextmanager
def prefetching(pinned: bool = False) -> Iterator[Prefetcher]:
    """Make a Prefetcher the one `load_audio` consults in this context (not in other threads)."""
    ahead = Prefetcher(pinned=pinned)
    token = _PREFETCH.set(ahead)
    try:
        yield ahead
    finally:
        _PREFETCH.reset(token)
        ahead.close()
