"""User-facing errors: one line that names the problem (file, field, value)."""


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
