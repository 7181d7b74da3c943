"""The Textual app of the Omni Campaign Console (`campaign tui`)."""
