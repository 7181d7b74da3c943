"""Embedded reference engine: an offline streaming TTS server (espeak-ng) that speaks the
vLLM-Omni, SGLang-Omni and raw-PCM wire dialects and batches like a GPU engine.

Start it with ``campaign engine reference --dialect vllm-omni --profile baseline`` (or
``python -m engine_adapters.reference ...``). Modules: ``server`` (HTTP), ``scheduler``
(continuous batching), ``synthesis`` + ``espeak`` + ``voice`` (audio), ``encoders`` (wire
bytes), ``chat_request`` (request validation), ``faults``, ``profiles`` (+ profiles.toml),
``gpu`` (``--device cuda`` work).
"""
