"""ctypes binding to the libespeak-ng shipped by the ``espeakng-loader`` wheel.

Two properties of the C library shape this module:

* it keeps global state (one voice, one callback), so every call goes through one
  lock; callers that must not block (the server's event loop) run
  :meth:`EspeakSynth.synthesize` in a worker thread (ctypes releases the GIL while
  the C code runs);
* its output depends on the *history* of the process (pitch flutter phase, echo
  buffer and PRNG state carry over between utterances), which would break the
  engine's determinism contract. So each utterance runs in a freshly loaded copy of
  the library: load, initialise, seed, speak, terminate, unload. That costs under a
  millisecond and makes the samples a pure function of (text, voice parameters).
"""

from __future__ import annotations

import _ctypes
import ctypes
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import espeakng_loader

# Constants from espeak-ng's speak_lib.h.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_PARAM_RATE = 1
_PARAM_VOLUME = 2
_PARAM_PITCH = 3
_PARAM_RANGE = 4
_PARAM_WORDGAP = 7
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_EE_OK = 0
_RAND_SEED = 1

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class EspeakError(RuntimeError):
    """espeak-ng refused an operation (missing data, unknown voice, ...)."""


@dataclass(frozen=True, slots=True)
class VoiceParams:
    """Everything that determines espeak's output for a text; hashable so it can key a cache.

    ``voice`` is an espeak voice name such as ``en-us+f3`` (language + variant);
    ``rate`` is words per minute (80..450), ``pitch`` and ``range`` are espeak's
    0..99 scales, ``word_gap`` is extra silence between words in units of 10 ms.
    """

    voice: str = "en-us"
    rate: int = 175
    pitch: int = 50
    range: int = 50
    word_gap: int = 0

    def clamped(self) -> "VoiceParams":
        """The same voice with every number inside the range espeak accepts."""
        return VoiceParams(
            voice=self.voice,
            rate=int(min(450, max(80, self.rate))),
            pitch=int(min(99, max(0, self.pitch))),
            range=int(min(99, max(0, self.range))),
            word_gap=int(min(50, max(0, self.word_gap))),
        )


def _bind(lib: ctypes.CDLL) -> None:
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
    lib.espeak_Synth.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
        ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
    ]


class EspeakSynth:
    """Thread-safe, history-free espeak-ng synthesiser (16-bit mono PCM at :attr:`sample_rate`)."""

    _shared: "EspeakSynth | None" = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._library_path = espeakng_loader.get_library_path()
        # espeak_Initialize wants the directory that *contains* espeak-ng-data.
        self._data_parent = str(Path(espeakng_loader.get_data_path()).parent).encode()
        self._chunks: list[np.ndarray] = []
        # Keep a reference: ctypes frees a callback trampoline when its Python object dies.
        self._callback = _CALLBACK(self._on_audio)
        with self._lock:
            lib = self._load()
            try:
                self.sample_rate: int = self._initialize(lib)
            finally:
                self._unload(lib)

    @classmethod
    def shared(cls) -> "EspeakSynth":
        """The process-wide instance (the C library has one global state)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def _load(self) -> ctypes.CDLL:
        lib = ctypes.CDLL(self._library_path)
        _bind(lib)
        return lib

    def _initialize(self, lib: ctypes.CDLL) -> int:
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, self._data_parent, 0)
        if rate <= 0:
            raise EspeakError(f"espeak_Initialize failed (data under {self._data_parent.decode()})")
        lib.espeak_SetSynthCallback(self._callback)
        return rate

    @staticmethod
    def _unload(lib: ctypes.CDLL) -> None:
        lib.espeak_Terminate()
        _ctypes.dlclose(lib._handle)

    def _on_audio(self, wav, numsamples, _events) -> int:  # noqa: ANN001 - ctypes signature
        if numsamples > 0 and wav:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(numsamples,)).copy())
        return 0

    def synthesize(self, text: str, params: VoiceParams) -> np.ndarray:
        """Speak ``text`` with ``params``; returns int16 samples at :attr:`sample_rate`."""
        p = params.clamped()
        encoded = text.encode("utf-8") + b"\0"
        with self._lock:
            lib = self._load()
            try:
                self._initialize(lib)
                if lib.espeak_SetVoiceByName(p.voice.encode()) != _EE_OK:
                    raise EspeakError(f"espeak-ng has no voice named {p.voice!r}")
                for param, value in (
                    (_PARAM_RATE, p.rate), (_PARAM_PITCH, p.pitch), (_PARAM_RANGE, p.range),
                    (_PARAM_WORDGAP, p.word_gap), (_PARAM_VOLUME, 100),
                ):
                    lib.espeak_SetParameter(param, value, 0)
                lib.espeak_ng_SetRandSeed(_RAND_SEED)
                self._chunks = []
                buf = ctypes.create_string_buffer(encoded, len(encoded))
                err = lib.espeak_Synth(buf, len(encoded), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
                if err != _EE_OK:
                    raise EspeakError(f"espeak_Synth failed with code {err}")
                lib.espeak_Synchronize()
                chunks, self._chunks = self._chunks, []
            finally:
                self._unload(lib)
        if not chunks:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(chunks).astype(np.int16, copy=False)
