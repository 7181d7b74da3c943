"""Seed-TTS-format workloads: `<root>/<locale>/meta.lst` with lines
`utt_id|prompt_text|prompt_wav_relative_path|target_text[|ground_truth_wav]`.

The prompt speaker id is the part of `utt_id` before the first `-`. Named pools (`tuning`,
`holdout`, ...) come from an optional `pools.json` at the workload root. A real Seed-TTS
directory and the bundled sample go through exactly this code.

A bad line (wrong field count, duplicate id, a wav path that is absolute or resolves outside the
workload root, symlinks followed) is never loaded: it is a `LineError` with file:line, listed by
`campaign workload show`, and a plan whose pools include its id is refused (data/manifest.py;
docs/plans.md, "Workload").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import AbstractSet

from data import jsonfile
from data.errors import CampaignError
from data.hashing import sha256_file

SAMPLE_WORKLOAD = Path(__file__).resolve().parent / "sample_workload"
META_NAME = "meta.lst"
POOLS_NAME = "pools.json"


@dataclass(frozen=True)
class Utterance:
    utt_id: str
    prompt_text: str
    prompt_wav: Path  # absolute
    target_text: str
    ground_truth_wav: Path | None = None

    @property
    def speaker(self) -> str:
        return self.utt_id.split("-", 1)[0]


@dataclass(frozen=True)
class LineError:
    path: Path
    line_no: int
    problem: str
    utt_id: str | None = None  # the line's first field, when it has one: which pools it touches

    def __str__(self) -> str:
        return f"{self.path}:{self.line_no}: {self.problem}"


@dataclass
class Workload:
    root: Path
    locale: str
    meta_path: Path
    utterances: list[Utterance]
    pools: dict[str, list[str]] = field(default_factory=dict)
    errors: list[LineError] = field(default_factory=list)

    @property
    def by_id(self) -> dict[str, Utterance]:
        return {u.utt_id: u for u in self.utterances}

    @property
    def speakers(self) -> list[str]:
        return sorted({u.speaker for u in self.utterances})

    def missing_prompt_wavs(self) -> list[Utterance]:
        return [u for u in self.utterances if not u.prompt_wav.is_file()]

    def pool_errors(self, name: str | None) -> list[LineError]:
        """Bad lines a pool includes (by utterance id); for None (every utterance): all of them."""
        if name is None:
            return list(self.errors)
        members = set(self.pools.get(name, ()))
        return [e for e in self.errors if e.utt_id in members]

    def pool(self, name: str | None) -> list[Utterance]:
        """Utterances of a named pool in pool order; None means all, in file order. A pool that
        includes a bad line is refused (never silently shortened)."""
        if name is not None and name not in self.pools:
            raise CampaignError(f"{self.root}: no pool named {name!r} (have: {', '.join(sorted(self.pools)) or 'none'})")
        bad = self.pool_errors(name)
        if bad:
            raise CampaignError(pool_error_message(name, bad))
        if name is None:
            return list(self.utterances)
        index = self.by_id
        return [index[i] for i in self.pools[name]]

    def meta_sha256(self) -> str:
        return sha256_file(self.meta_path)


def pool_error_message(name: str | None, bad: list[LineError]) -> str:
    what = f"pool {name!r} includes" if name is not None else "the plan uses every utterance and meta.lst has"
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return f"{what} a malformed meta.lst line: {bad[0]}{more}"


def _find_meta(root: Path, locale: str | None) -> tuple[str, Path]:
    if root.is_file() and root.name == META_NAME:
        return root.parent.name, root
    if locale:
        return locale, root / locale / META_NAME
    candidates = sorted(root.glob(f"*/{META_NAME}"))
    if not candidates:
        raise CampaignError(f"{root}: no <locale>/{META_NAME} found (is this a Seed-TTS workload directory?)")
    if len(candidates) > 1:
        locales = ", ".join(c.parent.name for c in candidates)
        en = [c for c in candidates if c.parent.name == "en"]
        if not en:
            raise CampaignError(f"{root}: several locales ({locales}); choose one with --locale")
        return "en", en[0]
    return candidates[0].parent.name, candidates[0]


def _outside(kind: str, rel: str, base: Path, root: Path) -> str | None:
    """Why a wav path from meta.lst may not be read, or None: it must resolve inside the root."""
    if Path(rel).is_absolute():
        why = "is absolute"
    elif not (base / rel).resolve().is_relative_to(root):
        why = "leaves the workload root"
    else:
        return None
    return f"{kind} {rel!r} {why} ({kind.split('_', 1)[0]} wavs must be inside {root})"


def parse_meta(meta_path: Path, root: Path | None = None) -> tuple[list[Utterance], list[LineError]]:
    """Parse meta.lst; malformed lines are reported with file and line number, not raised. Wav
    paths must resolve inside `root` (default: the directory above the locale directory)."""
    base = meta_path.parent
    root = (root or base.parent).resolve()
    utterances: list[Utterance] = []
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    try:
        text = meta_path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CampaignError(f"{meta_path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        parts = line.split("|")
        first = parts[0].strip() or None
        if len(parts) not in (4, 5):
            errors.append(LineError(meta_path, line_no, f"expected 4 or 5 '|'-separated fields, found {len(parts)}", first))
            continue
        utt_id, prompt_text, prompt_wav, target_text = (p.strip() for p in parts[:4])
        gt = parts[4].strip() if len(parts) == 5 and parts[4].strip() else None
        problem = None
        if not utt_id:
            problem = "empty utt_id"
        elif "-" not in utt_id:
            problem = f"utt_id {utt_id!r} has no '-' (expected <prompt-speaker-id>-<target-id>)"
        elif utt_id in seen:
            problem = f"duplicate utt_id {utt_id!r} (first on line {seen[utt_id]})"
        elif not prompt_wav:
            problem = "empty prompt_wav path"
        elif not target_text:
            problem = "empty target_text"
        else:
            problem = _outside("prompt_wav", prompt_wav, base, root) or (gt and _outside("ground_truth_wav", gt, base, root))
        if problem:
            errors.append(LineError(meta_path, line_no, problem, first))
            continue
        seen[utt_id] = line_no
        utterances.append(
            Utterance(utt_id, prompt_text, (base / prompt_wav).resolve(), target_text, (base / gt).resolve() if gt else None)
        )
    return utterances, errors


def _load_pools(root: Path, ids: set[str], bad: AbstractSet[str | None] = frozenset()) -> dict[str, list[str]]:
    """Pools from pools.json; an id on a bad meta.lst line is kept (the pool is refused when a
    plan uses it, naming the line), an id on no line at all is an error here."""
    path = root / POOLS_NAME
    if not path.is_file():
        return {}
    return read_pools_file(path, ids, bad)


def read_pools_file(path: Path, ids: set[str], bad: AbstractSet[str | None] = frozenset()) -> dict[str, list[str]]:
    """`{name: [utt ids]}` from a pools file; every id must be in the workload (`bad`: ids on bad
    meta.lst lines, kept so that a plan using the pool is refused naming the line)."""
    raw = jsonfile.read(path, "pools file")  # strict: a pool named twice is refused, not merged
    if not isinstance(raw, dict) or not all(isinstance(v, list) for v in raw.values()):
        raise CampaignError(f"{path}: expected an object mapping pool name -> list of utterance ids")
    for name, members in raw.items():
        unknown = [m for m in members if m not in ids and m not in bad]
        if unknown:
            raise CampaignError(f"{path}: pool {name!r} names unknown utterance id(s) {unknown[:5]}")
    return {str(k): [str(m) for m in v] for k, v in raw.items()}


def load_workload(root: str | Path | None = None, locale: str | None = None,
                  pools_file: str | Path | None = None) -> Workload:
    """Load a Seed-TTS-format workload (default: the bundled sample); `pools_file` (written by
    `campaign workload pools`, kept outside the dataset folder) replaces `<root>/pools.json`."""
    root = Path(root) if root else SAMPLE_WORKLOAD
    if not root.exists():
        raise CampaignError(f"{root}: workload directory does not exist")
    locale, meta = _find_meta(root, locale)
    if not meta.is_file():
        raise CampaignError(f"{meta}: no such file")
    if root.is_file():
        root = meta.parent.parent
    utterances, errors = parse_meta(meta, meta.parent.parent)
    ids, bad = {u.utt_id for u in utterances}, {e.utt_id for e in errors}
    pools = read_pools_file(Path(pools_file), ids, bad) if pools_file else _load_pools(root, ids, bad)
    return Workload(root=root, locale=locale, meta_path=meta, utterances=utterances, pools=pools, errors=errors)


# -- pool definition (`campaign workload pools`) -----------------------------------------------
@dataclass(frozen=True)
class PoolSlice:
    name: str
    start: int
    end: int  # exclusive, as a Python slice


def parse_pool_define(text: str) -> PoolSlice:
    """`NAME=START:END` (0-based, END exclusive: `a=32:96` is meta.lst lines 33-96)."""
    name, sep, span = text.partition("=")
    start, colon, end = span.partition(":")
    if not sep or not colon or not name.strip():
        raise CampaignError(f"--define {text!r}: expected NAME=START:END, e.g. holdout=0:320")
    try:
        a, b = int(start), int(end)
    except ValueError:
        raise CampaignError(f"--define {text!r}: START and END must be integers") from None
    if a < 0 or b <= a:
        raise CampaignError(f"--define {text!r}: need 0 <= START < END")
    return PoolSlice(name.strip(), a, b)


def define_pools(order: list[str], slices: list[PoolSlice], shuffle_seed: int | None = None,
                 source: str = "meta.lst") -> dict[str, list[str]]:
    """Pools as index slices over `order` (the meta.lst order, or an existing pool's), after an
    optional seeded permutation (`numpy.random.default_rng(seed).permutation(len(order))`)."""
    if shuffle_seed is not None:
        import numpy as np

        order = [order[i] for i in np.random.default_rng(shuffle_seed).permutation(len(order))]
    out: dict[str, list[str]] = {}
    for sl in slices:
        if sl.name in out:
            raise CampaignError(f"--define {sl.name}: pool defined twice")
        if sl.end > len(order):
            raise CampaignError(f"--define {sl.name}={sl.start}:{sl.end}: {source} has only {len(order)} utterances")
        out[sl.name] = order[sl.start:sl.end]
    return out
