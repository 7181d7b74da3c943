"""The results layer (docs/results.md): typed rows that every view reads (CLI report, TUI, HTML
report, gates, exports), built once from the stored per-run metrics. Nothing here formats for one
view only and no view parses a rendered number back."""
