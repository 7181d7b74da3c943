"""Wire dialects: request building and incremental stream parsing per engine protocol."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from data.audio_rates import expected_rate
from data.errors import CampaignError
from data.hashing import sha256_json
from data.plan_model import DEFAULT_MODEL
from engine_adapters.dialects import pcm, sglang_omni, vllm_omni, vllm_omni_realtime
from engine_adapters.dialects.base import (MAX_EVENT_BYTES, Event, StreamParser, Unexpected, WholeJsonParser,
                                           prompt_data_uri, unexpected_response)
from engine_adapters.dialects.presets import PRESETS, PROTOCOL

_MODULES: dict[str, ModuleType] = {m.NAME: m for m in (vllm_omni, sglang_omni, pcm, vllm_omni_realtime)}
DIALECTS = tuple(_MODULES)
SAMPLING_FIELDS = ("seed", "temperature", "top_p", "top_k", "max_tokens")
# placeholders of the body template whose hash every run stores
TEMPLATE_TEXT, TEMPLATE_PROMPT, TEMPLATE_PROMPT_TEXT = "{target_text}", "{prompt_wav_data_uri}", "{prompt_text}"


@dataclass(frozen=True)
class RequestConfig:
    """What a run's request options resolve to (stored with the run)."""
    preset: str
    voice_placement: str
    stream: bool


@dataclass(frozen=True)
class Dialect:
    name: str
    path: str
    placements: tuple[str, ...]
    _build: Callable[..., dict[str, Any]]
    _parser: Callable[..., StreamParser]  # a parser class: (audio_format=, sample_rate=, max_event_bytes=)
    content_type: str = "text/event-stream"  # what this dialect's streaming answer declares
    transport: str = "http"  # "websocket": a session over a WebSocket (dialects/vllm_omni_realtime.py)
    default_format: str = "wav"  # request.audio_format when the plan gives none
    # where the plan's sampling fields go (None: top-level body keys)
    _sampling: Callable[[dict[str, Any], dict[str, Any]], None] | None = None

    def request_config(self, options: dict[str, Any] | None = None) -> RequestConfig:
        """Resolve and check `preset`, `voice_prompt` and `stream`; a bad value is a one-line
        CampaignError naming the option."""
        options = options or {}
        name = options.get("preset", PROTOCOL)
        preset = PRESETS.get(name)
        if preset is None:
            raise CampaignError(f"request.preset: {name!r} is not one of {', '.join(PRESETS)}")
        if preset.dialects and self.name not in preset.dialects:
            raise CampaignError(f"request.preset: {name!r} is the {'/'.join(preset.dialects)} benchmark body; "
                                f"it cannot be sent to a {self.name} engine")
        allowed = preset.placements or self.placements
        placement = options.get("voice_prompt", allowed[0])
        if placement not in allowed:
            raise CampaignError(f"request.voice_prompt: {placement!r} is not a {self.name} placement for preset "
                                f"{name!r} (choose one of: {', '.join(allowed)})")
        streams = preset.streams if self.name != "pcm" and self.transport == "http" else (True,)
        stream = options.get("stream", streams[0])
        if stream not in streams:
            raise CampaignError(f"request.stream: {stream!r} is not possible for preset {name!r} on {self.name}")
        return RequestConfig(name, placement, bool(stream))

    def _body(self, text: str, uri: str | None, prompt_text: str | None, sampling: dict[str, Any] | None,
              options: dict[str, Any]) -> dict[str, Any]:
        cfg = self.request_config(options)
        preset = PRESETS[cfg.preset]
        model = options.get("model", DEFAULT_MODEL)
        opts = {**options, "voice_prompt": cfg.voice_placement, "stream": cfg.stream}
        if preset.build is None:
            body = self._build(text, uri, prompt_text, model=model, sampling=sampling or {}, options=opts)
        else:
            body = preset.build(text, uri, prompt_text, model=model, options=opts, stream=cfg.stream,
                                placement=cfg.voice_placement)
        if preset.sampling and self._sampling is not None:
            self._sampling(body, sampling or {})
        elif preset.sampling:
            for key in SAMPLING_FIELDS:
                value = (sampling or {}).get(key)
                if value is not None:
                    body[key] = value
        body.update(options.get("extra_body") or {})
        return body

    def response_content_type(self, options: dict[str, Any] | None = None) -> str:
        """What a 2xx answer to this request declares: the dialect's stream, or one JSON document
        when the request asked `stream: false`."""
        return self.content_type if self.request_config(options).stream else "application/json"

    def sample_rate(self, options: dict[str, Any] | None = None) -> int:
        """The rate (Hz) this engine is expected to deliver: `request.sample_rate`, else the
        dialect's default (data/audio_rates.py; docs/engines.md, "Sample rate")."""
        return expected_rate(self.name, options)

    def check_response(self, content_type: str | None, content_encoding: str | None,
                       expected: str | None = None, rate: int | None = None) -> Unexpected | None:
        """Why a 2xx response with these headers is not what was asked for (`expected`, default the
        dialect's stream; `rate`, the Hz an audio type may announce), or None; checked once per
        response, before its body is read."""
        return unexpected_response(expected or self.content_type, content_type, content_encoding, rate)
    def build_body(self, text: str, prompt_wav: str | None, prompt_text: str | None, *,
                   sampling: dict[str, Any] | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Request JSON: the preset's body (protocol: dialect shape, then the plan's fixed sampling
        fields, None = omitted), then `options["extra_body"]` merged last."""
        options = options or {}
        cfg = self.request_config(options)
        uri = prompt_data_uri(prompt_wav) if prompt_wav and cfg.voice_placement != "none" else None
        return self._body(text, uri, prompt_text, sampling, options)

    def body_template(self, sampling: dict[str, Any] | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """The body with placeholders for the per-utterance values (a prompt wav assumed present)."""
        return self._body(TEMPLATE_TEXT, TEMPLATE_PROMPT, TEMPLATE_PROMPT_TEXT, sampling, options or {})

    def body_template_sha256(self, sampling: dict[str, Any] | None = None, options: dict[str, Any] | None = None) -> str:
        """SHA-256 of the template's canonical JSON (sorted keys, compact): equal hashes, equal bodies."""
        return sha256_json(self.body_template(sampling, options))

    def new_parser(self, options: dict[str, Any] | None = None) -> StreamParser:
        options = options or {}
        fmt = options.get("audio_format", self.default_format)
        cls = self._parser if self.request_config(options).stream else WholeJsonParser
        return cls(audio_format=fmt, sample_rate=self.sample_rate(options),
                   max_event_bytes=int(options.get("max_event_bytes", MAX_EVENT_BYTES)))


def get_dialect(name: str) -> Dialect:
    mod = _MODULES.get(name)
    if mod is None:
        raise CampaignError(f"unknown dialect {name!r} (choose one of: {', '.join(DIALECTS)})")
    return Dialect(mod.NAME, mod.PATH, mod.PLACEMENTS, mod.build_body, mod.Parser, mod.CONTENT_TYPE,
                   getattr(mod, "TRANSPORT", "http"), getattr(mod, "DEFAULT_AUDIO_FORMAT", "wav"),
                   getattr(mod, "apply_sampling", None))


__all__ = ["DIALECTS", "Dialect", "Event", "RequestConfig", "StreamParser", "get_dialect", "prompt_data_uri"]
