"""User-facing errors: one line that names the problem (file, field, value)."""

import errno

class CampaignError(Exception):
    """An error caused by input or state the user can fix; the CLI prints it as one line."""


class StoreError(CampaignError):
    """The run store cannot be opened or used as asked."""


class StoreLocked(StoreError):
    """Another process (or this one, with other settings) holds the run store open."""


class StoreCorrupt(StoreError):
    """The run store file is damaged or truncated: DuckDB cannot read it back as written."""


def first_line(exc: BaseException, limit: int | None = None, default: str | None = None) -> str:
    """The first line of an exception's message, at most `limit` characters; `default` (else the
    exception's class name) when it has no message. Errors reach the user as one line."""
    text = str(exc).strip()
    if not text:
        return default if default is not None else type(exc).__name__
    line = text.splitlines()[0].rstrip()
    return line[:limit] if limit is not None else line


def one_line(exc: BaseException, limit: int | None = None) -> str:
    """'ValueError: first line of the message' (just the class name when there is no message):
    for errors whose type says what went wrong (a library's, a model's)."""
    line = first_line(exc, limit, default="")
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


# a write refused for lack of room: the OS's errno, or the text DuckDB (and a driver's fatal line) carries
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "File too large")


def disk_full(failure: BaseException | str | None) -> str | None:
    """The one-line cause when `failure` (an exception, any exception it was raised from or during,
    or a recorded one-line error) is a write refused for lack of room (ENOSPC, EDQUOT, EFBIG),
    else None: such a failure stops a campaign as a failed run, not as bad input
    (docs/results.md, "A full disk")."""
    seen: set[int] = set()
    while failure is not None and id(failure) not in seen:
        seen.add(id(failure))
        if isinstance(failure, OSError) and failure.errno in _FULL_ERRNOS:
            return first_line(failure)
        text = failure if isinstance(failure, str) else str(failure)
        if any(t in text for t in _FULL_TEXTS):
            return text.strip().splitlines()[0] if text.strip() else None
        if isinstance(failure, str):
            return None
        failure = failure.__cause__ or failure.__context__
    return None


class DiskFull(Exception):
    """A run stopped because a write found no room; the message is the one-line cause."""
