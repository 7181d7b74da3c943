"""The `pocketsphinx-domain` scorer's language model and dictionary, built from a workload's texts.

A pure, deterministic function of the texts (and of pocketsphinx's bundled cmudict): the same
texts give byte-identical files, whose SHA-256s are the scorer's model identity. Why an n-gram
LM with backoff rather than a grammar of the sentences: a grammar admits only whole sentences, so
it would put a dropped word back and hide the error; a backoff LM still reaches every word
sequence of the vocabulary (at a cost), so a deletion stays a deletion (docs/quality.md,
"pocketsphinx-domain").

* Words: the texts normalised as WER normalises them (`stats.quality.text.normalize_text`), so a
  hypothesis word is spelled as the reference's.
* LM: interpolated absolute discounting (discount `D`) of order `ORDER`, written as ARPA: a
  seen n-gram's probability is `max(c - D, 0) / c(h) + bow(h) * p(w | h')` with
  `bow(h) = D * N1+(h.) / c(h)`; an unseen one backs off with `bow(h)`. Unigrams are maximum
  likelihood over the words and `</s>` (the vocabulary is closed: it is the texts' words).
* Dictionary: every pronunciation cmudict gives the word; a word cmudict lacks takes the entry of
  its American spelling when one of `SPELLING_RULES` gives a cmudict word (`organised` ->
  `organized`: espeak's en-us voices say them alike); a word with neither stays out of the
  dictionary and the LM (the decoder cannot emit it, so it always counts as an error; the
  sentence is split there, so no n-gram spans it) and is listed in `DomainModel.missing`.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from stats.quality.text import normalize_text

ORDER = 3
DISCOUNT = 0.5
BOS, EOS = "<s>", "</s>"
# British -> American spellings, tried in order on a word cmudict lacks (first cmudict hit wins)
SPELLING_RULES: tuple[tuple[str, str], ...] = (
    (r"is(e|ed|es|ing|ation|ations)$", r"iz\1"), (r"yse(d|s)?$", r"yze\1"), (r"our(s|ed|ing|ite|ites|able)?$", r"or\1"),
    (r"tre(s)?$", r"ter\1"), (r"ogue(s)?$", r"og\1"), (r"ll(ed|ing|er|ers)$", r"l\1"), (r"ence$", r"ense"))


@dataclass(frozen=True)
class DomainModel:
    """The files' contents and what the dictionary could not pronounce."""
    arpa: str
    dictionary: str
    words: tuple[str, ...]
    missing: tuple[str, ...]  # words with no pronunciation: out of the LM, always an error


def sentences(texts: Iterable[str]) -> list[list[str]]:
    """Normalised word lists, one per non-empty text, in order."""
    return [ws for ws in (normalize_text(t).split() for t in texts) if ws]


def read_cmudict(path: Path) -> dict[str, list[str]]:
    """word -> pronunciations (phone strings) in file order; `word(2)` variants join `word`."""
    out: dict[str, list[str]] = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        head, _, phones = line.strip().partition(" ")
        if head and phones:
            out[re.sub(r"\(\d+\)$", "", head)].append(" ".join(phones.split()))
    return out


def pronunciations(word: str, cmudict: dict[str, list[str]]) -> list[str]:
    """cmudict's pronunciations of `word`, else of its first American spelling cmudict knows, else []."""
    if word in cmudict:
        return cmudict[word]
    for pattern, repl in SPELLING_RULES:
        alt = re.sub(pattern, repl, word)
        if alt != word and alt in cmudict:
            return cmudict[alt]
    return []


def _log10(p: float) -> str:
    return f"{math.log10(p):.6f}" if p > 0 else "-99.000000"


def arpa_text(sents: Sequence[Sequence[str]], order: int = ORDER, discount: float = DISCOUNT) -> str:
    """An ARPA n-gram LM of `sents` (see the module doc for the estimate); deterministic."""
    counts: list[Counter[tuple[str, ...]]] = [Counter() for _ in range(order + 1)]
    for s in sents:
        toks = [BOS, *s, EOS]
        for n in range(1, order + 1):
            for i in range(len(toks) - n + 1):
                gram = tuple(toks[i:i + n])
                if gram != (BOS,):
                    counts[n][gram] += 1
    total = sum(counts[1].values())
    prob: dict[tuple[str, ...], float] = {g: c / total for g, c in counts[1].items()}
    prob[(BOS,)] = 0.0
    bow: dict[tuple[str, ...], float] = {}
    for n in range(2, order + 1):
        hist: Counter[tuple[str, ...]] = Counter()
        types: Counter[tuple[str, ...]] = Counter()
        for g, c in counts[n].items():
            hist[g[:-1]] += c
            types[g[:-1]] += 1
        for h in hist:
            bow[h] = discount * types[h] / hist[h]
        for g, c in counts[n].items():
            h = g[:-1]
            prob[g] = max(c - discount, 0.0) / hist[h] + bow[h] * prob[g[1:]]
    lines = ["\\data\\"] + [f"ngram {n}={len(counts[n]) + (n == 1)}" for n in range(1, order + 1)]
    for n in range(1, order + 1):
        lines += ["", f"\\{n}-grams:"]
        grams = sorted(counts[n]) if n > 1 else sorted([*counts[1], (BOS,)])
        for g in grams:
            entry = f"{_log10(prob[g])}\t{' '.join(g)}"
            if n < order:
                entry += f"\t{math.log10(bow[g]) if g in bow else 0.0:.6f}"
            lines.append(entry)
    return "\n".join([*lines, "", "\\end\\", ""])


def _split_at(words: Sequence[str], missing: set[str]) -> list[list[str]]:
    """The runs of `words` between words without a pronunciation (no n-gram spans a removed word)."""
    runs: list[list[str]] = [[]]
    for w in words:
        if w in missing:
            runs.append([])
        else:
            runs[-1].append(w)
    return [r for r in runs if r]


def build(texts: Iterable[str], cmudict_path: Path, order: int = ORDER, discount: float = DISCOUNT) -> DomainModel:
    """The LM and dictionary for these texts: words without a pronunciation leave both."""
    sents = sentences(texts)
    cmudict = read_cmudict(cmudict_path)
    vocab = sorted({w for s in sents for w in s})
    prons = {w: pronunciations(w, cmudict) for w in vocab}
    missing = tuple(w for w in vocab if not prons[w])
    kept = [part for s in sents for part in _split_at(s, set(missing))]
    dict_lines = [f"{w}{'' if i == 0 else f'({i + 1})'} {p}" for w in vocab for i, p in enumerate(prons[w])]
    return DomainModel(arpa_text(kept, order, discount), "\n".join(dict_lines) + "\n",
                       tuple(w for w in vocab if prons[w]), missing)
