"""One module per `campaign` subcommand; each exposes `register(subparsers)`.

A module's top imports only what its parser needs: `campaign` imports every command module to
build its parser, so a run-time dependency (DuckDB, pandas, scipy, Rich, the engines ...) is
imported inside the `cmd_*` function that uses it (tests/test_cli_imports.py holds this)."""
