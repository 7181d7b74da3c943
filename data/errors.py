"""User-facing errors: one line that names the problem (file, field, value)."""


class CampaignError(Exception):
    """An error caused by input or state the user can fix; the CLI prints it as one line."""


class StoreError(CampaignError):
    """The run store cannot be opened or used as asked."""
