"""JSON a user hands the console (plan files, addenda, workload pools), read strictly.

Python's `json` keeps the last of two equal keys without a word, so `{"repeats": 3, "repeats": 1}`
would be frozen as 1 while a reader of the file sees 3 first; and a deeply nested document ends
in a RecursionError somewhere (the parser, schema validation, hashing). Both are refused here,
as one line naming the file and where (docs/plans.md, "What freeze checks").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data.errors import CampaignError

MAX_DEPTH = 64  # objects and lists inside each other; a plan needs about 6


class _Duplicated(dict):
    """An object in which `duplicates` appeared more than once (found after parsing, with a path)."""

    duplicates: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    dups: list[str] = []
    for key, value in pairs:
        if key in out:
            dups.append(key)
        out[key] = value
    if not dups:
        return out
    marked = _Duplicated(out)
    marked.duplicates = dups
    return marked


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check(doc: Any, label: str) -> None:
    """Duplicate keys and depth, walked without recursion (the depth is what is being checked)."""
    stack: list[tuple[Any, str, int]] = [(doc, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if depth >= MAX_DEPTH:
            raise CampaignError(f"{label}: nested too deeply at {path}: more than {MAX_DEPTH} levels of objects "
                                "and lists")
        if isinstance(node, _Duplicated):
            key = node.duplicates[0]
            raise CampaignError(f"{label}: duplicate key {key!r} at {_child(path, key)}: JSON would keep only "
                                "the last value; give each key once")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        stack.extend((v, _child(path, k), depth + 1) for k, v in reversed(list(items)))


def loads(text: str, label: str) -> Any:
    """Parse `text` (from `label`), refusing duplicate keys and nesting deeper than MAX_DEPTH."""
    try:
        doc = json.loads(text, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        raise CampaignError(f"{label}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise CampaignError(f"{label}: nested too deeply: more than {MAX_DEPTH} levels of objects and lists") from None
    _check(doc, label)
    return doc


def read(path: str | Path, what: str = "plan file") -> Any:
    """The parsed JSON file at `path`; every failure one line naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CampaignError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CampaignError(f"{path}: is a directory, not a {what}") from None
    except UnicodeDecodeError as exc:
        raise CampaignError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise CampaignError(f"{path}: cannot read {what} ({exc.strerror})") from None
    return loads(text, str(path))
