"""Launch identity: how an engine proves that a /health answer is the launched process's.

The lifecycle passes each launch's id to the engine in the environment variable LAUNCH_ID_ENV;
an engine that reports it back (the reference engine does: `launch_id` in the /health body and
the LAUNCH_ID_HEADER header) lets the console tell its own launch from a stale server on the
same port (docs/engines.md, "Measuring the right engine"). Stdlib only: the reference engine
imports this at start-up.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

LAUNCH_ID_ENV = "CAMPAIGN_LAUNCH_ID"
LAUNCH_ID_HEADER = "X-Engine-Launch-Id"


def reported_identity(headers: Mapping[str, Any], body: bytes) -> str | None:
    """The launch id a /health answer reports (header first, else the JSON body's `launch_id`)."""
    got = headers.get(LAUNCH_ID_HEADER)
    if got:
        return str(got)
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    value = doc.get("launch_id") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None
