"""User-facing errors: one line that names the problem (file, field, value)."""


class CampaignError(Exception):
    """An error caused by input or state the user can fix; the CLI prints it as one line."""


class StoreError(CampaignError):
    """The run store cannot be opened or used as asked."""


class StoreLocked(StoreError):
    """Another process (or this one, with other settings) holds the run store open."""


class StoreCorrupt(StoreError):
    """The run store file is damaged or truncated: DuckDB cannot read it back as written."""
