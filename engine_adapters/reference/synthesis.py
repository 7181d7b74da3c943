"""From (text, prompt voice, seed, profile) to the 24 kHz int16 waveform a request will stream.

The result depends only on those inputs -- never on timing, concurrency or what
was synthesised before -- which is the engine's determinism contract: a lossless
profile returns byte-identical audio for the same text, prompt and seed. Work here
is CPU-bound and runs on worker threads, never on the event loop.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

import numpy as np
import soundfile
import soxr

from engine_adapters.reference.espeak import EspeakSynth, VoiceParams
from engine_adapters.reference.profiles import OUTPUT_SAMPLE_RATE, SAMPLES_PER_FRAME, Profile
from engine_adapters.reference.voice import VoiceCatalog, analyze, match_voice

#: Voice used when a request has no prompt, or its prompt holds no measurable speech.
DEFAULT_VOICE = VoiceParams(voice="en-us+m3", rate=175, pitch=50, range=50)
MAX_PROMPT_S = 30.0  # longer prompts are analysed on their first 30 s

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PromptError(ValueError):
    """The voice prompt cannot be used (not audio, empty, ...); the request is malformed."""


@dataclass(frozen=True, slots=True)
class PromptAudio:
    """A decoded voice prompt: mono float samples, their rate and the digest of the file bytes."""

    samples: np.ndarray
    sample_rate: int
    digest: str

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


@dataclass(frozen=True, slots=True)
class Rendered:
    """A request's complete output waveform and how it was made."""

    samples: np.ndarray  # int16, mono, OUTPUT_SAMPLE_RATE
    voice: VoiceParams
    spoken_text: str  # the text actually spoken (a lossy profile may drop words)
    truncated: bool  # cut short: thinker text by max_tokens, or audio by the talker's frame limit
    # the stream's chunks already encoded for the wire, one per chunk (server.py fills it off the
    # event loop so that emitting a chunk is a concatenation and one write); () = not pre-rendered
    payloads: tuple[bytes, ...] = ()


class LruCache(Generic[K, V]):
    """Thread-safe LRU cache bounded by a total size (``size_of`` each value; default 1 per item)."""

    def __init__(self, capacity: int, size_of: Callable[[V], int] = lambda _: 1) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._capacity = capacity
        self._size_of = size_of
        self._used = 0
        self._lock = threading.Lock()

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = compute()  # outside the lock: two threads may compute the same pure value once each
        with self._lock:
            if key not in self._items:
                self._items[key] = value
                self._used += self._size_of(value)
            self._items.move_to_end(key)
            while self._used > self._capacity and len(self._items) > 1:
                _, evicted = self._items.popitem(last=False)
                self._used -= self._size_of(evicted)
        return value


def decode_prompt(wav_bytes: bytes) -> PromptAudio:
    """Decode a prompt audio file (any format libsndfile reads); :class:`PromptError` if unusable."""
    try:
        data, rate = soundfile.read(io.BytesIO(wav_bytes), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise PromptError(f"voice prompt is not a readable audio file ({exc})") from None
    if data.shape[0] == 0:
        raise PromptError("voice prompt audio has no samples")
    mono = data.mean(axis=1)[: int(MAX_PROMPT_S * rate)]
    return PromptAudio(samples=mono, sample_rate=int(rate), digest=hashlib.sha256(wav_bytes).hexdigest())


def stable_seed(*parts: object) -> int:
    """A 64-bit integer from the parts' text; unlike hash() it is identical across processes."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


CHARS_PER_TOKEN = 4  # the engine's token model: ceil(chars / 4), as in its usage figures


def text_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def cap_text(text: str, max_tokens: int | None) -> tuple[str, bool]:
    """The thinker's reply under a `max_tokens` limit: the longest whole-word prefix within
    max_tokens x 4 characters (a cut inside the first word if even that is longer), and whether
    it was cut (the real engines' finish_reason "length")."""
    if max_tokens is None or text_tokens(text) <= max_tokens:
        return text, False
    limit = max_tokens * CHARS_PER_TOKEN
    words, out = text.split(), ""
    for w in words:
        candidate = f"{out} {w}" if out else w
        if len(candidate) > limit:
            break
        out = candidate
    return (out or text[:limit]), True


def drop_words(text: str, rate: float, rng: np.random.Generator) -> str:
    """Remove each word with probability ``rate``, always keeping at least one word."""
    words = text.split()
    if rate <= 0 or len(words) < 2:
        return text
    keep = rng.random(len(words)) >= rate
    if not keep.any():
        keep[0] = True
    return " ".join(w for w, k in zip(words, keep) if k)


def to_output_rate(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """int16 samples resampled (soxr, deterministic) to the 24 kHz output rate."""
    if sample_rate == OUTPUT_SAMPLE_RATE:
        return samples.astype(np.int16, copy=False)
    y = soxr.resample(samples.astype(np.float32) / 32768.0, sample_rate, OUTPUT_SAMPLE_RATE, quality="HQ")
    return np.clip(np.round(y * 32768.0), -32768, 32767).astype(np.int16)


def lowpass_fir(cutoff_hz: float, taps: int = 255) -> np.ndarray:
    """Windowed-sinc low-pass FIR (Blackman window, unit DC gain) at the output rate."""
    n = np.arange(taps) - (taps - 1) / 2
    h = np.sinc(2 * cutoff_hz / OUTPUT_SAMPLE_RATE * n) * np.blackman(taps)
    return h / h.sum()


def degrade(samples: np.ndarray, band_hz: float, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    """Telephone-like damage: low-pass at ``band_hz`` and white noise at ``snr_db`` below the speech."""
    y = np.convolve(samples.astype(np.float64), lowpass_fir(band_hz), mode="same")
    active = np.abs(y) > 0.01 * (np.abs(y).max() or 1.0)
    speech_rms = float(np.sqrt(np.mean(y[active] ** 2))) if active.any() else 0.0
    noise = rng.standard_normal(len(y)) * speech_rms / (10 ** (snr_db / 20))
    return np.clip(np.round(y + noise), -32768, 32767).astype(np.int16)


def reduce_precision(samples: np.ndarray) -> np.ndarray:
    """The `precision` profile's output path: full-scale float samples rounded to float16 (11
    significant bits) and back to int16. Deterministic; samples above 2,048 in magnitude move
    by up to 8 LSB, smaller ones are exact, so the audio is close to but not bit-equal with
    the lossless profiles (docs/equivalence.md)."""
    half = (samples.astype(np.float32) / 32768.0).astype(np.float16)
    return np.clip(np.round(half.astype(np.float32) * 32768.0), -32768, 32767).astype(np.int16)


class Synthesizer:
    """Renders requests with espeak-ng, caching prompt voices and espeak output."""

    def __init__(self, espeak: EspeakSynth, catalog: VoiceCatalog, voice_cache_items: int = 4096,
                 speech_cache_bytes: int = 256 * 1024 * 1024) -> None:
        self._espeak = espeak
        self._catalog = catalog
        self._voices: LruCache[str, VoiceParams] = LruCache(voice_cache_items)
        # 256 MiB holds about 1,300 four-second utterances: a whole Seed-TTS test set.
        self._speech: LruCache[tuple[str, VoiceParams], np.ndarray] = LruCache(
            speech_cache_bytes, size_of=lambda a: a.nbytes)

    def voice_for(self, prompt: PromptAudio | None) -> VoiceParams:
        """espeak parameters matched to the prompt (cached by the prompt file's digest)."""
        if prompt is None:
            return DEFAULT_VOICE

        def compute() -> VoiceParams:
            try:
                features = analyze(prompt.samples, prompt.sample_rate)
            except ValueError:
                return DEFAULT_VOICE  # silent or unvoiced prompt: nothing to match
            return match_voice(features, self._catalog)

        return self._voices.get_or_compute(prompt.digest, compute)

    def speech(self, text: str, voice: VoiceParams) -> np.ndarray:
        """espeak output for (text, voice) at 24 kHz; read-only, shared between requests."""

        def compute() -> np.ndarray:
            out = to_output_rate(self._espeak.synthesize(text, voice), self._espeak.sample_rate)
            out.setflags(write=False)
            return out

        return self._speech.get_or_compute((text, voice), compute)

    def render(self, text: str, prompt: PromptAudio | None, seed: int, profile: Profile,
               max_tokens: int | None = None) -> Rendered:
        """The full waveform for one request (a pure function of the arguments): `max_tokens`
        caps the thinker's text, the profile's `max_audio_frames` the talker's audio."""
        text, truncated = cap_text(text, max_tokens)
        voice = self.voice_for(prompt)
        rng = np.random.default_rng(stable_seed(seed, text, prompt.digest if prompt else ""))
        spoken = drop_words(text, profile.lossy_word_drop, rng) if profile.lossy else text
        samples = self.speech(spoken, voice)
        if profile.lossy:
            samples = degrade(samples, profile.lossy_band_hz, profile.lossy_snr_db, rng)
        elif profile.reduced_precision:
            samples = reduce_precision(samples)
        max_frames = profile.max_audio_frames
        if len(samples) > max_frames * SAMPLES_PER_FRAME:
            samples = samples[: max_frames * SAMPLES_PER_FRAME]
            truncated = True
        return Rendered(samples=samples, voice=voice, spoken_text=spoken, truncated=truncated)
