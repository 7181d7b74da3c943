"""Engine and validator environment values never leave the plan file: stored and exported copies
of a plan, the `engine_launches`, `attempts` and `validator_runs` rows and stored log tails hold
each variable's name and the SHA-256 of its value ("sha256:<hex>"), never the value (docs/plans.md,
"Engine environment").

A plan gives an engine's environment in two ways: `env` (name -> value, the value written in the
plan file) and `env_passthrough` (names whose values come from the console's own environment
when the engine starts, so the value never is in any file). The plan hash covers the redacted
form, so the stored row verifies against its hash without the value; the values themselves are
found again at run time by their hash, in the plan file given to `campaign run` or in the files
the plan lineage was frozen from.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Iterable, Mapping, overload

from data.errors import CampaignError
from data.hashing import sha256_text

HASH_PREFIX = "sha256:"
_HASHED = re.compile(r"^sha256:[0-9a-f]{64}$")
SCRUB_MIN_LEN = 8  # shorter values ("0", "true") are not secrets and would mangle a log tail
SCRUBBED = "<redacted>"


def value_hash(value: str) -> str:
    """The stored stand-in for an env value."""
    return HASH_PREFIX + sha256_text(value)


def is_hashed(value: Any) -> bool:
    return isinstance(value, str) and bool(_HASHED.match(value))


def redact_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """name -> "sha256:<hex>" (values already in that form, and non-strings the schema refuses,
    are kept as they are)."""
    return {k: (value_hash(v) if isinstance(v, str) and not is_hashed(v) else v) for k, v in env.items()}


def _entries(doc: Any, section: str) -> list[tuple[str, dict[str, Any]]]:
    """(field path, entry) of every object in `section` ("engines", "validators") of a plan
    document and of an addendum's `changes`."""
    if not isinstance(doc, dict):
        return []
    out: list[tuple[str, dict[str, Any]]] = []
    for prefix, holder in (("", doc), ("changes.", doc.get("changes"))):
        items = holder.get(section) if isinstance(holder, dict) else None
        for i, item in enumerate(items if isinstance(items, list) else []):
            if isinstance(item, dict):
                out.append((f"{prefix}{section}[{i}]", item))
    return out


def _with_env(doc: Any) -> list[dict[str, Any]]:
    """The entries that may hold an `env` (engines and validators, docs/plans.md) of a plan
    document or of an addendum's `changes`."""
    return [e for section in ("engines", "validators") for _, e in _entries(doc, section)]


def redact_document(doc: Any) -> Any:
    """A copy of a plan (or addendum) document with every `engines[].env` and `validators[].env`
    value hashed; a document without env values comes back equal to itself (so its hash is
    unchanged)."""
    if not any(isinstance(e.get("env"), dict) and e["env"] for e in _with_env(doc)):
        return doc
    out = copy.deepcopy(doc)
    for entry in _with_env(out):
        if isinstance(entry.get("env"), dict):
            entry["env"] = redact_env(entry["env"])
    return out


def secret_values(doc: Any) -> dict[str, str]:
    """hash -> value for every env value written in a plan (or addendum) document."""
    return {value_hash(v): v for e in _with_env(doc) if isinstance(e.get("env"), dict)
            for v in e["env"].values() if isinstance(v, str) and not is_hashed(v)}


def passthrough_errors(entries: list[Any], section: str = "engines") -> list[str]:
    """Cross-field rule: a name is given either a value (`env`) or passed through, not both."""
    errs = []
    for i, e in enumerate(entries):
        env = e.get("env") or {}
        for name in e.get("env_passthrough") or []:
            if name in env:
                errs.append(f"{section}[{i}].env_passthrough: {name} is also set in {section}[{i}].env; give it one source")
    return errs


# Command-line flags whose value is a secret, with where the engine reads it from the environment
# instead: vLLM 0.30.0's `--api-key` (vllm/entrypoints/launchers/cli_args.py; VLLM_API_KEY,
# vllm/entrypoints/serve/middleware/register.py) and `--hf-token` (vllm/engine/arg_utils.py;
# huggingface_hub reads HF_TOKEN). docs/plans.md, "Engine environment".
SECRET_FLAGS = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN"}


def argv_secret_errors(doc: Any) -> list[str]:
    """A secret flag given a value on a command line: argv is stored and exported as written, so
    the value would be too. One line per flag, naming the field and never the value."""
    errs = []
    for where, entry in _entries(doc, "engines") + _entries(doc, "validators"):
        argv: list[Any] = entry["argv"] if isinstance(entry.get("argv"), list) else []
        for j, arg in enumerate(argv):
            if not isinstance(arg, str):
                continue
            flag, eq, inline = arg.partition("=")
            if flag not in SECRET_FLAGS:
                continue
            following = argv[j + 1] if j + 1 < len(argv) else None
            if inline or (not eq and isinstance(following, str) and not following.startswith("-")):
                errs.append(f"{where}.argv[{j}]: {flag} takes a secret, and argv is stored and exported as written; "
                            f"give it in env or env_passthrough ({SECRET_FLAGS[flag]}) instead")
    return errs


def resolve_env(env: Mapping[str, str], passthrough: Iterable[str], secrets: Mapping[str, str],
                environ: Mapping[str, str], where: str) -> dict[str, str]:
    """The real environment an engine gets: plan values (looked up by their hash when the plan
    holds only the hash) and passed-through variables. Raises a one-line CampaignError naming
    the field when a value cannot be found; the message never holds a value."""
    out: dict[str, str] = {}
    for name, value in env.items():
        if is_hashed(value):
            if value not in secrets:
                raise CampaignError(
                    f"{where}.env.{name}: the store holds only the value's SHA-256 ({value[:19]}...); run from "
                    f"the plan file that holds the value, or pass it from the environment with env_passthrough")
            value = secrets[value]
        out[name] = value
    for name in passthrough:
        if name not in environ:
            raise CampaignError(f"{where}.env_passthrough: {name} is not set in the console's environment")
        out[name] = environ[name]
    return out


@overload
def scrub(text: str, values: Iterable[str]) -> str: ...
@overload
def scrub(text: None, values: Iterable[str]) -> None: ...
def scrub(text: str | None, values: Iterable[str]) -> str | None:
    """`text` with every env value of at least SCRUB_MIN_LEN characters replaced (stored log
    tails: an engine may print its own environment)."""
    if not text:
        return text
    for v in sorted((v for v in values if len(v) >= SCRUB_MIN_LEN), key=len, reverse=True):
        text = text.replace(v, SCRUBBED)
    return text
