"""Voice "cloning" for the reference engine: measure a prompt wav, pick espeak parameters to match.

The engine cannot clone a voice, but a speaker-similarity scorer must still see
different prompt speakers come out as different voices. So the prompt is reduced
to four measurable properties -- median pitch, pitch spread, syllable rate and
timbre (mean MFCC over voiced frames) -- and every candidate espeak variant is
measured the same way at start-up (:func:`calibrate`). :func:`match_voice` then
picks the variant with the nearest timbre that can reach the prompt's pitch and
sets espeak's pitch, range and rate so the output lands on the prompt's numbers.
Everything here is a pure function of its inputs, so matching is deterministic.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import espeakng_loader
import numpy as np
import soxr

from engine_adapters.reference import espeak as espeak_module
from engine_adapters.reference.espeak import EspeakSynth, VoiceParams

ANALYSIS_RATE = 16_000
_FRAME = 640  # 40 ms analysis window
_HOP = 160  # 10 ms hop
_PITCH_RATE = 8_000
_PITCH_FRAME = 400  # 50 ms at 8 kHz: room for a 55 Hz period plus a comparison window
_F0_MIN, _F0_MAX = 55.0, 500.0
_YIN_THRESHOLD = 0.15
_N_MELS = 40
_N_MFCC = 13  # c0..c12; c0 (loudness) is dropped from the timbre vector

#: Variants offered for matching: human-sounding espeak voices spanning low male to high female.
DEFAULT_VARIANTS: tuple[str, ...] = (
    "m1", "m2", "m3", "m4", "m6", "m7", "f1", "f2", "f3", "f4", "f5",
    "Andy", "Annie", "Alicia", "Andrea", "belinda", "linda", "steph", "david", "john",
    "michel", "norbert", "paul", "quincy", "robert", "travis", "victor", "iven", "shelby",
)

#: Sentence spoken by each variant during calibration. Syllable-rate and pitch-spread
#: measurements depend on the text (about +-10 % across sentences); this one sits near
#: the median of a set of everyday sentences, so prompts are not systematically biased.
CALIBRATION_TEXT = "The museum opens at nine, but the guided tours only start after lunch."
_CAL_PITCH_LOW, _CAL_PITCH_HIGH = 20, 80
_CAL_RATE = 175
_CAL_RANGE = 50
_RATE_RATIO_MIN, _RATE_RATIO_MAX = 0.7, 1.4
_SPREAD_RATIO_MIN, _SPREAD_RATIO_MAX = 0.4, 2.5


@dataclass(frozen=True, slots=True)
class VoiceFeatures:
    """What the matcher knows about a voice; all fields are NaN-free when ``voiced_s > 0``."""

    f0_median_hz: float
    f0_spread_st: float  # inter-quartile range of voiced F0, in semitones
    syllable_rate: float  # energy peaks (syllable nuclei) per second of speech
    timbre: tuple[float, ...]  # mean MFCC c1..c12 over voiced frames
    voiced_s: float
    speech_s: float


@dataclass(frozen=True, slots=True)
class VariantCalibration:
    """One espeak variant measured at two pitch settings, the default rate and range."""

    voice: str
    f0_low_hz: float  # median F0 at espeak pitch _CAL_PITCH_LOW
    f0_high_hz: float  # median F0 at espeak pitch _CAL_PITCH_HIGH
    f0_spread_st: float
    syllable_rate: float
    timbre: tuple[float, ...]

    def pitch_for(self, f0_hz: float) -> float:
        """espeak pitch setting (unclamped) expected to give median F0 ``f0_hz`` (linear in log F0)."""
        lo, hi = math.log(self.f0_low_hz), math.log(self.f0_high_hz)
        if hi - lo < 1e-6:
            return 50.0
        frac = (math.log(f0_hz) - lo) / (hi - lo)
        return _CAL_PITCH_LOW + frac * (_CAL_PITCH_HIGH - _CAL_PITCH_LOW)


@dataclass(frozen=True, slots=True)
class VoiceCatalog:
    """Calibrated variants for one espeak language, the input to :func:`match_voice`."""

    language: str
    variants: tuple[VariantCalibration, ...]


def to_analysis_rate(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """Mono float64 in [-1, 1] at :data:`ANALYSIS_RATE`."""
    x = np.asarray(samples)
    if x.ndim > 1:
        x = x.mean(axis=1)
    if x.dtype == np.int16:
        x = x.astype(np.float64) / 32768.0
    else:
        x = x.astype(np.float64)
    if sample_rate != ANALYSIS_RATE:
        x = soxr.resample(x, sample_rate, ANALYSIS_RATE, quality="HQ")
    return x


def _frames(x: np.ndarray, length: int) -> np.ndarray:
    if len(x) < length:
        x = np.pad(x, (0, length - len(x)))
    n = 1 + (len(x) - length) // _HOP
    return np.lib.stride_tricks.sliding_window_view(x, length)[::_HOP][:n]


def yin_f0(x: np.ndarray) -> np.ndarray:
    """Per-10-ms-hop F0 in Hz (NaN where unvoiced) with the YIN difference function.

    YIN rather than plain autocorrelation because it rarely jumps an octave down,
    and the median pitch drives the whole match. Runs at 8 kHz, which is plenty for
    F0 below 500 Hz and four times cheaper.
    """
    rate = _PITCH_RATE
    y = soxr.resample(x, ANALYSIS_RATE, rate, quality="HQ")
    hop = _HOP * rate // ANALYSIS_RATE
    frame = _PITCH_FRAME
    tau_min = int(rate / _F0_MAX)
    tau_max = int(rate / _F0_MIN)
    win = frame - tau_max  # comparison window; a frame holds win + tau_max samples
    if len(y) < frame:
        y = np.pad(y, (0, frame - len(y)))
    frames = np.lib.stride_tricks.sliding_window_view(y, frame)[::hop]
    level = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    loud = level > level.max() - 35.0
    n_fft = 2 * frame
    spec = np.fft.rfft(frames, n_fft, axis=1)
    ref = np.fft.rfft(frames[:, :win], n_fft, axis=1)
    # cross[t] = sum_{j < win} y[j] * y[j + t]
    cross = np.fft.irfft(np.conj(ref) * spec, n_fft, axis=1)[:, : tau_max + 1]
    sq = np.concatenate([np.zeros((len(frames), 1)), np.cumsum(frames**2, axis=1)], axis=1)
    taus = np.arange(tau_max + 1)
    diff = np.maximum(sq[:, win][:, None] + sq[:, taus + win] - sq[:, taus] - 2 * cross, 0.0)
    cmnd = np.ones_like(diff)
    cmnd[:, 1:] = diff[:, 1:] * taus[1:] / np.maximum(np.cumsum(diff[:, 1:], axis=1), 1e-12)
    search = cmnd[:, tau_min:tau_max]
    below = search < _YIN_THRESHOLD
    voiced = loud & below.any(axis=1)
    first = np.argmax(below, axis=1) + tau_min
    f0 = np.full(len(frames), np.nan)
    for i in np.nonzero(voiced)[0]:
        row = cmnd[i]
        t = int(first[i])
        while t + 1 < tau_max and row[t + 1] < row[t]:
            t += 1
        a, b, c = row[t - 1], row[t], row[t + 1]
        denom = a - 2 * b + c
        shift = 0.5 * (a - c) / denom if abs(denom) > 1e-12 else 0.0
        f0[i] = rate / (t + float(np.clip(shift, -1.0, 1.0)))
    return f0


def _mel_filterbank(n_fft: int) -> np.ndarray:
    def hz_to_mel(f: np.ndarray | float) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    mels = np.linspace(hz_to_mel(60.0), hz_to_mel(7600.0), _N_MELS + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = np.fft.rfftfreq(n_fft, 1.0 / ANALYSIS_RATE)
    bank = np.zeros((_N_MELS, len(bins)))
    for m in range(_N_MELS):
        lo, mid, hi = hz[m], hz[m + 1], hz[m + 2]
        rising = (bins - lo) / (mid - lo)
        falling = (hi - bins) / (hi - mid)
        bank[m] = np.maximum(0.0, np.minimum(rising, falling))
    return bank


_MEL_BANK = _mel_filterbank(512)


def _dct_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Orthonormal DCT-II as a matrix (rows = output coefficients)."""
    k = np.arange(n_out)[:, None]
    n = np.arange(n_in)[None, :]
    m = np.cos(np.pi * k * (2 * n + 1) / (2 * n_in)) * math.sqrt(2.0 / n_in)
    m[0] /= math.sqrt(2.0)
    return m


_DCT = _dct_matrix(_N_MELS, _N_MFCC)


def _power_spectrogram(x: np.ndarray) -> np.ndarray:
    frames = _frames(x, 400) * np.hanning(400)
    return np.abs(np.fft.rfft(frames, 512, axis=1)) ** 2


def mfcc(x: np.ndarray) -> np.ndarray:
    """MFCC c0..c12 per 10 ms hop (25 ms Hann window, 40 mel bands)."""
    logmel = np.log(_power_spectrogram(x) @ _MEL_BANK.T + 1e-10)
    return logmel @ _DCT.T


def find_peaks(y: np.ndarray, height: float, prominence: float, distance: int) -> np.ndarray:
    """Indices of local maxima at least ``height`` high, ``distance`` apart and ``prominence`` above
    the higher of their two surrounding valleys (the usual definitions, as in scipy.signal)."""
    inner = np.nonzero((y[1:-1] > y[:-2]) & (y[1:-1] >= y[2:]))[0] + 1
    inner = inner[y[inner] >= height]
    kept: list[int] = []
    for i in inner[np.argsort(-y[inner], kind="stable")]:
        if all(abs(int(i) - k) >= distance for k in kept):
            kept.append(int(i))
    out = []
    for i in sorted(kept):
        left = i
        while left > 0 and y[left - 1] <= y[i]:
            left -= 1
        right = i
        while right < len(y) - 1 and y[right + 1] <= y[i]:
            right += 1
        base = max(float(y[left:i + 1].min()), float(y[i:right + 1].min()))
        if y[i] - base >= prominence:
            out.append(i)
    return np.array(out, dtype=int)


def syllable_rate(x: np.ndarray) -> tuple[float, float]:
    """(syllable nuclei per speech second, speech seconds) from peaks of 300-2500 Hz energy."""
    bins = np.fft.rfftfreq(512, 1.0 / ANALYSIS_RATE)
    band = (bins >= 300.0) & (bins <= 2500.0)
    level = 10 * np.log10(_power_spectrogram(x)[:, band].sum(axis=1) + 1e-10)
    smooth = np.convolve(level, np.ones(5) / 5.0, mode="same")
    top = smooth.max()
    speech = smooth > top - 30.0
    speech_s = float(speech.sum()) * _HOP / ANALYSIS_RATE
    if speech_s <= 0:
        return 0.0, 0.0
    peaks = find_peaks(smooth, height=top - 25.0, prominence=4.0, distance=8)
    return len(peaks) / speech_s, speech_s


def analyze(samples: np.ndarray, sample_rate: int) -> VoiceFeatures:
    """Measure pitch, pitch spread, syllable rate and timbre of a speech recording."""
    x = to_analysis_rate(samples, sample_rate)
    if len(x) < _FRAME or float(np.max(np.abs(x))) < 1e-4:
        raise ValueError("prompt audio is too short or silent to measure a voice")
    f0 = yin_f0(x)
    voiced = ~np.isnan(f0)
    if voiced.sum() < 5:
        raise ValueError("prompt audio has no measurable voiced speech")
    semitones = 12 * np.log2(f0[voiced])
    q1, q3 = np.percentile(semitones, [25, 75])
    ceps = mfcc(x)
    n = min(len(ceps), len(voiced))
    timbre = ceps[:n][voiced[:n]][:, 1:].mean(axis=0)
    rate, speech_s = syllable_rate(x)
    return VoiceFeatures(
        f0_median_hz=float(np.median(f0[voiced])),
        f0_spread_st=float(q3 - q1),
        syllable_rate=rate,
        timbre=tuple(float(v) for v in timbre),
        voiced_s=float(voiced.sum()) * _HOP / ANALYSIS_RATE,
        speech_s=speech_s,
    )


def calibrate(synth: EspeakSynth, language: str = "en-us",
              variants: tuple[str, ...] = DEFAULT_VARIANTS) -> VoiceCatalog:
    """Measure each variant with the same analysis used on prompts (about 30 ms per variant)."""
    measured = []
    for variant in variants:
        voice = f"{language}+{variant}"
        low = analyze(synth.synthesize(CALIBRATION_TEXT, VoiceParams(voice, _CAL_RATE, _CAL_PITCH_LOW, _CAL_RANGE)),
                      synth.sample_rate)
        high = analyze(synth.synthesize(CALIBRATION_TEXT, VoiceParams(voice, _CAL_RATE, _CAL_PITCH_HIGH, _CAL_RANGE)),
                       synth.sample_rate)
        measured.append(VariantCalibration(
            voice=voice,
            f0_low_hz=low.f0_median_hz,
            f0_high_hz=high.f0_median_hz,
            f0_spread_st=(low.f0_spread_st + high.f0_spread_st) / 2,
            syllable_rate=(low.syllable_rate + high.syllable_rate) / 2,
            timbre=tuple((np.array(low.timbre) + np.array(high.timbre)) / 2),
        ))
    return VoiceCatalog(language=language, variants=tuple(measured))


def _pitch_penalty(cal: VariantCalibration, f0_hz: float) -> float:
    """Semitones by which ``f0_hz`` lies outside what the variant reaches on espeak's 0..99 scale."""
    lo = cal.f0_low_hz * (cal.f0_high_hz / cal.f0_low_hz) ** ((0 - _CAL_PITCH_LOW) / (_CAL_PITCH_HIGH - _CAL_PITCH_LOW))
    hi = cal.f0_low_hz * (cal.f0_high_hz / cal.f0_low_hz) ** ((99 - _CAL_PITCH_LOW) / (_CAL_PITCH_HIGH - _CAL_PITCH_LOW))
    if f0_hz < lo:
        return 12 * math.log2(lo / f0_hz)
    if f0_hz > hi:
        return 12 * math.log2(f0_hz / hi)
    return 0.0


def match_voice(features: VoiceFeatures, catalog: VoiceCatalog) -> VoiceParams:
    """espeak parameters whose output best resembles the measured prompt voice."""
    target = np.array(features.timbre)

    def cost(cal: VariantCalibration) -> tuple[float, str]:
        timbre_distance = float(np.linalg.norm(target - np.array(cal.timbre)))
        return timbre_distance + 2.0 * _pitch_penalty(cal, features.f0_median_hz), cal.voice

    best = min(catalog.variants, key=cost)
    pitch = best.pitch_for(features.f0_median_hz)
    rate_ratio = features.syllable_rate / best.syllable_rate if best.syllable_rate > 0 else 1.0
    spread_ratio = features.f0_spread_st / best.f0_spread_st if best.f0_spread_st > 0 else 1.0
    # Both ratios are noisy on a 2-4 s prompt (text-dependent by +-10-30 %), so they are
    # clamped, and the pitch-range ratio is damped (square root) before use.
    rate = _CAL_RATE * min(_RATE_RATIO_MAX, max(_RATE_RATIO_MIN, rate_ratio))
    spread = _CAL_RANGE * math.sqrt(min(_SPREAD_RATIO_MAX, max(_SPREAD_RATIO_MIN, spread_ratio)))
    return VoiceParams(voice=best.voice, rate=round(rate), pitch=round(pitch), range=round(spread)).clamped()


CACHE_ENV = "REFERENCE_ENGINE_CACHE_DIR"


def _cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "omni-campaign-console"


def _calibration_key(language: str, variants: tuple[str, ...]) -> str:
    """Digest of everything a calibration depends on: this code, the synthesiser, the library, the inputs."""
    h = hashlib.sha256()
    for source in (Path(__file__), Path(espeak_module.__file__), Path(espeakng_loader.get_library_path())):
        h.update(source.read_bytes())
    h.update(json.dumps([language, list(variants), CALIBRATION_TEXT, _CAL_PITCH_LOW, _CAL_PITCH_HIGH,
                         _CAL_RATE, _CAL_RANGE]).encode())
    return h.hexdigest()[:32]


def calibrate_cached(synth: EspeakSynth, language: str = "en-us",
                     variants: tuple[str, ...] = DEFAULT_VARIANTS) -> VoiceCatalog:
    """:func:`calibrate`, remembered on disk so engine start-up takes a fraction of a second.

    The cache key covers this module's and the synthesiser's source and the espeak
    library bytes, so any change that could alter a measurement recalibrates. An
    unwritable cache directory only costs the recalibration.
    """
    path = _cache_dir() / f"reference-voices-{_calibration_key(language, variants)}.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return VoiceCatalog(language=raw["language"], variants=tuple(
            VariantCalibration(**{**v, "timbre": tuple(v["timbre"])}) for v in raw["variants"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    catalog = calibrate(synth, language, variants)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"language": catalog.language,
                                   "variants": [dataclasses.asdict(v) for v in catalog.variants]}),
                       encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
    return catalog
