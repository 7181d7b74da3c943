"""The driver's HTTP client names, importable without asyncio or ssl: the CLI's parser offers them
as choices, and `campaign --help` should not pay ~60 ms for the clients themselves
(docs/performance.md, "Starting `campaign`"). engine_adapters/transport.py maps each to its class."""

from __future__ import annotations

DEFAULT_TRANSPORT = "stamped"
TRANSPORT_NAMES = ("stamped", "aiohttp", "httpx")
