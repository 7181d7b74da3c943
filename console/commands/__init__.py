"""One module per `campaign` subcommand; each exposes `register(subparsers)`."""
