"""Seed-TTS text normalisation for WER.

Seed-TTS (`run_wer.py`) lower-cases, deletes punctuation except the apostrophe and collapses
spaces. Hand-written (jiwer's transforms do not know which unicode marks are apostrophes or
dashes) with these documented choices, applied identically to reference and hypothesis:

* NFKC first, so full-width letters and ligatures compare equal to ASCII.
* ``’ ‘ ʼ ′ ＇`` are apostrophes; an apostrophe survives only *inside* a word (``don't``,
  ``o'clock``); at a word edge it is a quote mark and goes (``'hello'`` -> ``hello``).
* Dashes of every kind (unicode category Pd: ``- ‐ – —``), the ellipsis (``…`` or ``...``) and ``/`` separate
  words, so ``well-known`` -> ``well known`` (Seed-TTS would write ``wellknown``; ASR
  systems disagree on hyphenation, splitting makes both spellings equal).
* Numbers are not spelled out. A ``,`` between digits (thousands separator) is dropped, a ``.``
  between digits (decimal point) is kept: ``1,000`` -> ``1000``, ``3.5`` -> ``3.5``.
* Every other punctuation or symbol character (unicode categories P* and S*) is deleted.
* Any run of whitespace becomes one space; leading/trailing space goes.
"""

from __future__ import annotations

import re
import unicodedata

APOSTROPHES = "'’‘ʼ′＇`´"
_SEPARATORS = {"/", "\\"}

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_DECIMAL = re.compile(r"(?<=\d)\.(?=\d)")
_DECIMAL_MARK = "\uE000"  # private-use placeholder that survives punctuation stripping
_ELLIPSIS = re.compile(r"…|\.{2,}")
_EDGE_APOSTROPHE = re.compile(r"(?<!\w)'+|'+(?!\w)")


def _char_class(ch: str) -> str:
    if ch in APOSTROPHES:
        return "'"
    if ch in _SEPARATORS:
        return " "
    cat = unicodedata.category(ch)
    if cat == "Pd":
        return " "
    if cat[0] in "PS":
        return ""
    if cat[0] == "Z" or ch.isspace():
        return " "
    return ch


def normalize_text(text: str) -> str:
    """Seed-TTS English normalisation (see module doc for the exact rules)."""
    s = _ELLIPSIS.sub(" ", text or "")  # before NFKC, which turns "…" into "..."
    s = unicodedata.normalize("NFKC", s)
    s = _THOUSANDS.sub("", s)
    s = _DECIMAL.sub(_DECIMAL_MARK, s)
    s = "".join(_char_class(ch) if ch != _DECIMAL_MARK else ch for ch in s)
    s = s.lower()
    s = _EDGE_APOSTROPHE.sub("", s)
    s = s.replace(_DECIMAL_MARK, ".")
    return " ".join(s.split())
