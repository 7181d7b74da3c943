"""Numerical equivalence of two engines' outputs for identical requests (docs/equivalence.md).

Pure functions of the decoded samples and dumped tensors: each measure is defined in
docs/equivalence.md with its units, and the verdict is a function of the per-utterance measures
and the plan's frozen tolerances only, so `campaign evidence verify` re-derives it from the
bundled rows. Signals are mono float64 in full-scale units (int16 / 32768).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
BIT_EXACT = "PASS (bit-exact)"  # how a PASS whose every output matched byte for byte is shown


# -- audio measures ---------------------------------------------------------------------------
def max_abs_diff(ref: np.ndarray, cand: np.ndarray) -> float:
    """max |cand - ref| over the common length (the first min(len) samples); 0.0 when it is 0."""
    n = min(len(ref), len(cand))
    if n == 0:
        return 0.0
    return float(np.max(np.abs(np.asarray(cand[:n], np.float64) - np.asarray(ref[:n], np.float64))))


def snr_db(ref: np.ndarray, cand: np.ndarray) -> float:
    """10 log10(sum ref^2 / sum (cand - ref)^2) over the common length, the reference as signal.
    No difference at all is +inf (bit-exact over that length); a silent reference with a
    non-zero difference is -inf."""
    n = min(len(ref), len(cand))
    r = np.asarray(ref[:n], np.float64)
    noise = float(np.sum((np.asarray(cand[:n], np.float64) - r) ** 2))
    signal = float(np.sum(r ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


@dataclass(frozen=True)
class MelParams:
    """The log-mel distance's parameters (docs/equivalence.md states them and why)."""

    n_fft: int = 1024
    hop: int = 256
    n_mels: int = 80
    fmin: float = 0.0
    fmax: float | None = None  # None: sample_rate / 2
    top_db: float = 80.0  # mel power is floored at the reference's maximum minus top_db (as librosa's power_to_db)
    floor: float = 1e-10  # absolute floor (-100 dB), for an all-silent reference


def hz_to_mel(f: np.ndarray | float) -> np.ndarray:
    """HTK mel scale: 2595 log10(1 + f / 700)."""
    return 2595.0 * np.log10(1.0 + np.asarray(f, np.float64) / 700.0)


def mel_to_hz(m: np.ndarray | float) -> np.ndarray:
    return 700.0 * (10.0 ** (np.asarray(m, np.float64) / 2595.0) - 1.0)


def mel_filterbank(sample_rate: int, p: MelParams) -> np.ndarray:
    """(n_mels, n_fft/2 + 1) triangular filters with peak 1, centres equally spaced in HTK mel
    between fmin and fmax (built with numpy: the project has no audio-feature dependency)."""
    fmax = p.fmax if p.fmax is not None else sample_rate / 2
    bins_hz = np.arange(p.n_fft // 2 + 1) * sample_rate / p.n_fft
    edges = mel_to_hz(np.linspace(hz_to_mel(p.fmin), hz_to_mel(fmax), p.n_mels + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins_hz[None, :] - lower) / (centre - lower)
    falling = (upper - bins_hz[None, :]) / (upper - centre)
    return np.maximum(0.0, np.minimum(rising, falling))


def mel_power(x: np.ndarray, sample_rate: int, p: MelParams) -> np.ndarray:
    """(frames, n_mels) mel power: periodic Hann window of n_fft, hop `hop`, no centring; a signal
    shorter than n_fft is zero-padded to one frame."""
    x = np.asarray(x, np.float64)
    if len(x) < p.n_fft:
        x = np.pad(x, (0, p.n_fft - len(x)))
    frames = np.lib.stride_tricks.sliding_window_view(x, p.n_fft)[:: p.hop]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(p.n_fft) / p.n_fft)
    spec = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    return spec @ mel_filterbank(sample_rate, p).T


def log_mel_distance(ref: np.ndarray, cand: np.ndarray, sample_rate: int, p: MelParams = MelParams()) -> float:
    """Mean over frames of the RMS over mel bands of 10 log10(max(M_cand, f) / max(M_ref, f)), in
    dB, over the common length; f = max(floor, max(M_ref) x 10^(-top_db/10)): differences more
    than top_db below the reference's loudest band are not counted (quantisation noise in silence
    would otherwise dominate a perceptual distance)."""
    n = min(len(ref), len(cand))
    raw_ref = mel_power(ref[:n], sample_rate, p)
    f = max(p.floor, float(raw_ref.max()) * 10.0 ** (-p.top_db / 10.0))
    mr = np.maximum(raw_ref, f)
    mc = np.maximum(mel_power(cand[:n], sample_rate, p), f)
    diff = 10.0 * (np.log10(mc) - np.log10(mr))
    return float(np.mean(np.sqrt(np.mean(diff ** 2, axis=1))))


# -- tensors ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorComparison:
    """One tensor name in one request: present in which arm(s), and how far apart."""

    name: str
    status: str  # ok, shape_mismatch, missing_in_candidate, missing_in_reference
    ref_shape: tuple[int, ...] | None = None
    cand_shape: tuple[int, ...] | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None


def cosine(ref: np.ndarray, cand: np.ndarray) -> float:
    """<ref, cand> / (|ref| |cand|); 1.0 when both are all zero, 0.0 when only one is."""
    r, c = np.ravel(ref).astype(np.float64), np.ravel(cand).astype(np.float64)
    nr, nc = float(np.linalg.norm(r)), float(np.linalg.norm(c))
    if nr == 0.0 and nc == 0.0:
        return 1.0
    if nr == 0.0 or nc == 0.0:
        return 0.0
    return float(np.dot(r, c) / (nr * nc))


def compare_tensor(name: str, ref: np.ndarray | None, cand: np.ndarray | None) -> TensorComparison:
    """max_abs = max |c - r|; max_rel = max_abs / max |r| (0 when both are 0, inf when only r is)."""
    if ref is None or cand is None:
        status = "missing_in_candidate" if cand is None else "missing_in_reference"
        return TensorComparison(name, status, None if ref is None else tuple(ref.shape),
                                None if cand is None else tuple(cand.shape))
    shapes = tuple(ref.shape), tuple(cand.shape)
    if shapes[0] != shapes[1]:
        return TensorComparison(name, "shape_mismatch", *shapes)
    r, c = ref.astype(np.float64), cand.astype(np.float64)
    m = float(np.max(np.abs(c - r))) if r.size else 0.0
    scale = float(np.max(np.abs(r))) if r.size else 0.0
    rel = 0.0 if m == 0.0 else (math.inf if scale == 0.0 else m / scale)
    return TensorComparison(name, "ok", *shapes, max_abs=m, max_rel=rel, cosine=cosine(r, c))


def compare_tensors(ref: Mapping[str, np.ndarray], cand: Mapping[str, np.ndarray]) -> list[TensorComparison]:
    """Every tensor name of either arm, by name, sorted."""
    return [compare_tensor(n, ref.get(n), cand.get(n)) for n in sorted(set(ref) | set(cand))]


# -- per-utterance measures and the verdict -----------------------------------------------------
AUDIO_MEASURES = ("pcm_identical", "samples_identical", "length_diff", "max_abs", "snr_db", "log_mel_db")
TOLERANCE_KEYS = ("max_length_diff", "max_abs", "min_snr_db", "max_log_mel_db",
                  "tensor_max_abs", "tensor_max_rel", "tensor_min_cosine")


@dataclass(frozen=True)
class Tolerances:
    """Frozen in the plan's `equivalence.tolerances` (docs/equivalence.md); a None bound is not checked."""

    max_length_diff: int = 0
    max_abs: float | None = None
    min_snr_db: float | None = None
    max_log_mel_db: float | None = None
    tensor_max_abs: float | None = None
    tensor_max_rel: float | None = None
    tensor_min_cosine: float | None = None


@dataclass(frozen=True)
class Output:
    """One arm's output for one (utterance, repeat): decoded samples, or why there are none."""

    audio_sha256: str | None
    samples: np.ndarray | None
    sample_rate: int | None
    error: str | None = None  # the request's failure, or why its audio could not be read
    tensors: dict[str, np.ndarray] | None = None  # None: no tensor folder for this request


@dataclass(frozen=True)
class Measure:
    """One stored row: a measure of one (utterance, repeat), its bound and whether it held."""

    utt_id: str
    repeat: int
    measure: str
    value: float | None
    tolerance: float | None
    passed: bool | None  # None: not judged (no bound, or inputs missing)
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"utt_id": self.utt_id, "repeat": self.repeat, "measure": self.measure,
                "value": json_number(self.value), "tolerance": self.tolerance, "passed": self.passed,
                "detail": self.detail}


def json_number(v: float | None) -> float | str | None:
    """JSON has no infinity: +inf / -inf are written as the strings "inf" / "-inf"."""
    if v is None or math.isfinite(v):
        return v
    return "inf" if v > 0 else "-inf"


def from_json_number(v: Any) -> float | None:
    if isinstance(v, str):
        return math.inf if v == "inf" else -math.inf
    return None if v is None else float(v)


def _bound(value: float, limit: float | None, upper: bool) -> bool | None:
    if limit is None:
        return None
    return value <= limit if upper else value >= limit


def audio_measures(utt: str, rep: int, ref: Output, cand: Output, tol: Tolerances,
                   mel: MelParams = MelParams()) -> list[Measure]:
    """The audio rows of one pair of outputs (both present and readable)."""
    assert ref.samples is not None and cand.samples is not None
    pcm = ref.audio_sha256 is not None and ref.audio_sha256 == cand.audio_sha256
    same_rate = ref.sample_rate == cand.sample_rate
    identical = same_rate and len(ref.samples) == len(cand.samples) and bool(np.array_equal(ref.samples, cand.samples))
    out = [Measure(utt, rep, "pcm_identical", float(pcm), None, None),
           Measure(utt, rep, "samples_identical", float(identical), None, None)]
    if not same_rate:
        return out + [Measure(utt, rep, "sample_rate", float(cand.sample_rate or 0), float(ref.sample_rate or 0), False,
                              f"candidate {cand.sample_rate} Hz, reference {ref.sample_rate} Hz")]
    d_len = float(len(cand.samples) - len(ref.samples))
    m = max_abs_diff(ref.samples, cand.samples)
    s = snr_db(ref.samples, cand.samples)
    lm = 0.0 if identical else log_mel_distance(ref.samples, cand.samples, int(ref.sample_rate or 0), mel)
    return out + [
        Measure(utt, rep, "length_diff", d_len, float(tol.max_length_diff), abs(d_len) <= tol.max_length_diff),
        Measure(utt, rep, "max_abs", m, tol.max_abs, _bound(m, tol.max_abs, True)),
        Measure(utt, rep, "snr_db", s, tol.min_snr_db, _bound(s, tol.min_snr_db, False)),
        Measure(utt, rep, "log_mel_db", lm, tol.max_log_mel_db, _bound(lm, tol.max_log_mel_db, True)),
    ]


def tensor_measures(utt: str, rep: int, comparisons: Sequence[TensorComparison], tol: Tolerances) -> list[Measure]:
    """Rows `tensor:<name>:<what>`; a tensor in one arm only, or of another shape, fails."""
    out: list[Measure] = []
    for c in comparisons:
        key = f"tensor:{c.name}"
        if c.status != "ok":
            out.append(Measure(utt, rep, f"{key}:present", 0.0, None, False,
                               f"{c.status} (reference {c.ref_shape}, candidate {c.cand_shape})"))
            continue
        assert c.max_abs is not None and c.max_rel is not None and c.cosine is not None
        out += [Measure(utt, rep, f"{key}:max_abs", c.max_abs, tol.tensor_max_abs, _bound(c.max_abs, tol.tensor_max_abs, True)),
                Measure(utt, rep, f"{key}:max_rel", c.max_rel, tol.tensor_max_rel, _bound(c.max_rel, tol.tensor_max_rel, True)),
                Measure(utt, rep, f"{key}:cosine", c.cosine, tol.tensor_min_cosine,
                        _bound(c.cosine, tol.tensor_min_cosine, False))]
    return out


def measure_pair(utt: str, rep: int, ref: Output, cand: Output, tol: Tolerances, tensors: bool,
                 mel: MelParams = MelParams()) -> list[Measure]:
    """Every row of one (utterance, repeat). A missing or failed output is one `output` row with
    passed None, which makes the verdict INCONCLUSIVE and names it."""
    missing = [f"{arm}: {o.error or 'no audio'}" for arm, o in (("reference", ref), ("candidate", cand))
               if o.error or o.samples is None]
    if missing:
        return [Measure(utt, rep, "output", None, None, None, "; ".join(missing))]
    rows = audio_measures(utt, rep, ref, cand, tol, mel)
    if tensors:
        if ref.tensors is None and cand.tensors is None:
            rows.append(Measure(utt, rep, "tensors", None, None, None, "neither arm dumped tensors"))
        else:
            rows += tensor_measures(utt, rep, compare_tensors(ref.tensors or {}, cand.tensors or {}), tol)
    return rows


@dataclass(frozen=True)
class EquivalenceResult:
    verdict: str  # PASS, FAIL or INCONCLUSIVE
    bit_exact: bool  # PASS and every output byte-identical
    measures: list[Measure]
    reasons: list[str] = field(default_factory=list)  # the worst failures, or what was missing

    @property
    def label(self) -> str:
        return BIT_EXACT if self.verdict == PASS and self.bit_exact else self.verdict


def _excess(m: Measure) -> float:
    """How far past its bound a failed measure is, in units of the bound (to name the worst)."""
    if m.value is None or m.tolerance is None:
        return math.inf
    if m.measure == "snr_db" or m.measure.endswith(":cosine"):
        return (m.tolerance - m.value) / max(abs(m.tolerance), 1e-12)
    return (abs(m.value) - m.tolerance) / max(abs(m.tolerance), 1e-12)


def judge(measures: Sequence[Measure], worst: int = 5) -> EquivalenceResult:
    """INCONCLUSIVE when any output is missing or failed (named); else FAIL when any bound is
    exceeded (the `worst` failures named, largest excess first); else PASS."""
    measures = list(measures)
    gaps = [m for m in measures if m.measure in ("output", "tensors")]
    failed = [m for m in measures if m.passed is False]
    if not measures:
        return EquivalenceResult(INCONCLUSIVE, False, measures, ["no outputs to compare"])
    if gaps:
        return EquivalenceResult(INCONCLUSIVE, False, measures,
                                 [f"{m.utt_id} r{m.repeat}: {m.detail}" for m in gaps])
    if failed:
        failed.sort(key=lambda m: (-_excess(m), m.utt_id, m.repeat, m.measure))
        return EquivalenceResult(FAIL, False, measures, [describe(m) for m in failed[:worst]]
                                 + ([f"... and {len(failed) - worst} more"] if len(failed) > worst else []))
    exact = all(m.value == 1.0 for m in measures if m.measure == "pcm_identical")
    return EquivalenceResult(PASS, exact, measures)


def describe(m: Measure) -> str:
    """'spk1-0003 r0: snr_db 12.3 (bound >= 40)' for a failed row."""
    upper = not (m.measure == "snr_db" or m.measure.endswith(":cosine"))
    bound = "" if m.tolerance is None else f" (bound {'<=' if upper else '>='} {m.tolerance:g})"
    value = "-" if m.value is None else f"{m.value:.6g}"
    return f"{m.utt_id} r{m.repeat}: {m.measure} {value}{bound}" + (f": {m.detail}" if m.detail else "")


# -- re-derivation from stored rows (campaign evidence verify) -----------------------------------
LOWER_BOUNDED = ("snr_db",)  # and every tensor ...:cosine row: value >= bound; the others value <= bound


def bound_holds(measure: str, value: float | None, tolerance: float | None) -> bool | None:
    """`passed` of a stored row, from its value and bound alone (the rule audio_measures and
    tensor_measures apply): None when not judged; the `present` and `sample_rate` rows fail."""
    if measure.endswith(":present") or measure == "sample_rate":
        return False
    if value is None or tolerance is None:
        return None
    if measure in LOWER_BOUNDED or measure.endswith(":cosine"):
        return value >= tolerance
    return (abs(value) if measure == "length_diff" else value) <= tolerance


def measure_from_row(row: Mapping[str, Any]) -> Measure:
    return Measure(str(row["utt_id"]), int(row["repeat"]), str(row["measure"]), from_json_number(row.get("value")),
                   None if row.get("tolerance") is None else float(row["tolerance"]), row.get("passed"),
                   str(row.get("detail") or ""))
