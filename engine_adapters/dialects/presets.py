"""Request presets: which body the console sends (docs/engines.md, "Request presets").

- `protocol` (default): the console's own body for the dialect (dialect modules), with the plan's
  fixed sampling fields.
- `vllm-bench`: the body `vllm bench serve --omni --dataset-name seed-tts --backend
  openai-chat-omni` sends (vllm-omni 0.30.0: benchmarks/data_modules/seed_tts_dataset.py builds
  the per-row fields, benchmarks/patch/patch.py `async_request_openai_chat_omni_completions` the
  payload).
- `sglang-bench`: the body SGLang-Omni's benchmarks/eval/benchmark_omni_seedtts.py sends (its
  request is built by benchmarks/tasks/tts.py `VoiceCloneOmni.generate_speech`; sgl-project/
  sglang-omni commit 0970348dfdee).

A bench preset reproduces its client's body exactly, so the plan's `sampling` section does not
apply to it (the bench sends its own temperature and token limit); `request.extra_body` still
merges last, as the benches' own `--extra-body` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

PROTOCOL = "protocol"
VLLM_BENCH = "vllm-bench"
SGLANG_BENCH = "sglang-bench"

# The chat system message vllm-omni 0.30.0's Seed-TTS dataset sends by default
# (seed_tts_dataset.SEED_TTS_DEFAULT_OMNI_SYSTEM_PROMPT); request content, reproduced as data.
VLLM_BENCH_SYSTEM_PROMPT = (
    "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, "
    "capable of perceiving auditory and visual inputs, as well as generating text and speech.\n"
    "For this request you act as a text-to-speech engine with zero-shot voice cloning: "
    "the API provides reference audio and its transcript (ref_audio, ref_text) and task_type Base. "
    "The user message is the exact text you must speak. "
    "Synthesize natural speech in the same language as that user text, "
    "matching the timbre, prosody, and speaking style of the reference audio while reading the new content clearly."
)
VLLM_BENCH_OUTPUT_LEN = 2048  # SeedTTSDataset.DEFAULT_OUTPUT_LEN: max_tokens and max_new_tokens
SGLANG_BENCH_MAX_TOKENS = 256  # --max-new-tokens default, sent as max_tokens
SGLANG_BENCH_TEMPERATURE = 0.7  # --temperature default


def _vllm_bench(text: str, prompt_uri: str | None, prompt_text: str | None, *, model: str,
                options: dict[str, Any], stream: bool, placement: str) -> dict[str, Any]:
    n = int(options.get("output_len", VLLM_BENCH_OUTPUT_LEN))
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "system", "content": [{"type": "text", "text": VLLM_BENCH_SYSTEM_PROMPT}]},
                     {"role": "user", "content": [{"type": "text", "text": text}]}],
        "temperature": 0.0,
        "max_tokens": n,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if prompt_uri and placement == "ref_audio":
        body.update({"ref_audio": prompt_uri, "ref_text": (prompt_text or "").strip(), "task_type": "Base",
                     "language": options.get("language", "English"), "max_new_tokens": n})
    body["modalities"] = ["text", "audio"]
    return body


def _sglang_bench(text: str, prompt_uri: str | None, prompt_text: str | None, *, model: str,
                  options: dict[str, Any], stream: bool, placement: str) -> dict[str, Any]:
    clone = bool(prompt_uri) and placement == "audios"
    if clone:  # --voice-clone: the reference travels as thinker input audio, read back by instruction
        prompt = (f'Listen to the audio above. The speaker is reading: "{prompt_text or ""}". '
                  f"Now please read the following text out loud in the same voice and style: {text}")
    else:
        prompt = f"Please read the following text out loud in English: {text}"
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "modalities": ["text", "audio"],
        "audio": {"format": "wav"},
        "max_tokens": int(options.get("max_new_tokens", SGLANG_BENCH_MAX_TOKENS)),
        "temperature": SGLANG_BENCH_TEMPERATURE,
        "stream": stream,
    }
    if clone:
        body["audios"] = [prompt_uri]
    return body


@dataclass(frozen=True)
class Preset:
    name: str
    dialects: tuple[str, ...]  # dialects it can be sent to; () = every dialect
    placements: tuple[str, ...] | None  # allowed voice placements, first = default; None = the dialect's
    streams: tuple[bool, ...]  # allowed "stream" values, first = default
    sampling: bool  # the plan's sampling fields apply
    build: Callable[..., dict[str, Any]] | None  # None = the dialect's protocol body


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset(PROTOCOL, (), None, (True, False), True, None),
    Preset(VLLM_BENCH, ("vllm-omni",), ("ref_audio",), (True,), False, _vllm_bench),
    Preset(SGLANG_BENCH, ("sglang-omni",), ("none", "audios"), (False, True), False, _sglang_bench),
)}
