"""Wire dialects: request building and incremental stream parsing per engine protocol."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from data.errors import CampaignError
from engine_adapters.dialects import pcm, sglang_omni, vllm_omni
from engine_adapters.dialects.base import MAX_EVENT_BYTES, Event, StreamParser, prompt_data_uri, Unexpected, unexpected_response

_MODULES: dict[str, ModuleType] = {m.NAME: m for m in (vllm_omni, sglang_omni, pcm)}
DIALECTS = tuple(_MODULES)
DEFAULT_MODEL = "openbmb/MiniCPM-o-4_5"
SAMPLING_FIELDS = ("seed", "temperature", "top_p", "top_k", "max_tokens")


@dataclass(frozen=True)
class Dialect:
    name: str
    path: str
    _build: Callable[..., dict[str, Any]]
    _parser: type[StreamParser]
    content_type: str = "text/event-stream"  # what this dialect's streaming answer declares

    def build_body(self, text: str, prompt_wav: str | None, prompt_text: str | None, *,
                   sampling: dict[str, Any] | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Request JSON: dialect shape, then the plan's fixed sampling fields (None = omitted),
        then `options["extra_body"]` merged last."""
        options = options or {}
        uri = prompt_data_uri(prompt_wav) if prompt_wav and options.get("voice_prompt") != "none" else None
        body = self._build(text, uri, prompt_text, model=options.get("model", DEFAULT_MODEL),
                           sampling=sampling or {}, options=options)
        for key in SAMPLING_FIELDS:
            value = (sampling or {}).get(key)
            if value is not None:
                body[key] = value
        body.update(options.get("extra_body") or {})
        return body

    def check_response(self, content_type: str | None, content_encoding: str | None) -> Unexpected | None:
        """Why a 2xx response with these headers is not this dialect's stream, or None (checked
        once per response, before its body is read)."""
        return unexpected_response(self.content_type, content_type, content_encoding)

    def new_parser(self, options: dict[str, Any] | None = None) -> StreamParser:
        options = options or {}
        fmt = options.get("audio_format", "pcm" if self.name == "pcm" else "wav")
        return self._parser(audio_format=fmt, sample_rate=int(options.get("sample_rate", 24_000)),
                            max_event_bytes=int(options.get("max_event_bytes", MAX_EVENT_BYTES)))


def get_dialect(name: str) -> Dialect:
    mod = _MODULES.get(name)
    if mod is None:
        raise CampaignError(f"unknown dialect {name!r} (choose one of: {', '.join(DIALECTS)})")
    return Dialect(mod.NAME, mod.PATH, mod.build_body, mod.Parser, mod.CONTENT_TYPE)


__all__ = ["DIALECTS", "Dialect", "Event", "StreamParser", "get_dialect", "prompt_data_uri"]
