"""The run store's schema, declared as data.

Tables and columns are a public interface: users query them with plain SQL, so every column
carries a one-line description and `docs/schema.md` is generated from this module
(`python -m data.schema > docs/schema.md`). Changes are forward migrations appended to
`MIGRATIONS`; a migration never rewrites stored measurements.

Time columns: `*_ns` columns hold `time.perf_counter_ns()` values (CLOCK_MONOTONIC, comparable
across processes on one host); each run stores one (`anchor_wall_ns`, `anchor_perf_ns`) pair so
request records and GPU samples join on one wall-clock axis.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str
    constraint: str = ""


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()

    def create_sql(self) -> str:
        cols = [f"{c.name} {c.type}{(' ' + c.constraint) if c.constraint else ''}" for c in self.columns]
        if self.primary_key:
            cols.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n  " + ",\n  ".join(cols) + "\n)"

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


C = Column

PLANS = Table(
    "plans",
    "Frozen plans and addenda: canonical JSON and its SHA-256. Insert-only.",
    (
        C("plan_hash", "VARCHAR", "SHA-256 (hex) of canonical_json", "NOT NULL"),
        C("parent_hash", "VARCHAR", "for an addendum: the plan hash it amends; NULL for a root plan"),
        C("kind", "VARCHAR", "'plan' or 'addendum'", "NOT NULL"),
        C("name", "VARCHAR", "the plan's `name` field"),
        C("canonical_json", "VARCHAR", "sorted-key, compact JSON that the hash covers (engine env values as their SHA-256)", "NOT NULL"),
        C("source_path", "VARCHAR", "file the plan was frozen from"),
        C("frozen_at", "TIMESTAMPTZ", "when it was frozen", "NOT NULL"),
        C("frozen_by", "VARCHAR", "user@host that froze it"),
    ),
    ("plan_hash",),
)

AUDIT_EVENTS = Table(
    "audit_events",
    "Hash-chained, append-only log of every state change (freeze, run start/end, exclusion, "
    "holdout opening, verdict ...).",
    (
        C("seq", "BIGINT", "position in the chain, from 1", "NOT NULL"),
        C("event_time", "TIMESTAMPTZ", "when the event was appended", "NOT NULL"),
        C("kind", "VARCHAR", "event kind, e.g. plan_frozen, run_started, run_excluded, verdict_issued", "NOT NULL"),
        C("plan_hash", "VARCHAR", "plan the event belongs to, if any"),
        C("subject", "VARCHAR", "what the event is about (run id, verdict id, pool name ...)"),
        C("payload_json", "VARCHAR", "event details as canonical JSON", "NOT NULL"),
        C("prev_hash", "VARCHAR", "event_hash of event seq-1 ('' for the first)", "NOT NULL"),
        C("event_hash", "VARCHAR", "SHA-256 over (seq, event_time, kind, plan_hash, subject, payload_json, prev_hash)", "NOT NULL"),
    ),
    ("seq",),
)

WORKLOAD_MANIFESTS = Table(
    "workload_manifests",
    "Frozen workload manifests: which utterances, from which meta.lst, with which prompt wav bytes.",
    (
        C("manifest_hash", "VARCHAR", "SHA-256 of manifest_json", "NOT NULL"),
        C("root", "VARCHAR", "workload directory"),
        C("locale", "VARCHAR", "locale sub-directory, e.g. 'en'"),
        C("meta_sha256", "VARCHAR", "SHA-256 of <locale>/meta.lst"),
        C("utterances", "INTEGER", "number of selected utterance ids"),
        C("manifest_json", "VARCHAR", "canonical JSON: ids in order, prompt wav hashes, pools", "NOT NULL"),
        C("created_at", "TIMESTAMPTZ", "when it was frozen", "NOT NULL"),
    ),
    ("manifest_hash",),
)

ENGINE_LAUNCHES = Table(
    "engine_launches",
    "Every engine launch attempt, including startup failures, with what exactly was launched.",
    (
        C("launch_id", "VARCHAR", "unique id of this launch attempt", "NOT NULL"),
        C("plan_hash", "VARCHAR", "plan the launch belongs to (NULL for ad-hoc launches)"),
        C("engine", "VARCHAR", "engine name from the plan, e.g. 'vllm-omni-main'", "NOT NULL"),
        C("adapter", "VARCHAR", "adapter kind: vllm_omni, sglang_omni, peer, reference", "NOT NULL"),
        C("revision", "VARCHAR", "pinned engine revision (git sha or version)"),
        C("profile", "VARCHAR", "named engine profile, if any"),
        C("argv_json", "VARCHAR", "launch argv as a JSON list (never a shell string)"),
        C("env_json", "VARCHAR", "environment overrides as a JSON object: name -> \"sha256:<hex>\" of the value, never the value"),
        C("log_path", "VARCHAR", "file that captured the engine's stdout and stderr"),
        C("config_path", "VARCHAR", "engine config file, if any"),
        C("config_sha256", "VARCHAR", "SHA-256 of the config file"),
        C("checkpoint_sha256_json", "VARCHAR", "JSON object: checkpoint file path -> SHA-256"),
        C("url", "VARCHAR", "base URL the engine serves on"),
        C("pid", "INTEGER", "process id of the launch: the orphan guard that parents the engine and leads its process group"),
        C("started_ns", "BIGINT", "perf_counter_ns when the process was spawned"),
        C("ready_ns", "BIGINT", "perf_counter_ns when /health first answered 200 (NULL if never)"),
        C("stopped_ns", "BIGINT", "perf_counter_ns when the process was reaped"),
        C("started_at", "TIMESTAMPTZ", "wall-clock spawn time"),
        C("status", "VARCHAR", "ready, startup_failed, stopped, crashed", "NOT NULL"),
        C("failure_reason", "VARCHAR", "one line: why the launch failed"),
        C("log_tail", "VARCHAR", "last lines of the log on failure or stop"),
        C("exit_code", "INTEGER", "process exit code once stopped"),
        C("deploy_json", "VARCHAR", "resolved engine deploy configuration (docs/engines.md): files with SHA-256, "
          "per-stage admission limits and sampling defaults, admission_limit; NULL when none is given"),
    ),
    ("launch_id",),
)

RUNS = Table(
    "runs",
    "One run = one (engine, concurrency, repeat) cell executed once. Never deleted; exclusions "
    "live in `exclusions`.",
    (
        C("run_id", "VARCHAR", "unique run id", "NOT NULL"),
        C("plan_hash", "VARCHAR", "frozen plan the run executed (NULL for ad-hoc probes)"),
        C("cell_key", "VARCHAR", "plan cell '<engine>/c<C>/<kind>/<repeat>' used to resume without duplicates"),
        C("engine", "VARCHAR", "engine name", "NOT NULL"),
        C("launch_id", "VARCHAR", "engine launch that served this run"),
        C("dialect", "VARCHAR", "wire dialect: vllm-omni, sglang-omni, pcm", "NOT NULL"),
        C("url", "VARCHAR", "endpoint driven"),
        C("concurrency", "INTEGER", "closed-loop concurrency C", "NOT NULL"),
        C("repeat_index", "INTEGER", "repeat number within the cell (warmups and measured counted separately)", "NOT NULL"),
        C("kind", "VARCHAR", "warmup, measured, exploratory, profiled", "NOT NULL"),
        C("status", "VARCHAR", "running, complete, incomplete (interrupted), failed", "NOT NULL"),
        C("pool", "VARCHAR", "workload pool the requests came from"),
        C("requests_planned", "INTEGER", "requests the run was to send"),
        C("started_at", "TIMESTAMPTZ", "wall-clock start"),
        C("ended_at", "TIMESTAMPTZ", "wall-clock end (NULL while running or if interrupted)"),
        C("anchor_wall_ns", "BIGINT", "time.time_ns() taken together with anchor_perf_ns"),
        C("anchor_perf_ns", "BIGINT", "perf_counter_ns() taken together with anchor_wall_ns"),
        C("loop_impl", "VARCHAR", "event loop the driver ran (uvloop or asyncio)"),
        C("client_impl", "VARCHAR", "HTTP client the driver used, with version"),
        C("driver_overhead_json", "VARCHAR", "the driver's own overhead: send lag and event-loop lag percentiles"),
        C("gpu_json", "VARCHAR", "GPU identity at run start (name, uuid, driver, memory, power limit) or why absent"),
        C("telemetry_status", "VARCHAR", "ok, or why GPU telemetry is missing"),
        C("params_json", "VARCHAR", "request and metric parameters in force (seed, temperature, timeout, pre-roll ...)"),
        C("metrics_version", "VARCHAR", "version of the metric definitions the run was recorded under"),
        C("note", "VARCHAR", "free text, e.g. 'exploratory: no restart between cells'"),
        C("request_preset", "VARCHAR", "request body preset: protocol, vllm-bench or sglang-bench (docs/engines.md)"),
        C("voice_placement", "VARCHAR", "where the voice prompt went: ref_audio, audio_url, audios or none"),
        C("body_template_sha256", "VARCHAR", "SHA-256 of the request body template (placeholders for the per-utterance values)"),
        C("node_id", "VARCHAR", "Ray node that ran the engine and driver (NULL for a local run; docs/cluster.md)"),
        C("gpu_uuid", "VARCHAR", "UUID of the GPU the run's engine held (NULL where NVML is unavailable)"),
        C("gpu_name", "VARCHAR", "model name of that GPU (throughput pairs across GPU models are refused)"),
    ),
    ("run_id",),
)

REQUESTS = Table(
    "requests",
    "One row per request sent (warmup requests included, flagged). Failed requests are never "
    "dropped: `outcome` names their failure class.",
    (
        C("run_id", "VARCHAR", "run the request belongs to", "NOT NULL"),
        C("request_index", "INTEGER", "0-based position in the run's request order", "NOT NULL"),
        C("utt_id", "VARCHAR", "workload utterance id (<speaker>-<target>)", "NOT NULL"),
        C("is_warmup", "BOOLEAN", "sent as an in-run warmup request (excluded from metrics)", "NOT NULL"),
        C("outcome", "VARCHAR", "ok, or the failure class: http_status, transport, in_stream_error, "
          "no_end_marker, timeout, no_audio, decode_error, cancelled", "NOT NULL"),
        C("error_detail", "VARCHAR", "one line describing the failure"),
        C("http_status", "INTEGER", "HTTP status code (NULL if no response)"),
        C("t_send_ns", "BIGINT", "perf_counter_ns just before the request bytes were written", "NOT NULL"),
        C("t_first_byte_ns", "BIGINT", "arrival of the first response byte"),
        C("t_first_audio_ns", "BIGINT", "arrival of the first chunk decoding to >= 1 audio sample"),
        C("t_last_audio_ns", "BIGINT", "arrival of the last chunk carrying audio samples"),
        C("t_end_ns", "BIGINT", "request completion (end marker, error or close)"),
        C("audio_samples", "BIGINT", "decoded audio samples over all chunks"),
        C("sample_rate", "INTEGER", "sample rate of the decoded audio (Hz)"),
        C("audio_chunks", "INTEGER", "audio-bearing chunks (events)"),
        C("events", "INTEGER", "all parsed events (audio, text, usage, other)"),
        C("bytes_received", "BIGINT", "response body bytes"),
        C("text", "VARCHAR", "text the engine returned alongside the audio, if any"),
        C("audio_path", "VARCHAR", "saved WAV of the delivered audio (relative to the artifacts folder)"),
        C("audio_sha256", "VARCHAR", "SHA-256 of the saved WAV file"),
        C("finish_reason", "VARCHAR", "the engine's finish_reason ('length' = output cut by a token limit: truncated)"),
    ),
    ("run_id", "request_index"),
)

CHUNKS = Table(
    "chunks",
    "Every parsed stream event with its arrival stamp (taken when its first byte was read).",
    (
        C("run_id", "VARCHAR", "run", "NOT NULL"),
        C("request_index", "INTEGER", "request within the run", "NOT NULL"),
        C("chunk_index", "INTEGER", "0-based event position within the request", "NOT NULL"),
        C("t_arrival_ns", "BIGINT", "perf_counter_ns when the event's first byte was read", "NOT NULL"),
        C("kind", "VARCHAR", "audio, text, usage, error, other", "NOT NULL"),
        C("samples", "INTEGER", "decoded audio samples in this event (0 for non-audio)", "NOT NULL"),
        C("payload_bytes", "INTEGER", "bytes of the event on the wire", "NOT NULL"),
        C("server_emit_ns", "BIGINT", "server's emit stamp if the engine sends one (reference engine only)"),
    ),
)

GPU_DEVICES = Table(
    "gpu_devices",
    "GPU identity recorded at run start, one row per visible GPU.",
    (
        C("run_id", "VARCHAR", "run", "NOT NULL"),
        C("gpu_index", "SMALLINT", "NVML device index", "NOT NULL"),
        C("name", "VARCHAR", "device name, e.g. 'NVIDIA H200'"),
        C("uuid", "VARCHAR", "device UUID"),
        C("driver_version", "VARCHAR", "NVIDIA driver version"),
        C("memory_total_mib", "DOUBLE", "total device memory (MiB)"),
        C("power_limit_w", "DOUBLE", "enforced power limit (W)"),
    ),
)

GPU_SAMPLES = Table(
    "gpu_samples",
    "NVML samples on a fixed deadline schedule (default 10 Hz) during runs.",
    (
        C("run_id", "VARCHAR", "run the sample was taken during", "NOT NULL"),
        C("gpu_index", "SMALLINT", "NVML device index", "NOT NULL"),
        C("t_ns", "BIGINT", "perf_counter_ns when the sample was read", "NOT NULL"),
        C("util_gpu_pct", "REAL", "GPU utilisation (%)"),
        C("util_mem_pct", "REAL", "memory controller utilisation (%)"),
        C("mem_used_mib", "REAL", "device memory used (MiB)"),
        C("power_w", "REAL", "power draw (W)"),
        C("sm_clock_mhz", "REAL", "SM clock (MHz)"),
        C("mem_clock_mhz", "REAL", "memory clock (MHz)"),
        C("temp_c", "REAL", "GPU temperature (C)"),
        C("energy_mj", "DOUBLE", "total energy since driver load (mJ); read about once a second and at the end of a run (the read costs milliseconds), NULL in between"),
        C("clock_event_reasons", "UBIGINT", "NVML clock event (throttle) reasons bitmask"),
    ),
)

AUDIO_FILES = Table(
    "audio_files",
    "Saved output audio, addressed by content hash.",
    (
        C("sha256", "VARCHAR", "SHA-256 of the WAV file bytes", "NOT NULL"),
        C("path", "VARCHAR", "path relative to the artifacts folder", "NOT NULL"),
        C("run_id", "VARCHAR", "run that produced it", "NOT NULL"),
        C("request_index", "INTEGER", "request that produced it", "NOT NULL"),
        C("sample_rate", "INTEGER", "Hz", "NOT NULL"),
        C("samples", "BIGINT", "frames in the file", "NOT NULL"),
    ),
)

QUALITY_SCORES = Table(
    "quality_scores",
    "One row per (run, request, scorer): WER counts, speaker similarity or MOS. Errors are rows "
    "too (status='error'), so coverage gaps are visible.",
    (
        C("run_id", "VARCHAR", "run", "NOT NULL"),
        C("request_index", "INTEGER", "request within the run", "NOT NULL"),
        C("utt_id", "VARCHAR", "utterance id", "NOT NULL"),
        C("metric", "VARCHAR", "wer, sim or mos", "NOT NULL"),
        C("scorer_id", "VARCHAR", "stable scorer id, e.g. 'pocketsphinx-en', 'resemblyzer', 'dnsmos', 'whisper'", "NOT NULL"),
        C("scorer_version", "VARCHAR", "scorer package/model version"),
        C("model_hash", "VARCHAR", "SHA-256 of the scorer's model files"),
        C("status", "VARCHAR", "ok or error", "NOT NULL"),
        C("error", "VARCHAR", "why scoring failed (status='error')"),
        C("value", "DOUBLE", "per-utterance WER (ratio), SIM (cosine x 100) or MOS"),
        C("wer_substitutions", "INTEGER", "S (WER rows only)"),
        C("wer_deletions", "INTEGER", "D (WER rows only)"),
        C("wer_insertions", "INTEGER", "I (WER rows only)"),
        C("wer_ref_words", "INTEGER", "N, reference words after normalisation (WER rows only)"),
        C("hypothesis", "VARCHAR", "raw ASR transcript (WER rows only)"),
        C("ref_norm", "VARCHAR", "normalised reference text (WER rows only)"),
        C("hyp_norm", "VARCHAR", "normalised hypothesis (WER rows only)"),
        C("audio_sha256", "VARCHAR", "SHA-256 of the scored WAV"),
        C("scored_at", "TIMESTAMPTZ", "when the score was computed", "NOT NULL"),
    ),
    ("run_id", "request_index", "scorer_id"),
)

VERDICTS = Table(
    "verdicts",
    "Issued verdicts. Insert-only: a new analysis adds a verdict, it never edits an old one.",
    (
        C("verdict_id", "VARCHAR", "unique verdict id", "NOT NULL"),
        C("created_at", "TIMESTAMPTZ", "when it was issued", "NOT NULL"),
        C("plan_hash", "VARCHAR", "plan whose rules were applied"),
        C("kind", "VARCHAR", "quality (noninferiority gates), throughput (decision rule) or equivalence (docs/equivalence.md)", "NOT NULL"),
        C("name", "VARCHAR", "gate or rule name"),
        C("verdict", "VARCHAR", "PASS, FAIL or INCONCLUSIVE", "NOT NULL"),
        C("method", "VARCHAR", "CI method, e.g. 'percentile' or 'bca'"),
        C("draws", "INTEGER", "bootstrap draws B"),
        C("seed", "BIGINT", "bootstrap seed"),
        C("metrics_version", "VARCHAR", "metric definitions version"),
        C("inputs_json", "VARCHAR", "input row counts and content hashes"),
        C("checks_json", "VARCHAR", "every check: cell, metric, n, point estimate, bound, margin, passed"),
        C("attribution_json", "VARCHAR", "WER error attribution diagnostics"),
        C("document_json", "VARCHAR", "the full exported verdict document"),
    ),
    ("verdict_id",),
)

EXCLUSIONS = Table(
    "exclusions",
    "Runs explicitly excluded from aggregates, with the reason. The run itself stays in `runs`.",
    (
        C("run_id", "VARCHAR", "excluded run", "NOT NULL"),
        C("reason", "VARCHAR", "why (required)", "NOT NULL"),
        C("excluded_at", "TIMESTAMPTZ", "when", "NOT NULL"),
        C("audit_seq", "BIGINT", "audit event that recorded the exclusion"),
    ),
    ("run_id",),
)

ATTEMPTS = Table(
    "attempts",
    "Every configuration tried: measured, startup failures, rejected candidates, with reasons.",
    (
        C("attempt_id", "VARCHAR", "unique id", "NOT NULL"),
        C("plan_hash", "VARCHAR", "plan the attempt belongs to"),
        C("created_at", "TIMESTAMPTZ", "when", "NOT NULL"),
        C("engine", "VARCHAR", "engine name"),
        C("config_json", "VARCHAR", "the configuration tried (argv, env names -> value SHA-256, env_passthrough names, profile ...)"),
        C("outcome", "VARCHAR", "measured, startup_failed, rejected, selected, interrupted", "NOT NULL"),
        C("reason", "VARCHAR", "why (for rejections and failures)"),
        C("launch_id", "VARCHAR", "engine launch, if one happened"),
        C("run_ids_json", "VARCHAR", "runs produced, as a JSON list"),
    ),
    ("attempt_id",),
)

RUN_METRICS = Table(
    "run_metrics",
    "Per-run metrics computed once from the run's stored requests and chunks (stats/metrics/stored.py), keyed by "
    "the metric definitions' version and the metric parameters; derived data, recomputed when either changes.",
    (
        C("run_id", "VARCHAR", "run the metrics describe", "NOT NULL"),
        C("metrics_version", "VARCHAR", "version of the metric definitions they were computed under", "NOT NULL"),
        C("params_sha256", "VARCHAR", "SHA-256 of params_json", "NOT NULL"),
        C("params_json", "VARCHAR", "metric parameters (throughput_scale, stall_threshold_s, preroll_s) as canonical JSON", "NOT NULL"),
        C("requests", "INTEGER", "request rows of the run when computed (a changed count recomputes)", "NOT NULL"),
        C("metrics_json", "VARCHAR", "every RunMetrics field as JSON (floats round-trip exactly)", "NOT NULL"),
        C("computed_at", "TIMESTAMPTZ", "when they were computed", "NOT NULL"),
    ),
    ("run_id", "metrics_version", "params_sha256"),
)

EQUIVALENCE_MEASURES = Table(
    "equivalence_measures",
    "One row per (equivalence verdict, utterance, repeat, measure): the distance between the two arms' "
    "outputs for identical requests and the frozen tolerance it was judged against (docs/equivalence.md). "
    "Insert-only, stored with its verdict.",
    (
        C("verdict_id", "VARCHAR", "the equivalence verdict the row belongs to", "NOT NULL"),
        C("reference", "VARCHAR", "reference engine of the pair", "NOT NULL"),
        C("candidate", "VARCHAR", "candidate engine of the pair", "NOT NULL"),
        C("utt_id", "VARCHAR", "utterance", "NOT NULL"),
        C("repeat_index", "INTEGER", "repeat (the candidate's repeat r is compared with the reference's repeat r)", "NOT NULL"),
        C("measure", "VARCHAR", "pcm_identical, samples_identical, length_diff, max_abs, snr_db, log_mel_db, "
          "tensor:<name>:<max_abs|max_rel|cosine|present>, or output/tensors for a missing output", "NOT NULL"),
        C("value", "DOUBLE", "the measure (identity: 1 or 0; snr_db may be +Infinity = no difference); NULL when not computed"),
        C("tolerance", "DOUBLE", "the bound from the plan (NULL: not bounded)"),
        C("passed", "BOOLEAN", "within the bound; NULL when not judged"),
        C("detail", "VARCHAR", "why a row is missing or failed (the request's failure, the tensor's shapes)"),
        C("ref_run_id", "VARCHAR", "run of the reference output"),
        C("ref_request_index", "INTEGER", "request of the reference output"),
        C("ref_audio_sha256", "VARCHAR", "SHA-256 of the reference WAV (NULL when there was none)"),
        C("cand_run_id", "VARCHAR", "run of the candidate output"),
        C("cand_request_index", "INTEGER", "request of the candidate output"),
        C("cand_audio_sha256", "VARCHAR", "SHA-256 of the candidate WAV (NULL when there was none)"),
    ),
    ("verdict_id", "utt_id", "repeat_index", "measure"),
)

TABLES: tuple[Table, ...] = (
    PLANS, AUDIT_EVENTS, WORKLOAD_MANIFESTS, ENGINE_LAUNCHES, RUNS, REQUESTS, CHUNKS,
    GPU_DEVICES, GPU_SAMPLES, AUDIO_FILES, QUALITY_SCORES, VERDICTS, EXCLUSIONS, ATTEMPTS, RUN_METRICS,
    EQUIVALENCE_MEASURES,
)
TABLES_BY_NAME = {t.name: t for t in TABLES}


def _v1() -> list[str]:
    return [t.create_sql() for t in TABLES]


# Forward migrations: (version, description, statements). Append only.
MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (1, "initial schema", _v1()),
    (2, "request presets, voice placement, finish_reason, deploy configuration", [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS request_preset VARCHAR",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS voice_placement VARCHAR",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS body_template_sha256 VARCHAR",
        "ALTER TABLE requests ADD COLUMN IF NOT EXISTS finish_reason VARCHAR",
        "ALTER TABLE engine_launches ADD COLUMN IF NOT EXISTS deploy_json VARCHAR",
    ]),
    (3, "stored per-run metrics (run_metrics)", [RUN_METRICS.create_sql()]),
    (4, "placement of each run: Ray node, GPU UUID and GPU name (docs/cluster.md)", [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS node_id VARCHAR",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS gpu_uuid VARCHAR",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS gpu_name VARCHAR",
    ]),
    (5, "equivalence verdicts' per-utterance measures (docs/equivalence.md)", [EQUIVALENCE_MEASURES.create_sql()]),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def markdown() -> str:
    """docs/schema.md, one line per column."""
    out = [
        "# Run store schema",
        "",
        f"Schema version {SCHEMA_VERSION}. Generated by `python -m data.schema`; do not edit by hand.",
        "",
        "`*_ns` columns are `time.perf_counter_ns()` stamps; join them to wall time through the",
        "run's (`anchor_wall_ns`, `anchor_perf_ns`) pair.",
        "",
    ]
    for t in TABLES:
        out += [f"## `{t.name}`", "", t.doc, ""]
        if t.primary_key:
            out += [f"Primary key: ({', '.join(t.primary_key)})", ""]
        out += ["| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{c.name}` | {c.type} | {c.doc} |" for c in t.columns]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(markdown())
