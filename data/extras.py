"""The optional parts of the install: which extra brings which package, and the one line a command
prints when it needs one that is missing (README "Install"; pyproject.toml
[project.optional-dependencies]).

The core install (driver, store, statistics, TUI, report, reference engine) imports none of these
packages at module level: a command imports them when it runs, so a missing one surfaces as an
ImportError inside that command, which `campaign` turns into `needs_extra`'s one line.
"""

from __future__ import annotations

from data.errors import CampaignError, first_line

DIST = "omni-campaign-console"

# top-level module -> the extra that installs it
EXTRA_OF: dict[str, str] = {
    "torch": "quality",
    "transformers": "quality",
    "onnxruntime": "quality",
    "speechmos": "quality",
    "pocketsphinx": "quality",
    "resemblyzer": "quality",
    "webrtcvad": "quality",
    "ray": "cluster",
}


class MissingExtra(CampaignError):
    """A command needs a package that only one of the extras installs; nothing was run."""


def _missing(exc: BaseException) -> ImportError | None:
    """The ImportError of an extra's package in `exc` or the errors it was raised from or during."""
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, ImportError) and (err.name or "").split(".")[0] in EXTRA_OF:
            return err
        err = err.__cause__ or err.__context__
    return None


def extra_for(exc: BaseException) -> str | None:
    """The extra whose package `exc` (an ImportError, or an error raised from one) failed to import."""
    missing = _missing(exc)
    return EXTRA_OF[(missing.name or "").split(".")[0]] if missing else None


def extra_hint(extra: str, exc: BaseException) -> str:
    """"needs the 'quality' extra (pip install '...[quality]'): No module named 'torch'"."""
    return f"needs the '{extra}' extra (pip install '{DIST}[{extra}]'): {first_line(exc)}"


def needs_extra(what: str, exc: BaseException) -> MissingExtra | None:
    """A MissingExtra naming `what` (a command, a scorer) when `exc` is a missing extra's package."""
    missing = _missing(exc)
    if missing is None:
        return None
    return MissingExtra(f"{what}: {extra_hint(EXTRA_OF[(missing.name or '').split('.')[0]], missing)}")
