"""One line from an answer that is not the stream asked for: an HTTP error body, or a 2xx body of
another content type (docs/engines.md)."""

from __future__ import annotations

import json
from typing import Any

from engine_adapters.dialects.base import Unexpected


async def what_arrived(resp: Any, unexpected: Unexpected) -> str:
    """The detail of a 2xx answer that is not the dialect's stream. A readable one (JSON, say) is
    read up to ERROR_BODY_LIMIT for an error message it may carry; a compressed body is left
    unread (its connection is dropped, not reused)."""
    if not unexpected.readable:
        return unexpected.detail
    body = await resp.read_error_body()
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and any(k in obj for k in ("error", "detail", "message")):
        return f"{unexpected.detail}: {error_text(body)}"
    return unexpected.detail


def error_text(body: bytes) -> str:
    """One line from an error body: JSON `detail` / `error.message`, else the text."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        if "detail" in obj:
            text = obj["detail"] if isinstance(obj["detail"], str) else json.dumps(obj["detail"])
        elif isinstance(obj.get("error"), dict):
            text = str(obj["error"].get("message", obj["error"]))
        elif "message" in obj:
            text = str(obj["message"])
    lines = text.splitlines()
    return (lines[0] if lines else "(empty body)")[:200]
