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
from typing import Sequence

from data.views import VIEWS, View
from data.views import markdown as views_markdown


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
        C("checkpoints_json", "VARCHAR", "checkpoint files hashed at freeze (canonical JSON): {files: {path: {size, sha256}}, "
          "engines: {name: [paths]}}; NULL when the plan names none (docs/plans.md)"),
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

# what code a launch ran (docs/engines.md, "Engine identity"); NULL where the plan names no source
IDENTITY_COLUMNS = (
    C("source_kind", "VARCHAR", "'git' (a checkout) or 'dist' (an installed distribution); NULL: no source named"),
    C("source_location", "VARCHAR", "the checkout's folder, or the distribution's name"),
    C("source_commit", "VARCHAR", "git: HEAD's commit; dist: the VCS commit pip recorded in direct_url.json, if any"),
    C("source_tree", "VARCHAR", "git: HEAD's tree hash"),
    C("source_dirty", "BOOLEAN", "git: the checkout had changes against HEAD, untracked files included"),
    C("source_version", "VARCHAR", "dist: the installed version"),
    C("source_python", "VARCHAR", "dist: the interpreter whose metadata was read"),
    C("patch_path", "VARCHAR", "the plan's `patch` file: the checkout's diff against its commit"),
    C("patch_sha256", "VARCHAR", "SHA-256 of the patch file (equal to that of the checkout's diff at launch)"),
    C("precision_change", "BOOLEAN", "the plan marks this engine as altering precision"),
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
        C("settings_json", "VARCHAR", "what the launch's argv, deploy config and checkpoint config.json set for "
          "sampling, output length and precision, by key (engine_adapters/launch_settings.py; docs/engines.md, "
          "\"Launch settings\")"),
        *IDENTITY_COLUMNS,
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
        C("kind", "VARCHAR", "warmup, measured, exploratory, profiled, equivalence; smoke (declared: data/queries.py PHASES)", "NOT NULL"),
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
        C("params_json", "VARCHAR", "request and metric parameters in force (timeout, pre-roll ...); `sampling`: the sampling "
          "and output-length keys the request body carries (plan, preset, extra_body; docs/engines.md)"),
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
        C("audio_path", "VARCHAR", "saved audio of the response, relative to the artifacts folder: FLAC (16-bit, lossless; WAV for runs recorded before it; docs/results.md, \"Saved audio\")"),
        C("audio_sha256", "VARCHAR", "SHA-256 of the saved audio file's bytes"),
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
        C("sha256", "VARCHAR", "SHA-256 of the audio file's bytes (FLAC, or WAV for older runs)", "NOT NULL"),
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
        C("audio_sha256", "VARCHAR", "SHA-256 of the scored audio file"),
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
        C("kind", "VARCHAR", "quality (noninferiority gates), throughput (decision rule), equivalence (docs/equivalence.md) or acceptance (every piece combined, docs/statistics.md)", "NOT NULL"),
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
        C("config_sha256", "VARCHAR", "the candidate (configuration) the attempt tried: `candidates.config_sha256`"),
    ),
    ("attempt_id",),
)

CANDIDATES = Table(
    "candidates",
    "Every configuration ever launched or probed (docs/results.md, \"Candidates\"): a named hypothesis keyed by the "
    "SHA-256 of its configuration, with its status. A row changes over its life (proposed, measured, selected or "
    "rejected); each change is a `candidate_recorded` audit event holding the row's hash as it then stood.",
    (
        C("config_sha256", "VARCHAR", "SHA-256 of config_json: what identifies the configuration", "NOT NULL"),
        C("name", "VARCHAR", "the engine name it was first registered under", "NOT NULL"),
        C("config_json", "VARCHAR", "canonical JSON: adapter, revision, profile, argv, env names, deploy config (path, "
          "sha256), source, patch (path, sha256), precision_change, dialect, request body template sha256", "NOT NULL"),
        C("hypothesis", "VARCHAR", "what the configuration is expected to show (the plan's `engines[].hypothesis`)"),
        C("origin", "VARCHAR", "how it was first registered: plan (a frozen plan's engine) or probe (`campaign probe`)", "NOT NULL"),
        C("registered_at", "TIMESTAMPTZ", "when it was first registered (shown only; order by audit seq)", "NOT NULL"),
        C("registered_by", "VARCHAR", "user@host that registered it"),
        C("status", "VARCHAR", "proposed, measured, startup_failed, selected or rejected (rejected is final)", "NOT NULL"),
        C("reason", "VARCHAR", "why the latest status change (a rejection's reason, a selection's note)"),
        C("verdicts_json", "VARCHAR", "JSON list: the verdict ids the latest selection or rejection rests on"),
        C("plan_hash", "VARCHAR", "plan in whose context the latest change happened (NULL for a probe)"),
        C("changed_by", "VARCHAR", "user@host that made the latest change"),
    ),
    ("config_sha256",),
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

VALIDATOR_RUNS = Table(
    "validator_runs",
    "Every run of a plan validator (`campaign validate`, docs/plans.md \"Validators\"), passed or not; each "
    "announced by a `validator_run` audit event, whose seq orders it against the freeze and the launches. Insert-only.",
    (
        C("validator_run_id", "VARCHAR", "unique id of this run", "NOT NULL"),
        C("plan_hash", "VARCHAR", "frozen plan whose validator ran", "NOT NULL"),
        C("name", "VARCHAR", "the validator's `name`", "NOT NULL"),
        C("engines_json", "VARCHAR", "JSON list: the engines whose PASS it gates (its `applies_to`, or every engine)", "NOT NULL"),
        C("argv_json", "VARCHAR", "argv as a JSON list (run without a shell)", "NOT NULL"),
        C("cwd", "VARCHAR", "absolute folder it ran in"),
        C("env_json", "VARCHAR", "environment it was given as a JSON object: name -> \"sha256:<hex>\" of the value, never the value"),
        C("timeout_s", "DOUBLE", "the plan's timeout_s"),
        C("status", "VARCHAR", "passed (exit 0), failed (non-zero exit), timed_out, not_started (missing executable, cwd ...)", "NOT NULL"),
        C("exit_code", "INTEGER", "process exit code (negative: killed by that signal); NULL when it did not start"),
        C("reason", "VARCHAR", "one line: why it did not pass"),
        C("duration_ns", "BIGINT", "perf_counter_ns from spawn to exit (or to the kill at the timeout)"),
        C("stdout_sha256", "VARCHAR", "SHA-256 of everything it wrote to stdout"),
        C("stderr_sha256", "VARCHAR", "SHA-256 of everything it wrote to stderr"),
        C("stdout_tail", "VARCHAR", "last 4000 characters of stdout (env values of 8+ characters redacted)"),
        C("stderr_tail", "VARCHAR", "last 4000 characters of stderr (env values of 8+ characters redacted)"),
        C("started_at", "TIMESTAMPTZ", "wall-clock start (shown only; order by the audit event's seq)", "NOT NULL"),
        C("ended_at", "TIMESTAMPTZ", "wall-clock end", "NOT NULL"),
        C("host", "VARCHAR", "user@host that ran it"),
    ),
    ("validator_run_id",),
)

IMPORTED_RESULTS = Table(
    "imported_results",
    "Figures imported from outside the campaign (`campaign import results`; docs/results.md, \"Imported results\"): "
    "hypotheses, never measurements. No aggregate, gate, rule or verdict reads this table. Insert-only; each import "
    "is announced by a `results_imported` audit event with the digest of its rows.",
    (
        C("import_id", "VARCHAR", "one import of one file", "NOT NULL"),
        C("row_number", "INTEGER", "the figure's row in the file (CSV: line number; JSON: 1-based index)", "NOT NULL"),
        C("engine", "VARCHAR", "engine label as the source names it (not a plan engine)", "NOT NULL"),
        C("concurrency", "INTEGER", "concurrency the source states"),
        C("metric", "VARCHAR", "metric name as the source states it, e.g. throughput", "NOT NULL"),
        C("value_text", "VARCHAR", "the value exactly as written in the file (the row hash covers it)", "NOT NULL"),
        C("value", "DOUBLE", "value_text as a number (must equal it: audit verify)", "NOT NULL"),
        C("unit", "VARCHAR", "unit as the source states it", "NOT NULL"),
        C("requests_json", "VARCHAR", "optional per-request rows the source gave, as canonical JSON"),
        C("source", "VARCHAR", "who published it (--source)", "NOT NULL"),
        C("reference", "VARCHAR", "where: URL, commit, paper (--ref)", "NOT NULL"),
        C("file_path", "VARCHAR", "file imported"),
        C("file_sha256", "VARCHAR", "SHA-256 of the file's bytes", "NOT NULL"),
        C("imported_at", "TIMESTAMPTZ", "when it was imported (shown only)", "NOT NULL"),
        C("imported_by", "VARCHAR", "user@host"),
    ),
    ("import_id", "row_number"),
)

PROFILER_WINDOWS = Table(
    "profiler_windows",
    "Profiler windows (`campaign profile start|stop`, or a plan whose sweep kind is `profiled`): a measured run of "
    "the window's engine whose run_started..run_ended overlaps start_seq..stop_seq (audit sequence) is excluded "
    "with reason 'profiled: window W' (docs/results.md, \"Profiler windows\"). Each write is a `profiler_window` "
    "audit event.",
    (
        C("window_id", "VARCHAR", "unique id of the window", "NOT NULL"),
        C("plan_hash", "VARCHAR", "plan whose profiled sweep opened it (NULL for `campaign profile start`)"),
        C("engine", "VARCHAR", "engine profiled (runs of other engines are not affected)", "NOT NULL"),
        C("tool", "VARCHAR", "profiler, e.g. 'nsys profile', 'py-spy record'", "NOT NULL"),
        C("note", "VARCHAR", "free text"),
        C("status", "VARCHAR", "open or closed", "NOT NULL"),
        C("start_seq", "BIGINT", "seq of the profiler_window event that opened it", "NOT NULL"),
        C("stop_seq", "BIGINT", "seq of the event that closed it (NULL while open: open windows reach every later run)"),
        C("started_at", "TIMESTAMPTZ", "wall clock at start (shown only; overlap is by seq)", "NOT NULL"),
        C("stopped_at", "TIMESTAMPTZ", "wall clock at stop (shown only)"),
        C("started_by", "VARCHAR", "user@host"),
    ),
    ("window_id",),
)

RECHECK_RESULTS = Table(
    "recheck_results",
    "ASR determinism rechecks (`campaign score --recheck`): each stored WER row re-transcribed, with the stored "
    "and the new hypothesis. Insert-only; each recheck is announced by a `recheck_stored` event with its rows' digest.",
    (
        C("recheck_id", "VARCHAR", "one `score --recheck` invocation", "NOT NULL"),
        C("plan_hash", "VARCHAR", "plan of the rechecked run", ),
        C("run_id", "VARCHAR", "run of the rechecked output", "NOT NULL"),
        C("request_index", "INTEGER", "request of the rechecked output", "NOT NULL"),
        C("utt_id", "VARCHAR", "utterance", "NOT NULL"),
        C("scorer_id", "VARCHAR", "ASR scorer", "NOT NULL"),
        C("stored_hypothesis", "VARCHAR", "transcript stored in quality_scores"),
        C("new_hypothesis", "VARCHAR", "transcript of the recheck (NULL: the audio could not be read)"),
        C("stored_errors", "INTEGER", "S+D+I stored"),
        C("new_errors", "INTEGER", "S+D+I of the recheck"),
        C("same_model", "BOOLEAN", "the scorer's model files hash as the stored rows' did", "NOT NULL"),
        C("reproduces", "BOOLEAN", "the new transcript equals the stored one", "NOT NULL"),
        C("note", "VARCHAR", "why not comparable, if so"),
        C("rechecked_at", "TIMESTAMPTZ", "when (shown only)", "NOT NULL"),
    ),
    ("recheck_id", "run_id", "request_index", "scorer_id"),
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
        C("ref_audio_sha256", "VARCHAR", "SHA-256 of the reference's audio file (NULL when there was none)"),
        C("cand_run_id", "VARCHAR", "run of the candidate output"),
        C("cand_request_index", "INTEGER", "request of the candidate output"),
        C("cand_audio_sha256", "VARCHAR", "SHA-256 of the candidate's audio file (NULL when there was none)"),
    ),
    ("verdict_id", "utt_id", "repeat_index", "measure"),
)

SERVER_METRICS = Table(
    "server_metrics",
    "The engine's own Prometheus samples, scraped by the console during each run (docs/results.md, "
    "\"Server metrics\"): per scrape one row of its own (family NULL, sample 'scrape': value = samples kept, "
    "labels_json {\"dropped\": N} past the cap, `error` = why it failed), then one row per kept sample. "
    "Insert-only, stored when the run ends; the run's digest does not cover them.",
    (
        C("run_id", "VARCHAR", "run during which the scrape was taken", "NOT NULL"),
        C("engine", "VARCHAR", "plan engine name", "NOT NULL"),
        C("scrape_seq", "INTEGER", "0-based scrape number within the run (0: before the first request; the last: "
          "after the last)", "NOT NULL"),
        C("t_ns", "BIGINT", "perf_counter_ns when the scrape's response had arrived (or failed)", "NOT NULL"),
        C("family", "VARCHAR", "metric family as exposed (e.g. vllm_omni:audio_ttfp_s); NULL on the scrape's own row"),
        C("type", "VARCHAR", "family type: counter, gauge, histogram, summary, untyped"),
        C("sample", "VARCHAR", "sample name (e.g. vllm_omni:audio_ttfp_s_bucket, ..._sum, ..._count, ..._total)"),
        C("labels_json", "VARCHAR", "the sample's labels, canonical JSON ('{}' for none)"),
        C("value", "DOUBLE", "the sample's value (the scrape's own row: samples kept)"),
        C("error", "VARCHAR", "the scrape's own row: why it failed (one line); NULL when it succeeded"),
    ),
)

TABLES: tuple[Table, ...] = (
    PLANS, AUDIT_EVENTS, WORKLOAD_MANIFESTS, ENGINE_LAUNCHES, RUNS, REQUESTS, CHUNKS,
    GPU_DEVICES, GPU_SAMPLES, AUDIO_FILES, QUALITY_SCORES, VERDICTS, EXCLUSIONS, ATTEMPTS, RUN_METRICS,
    VALIDATOR_RUNS, IMPORTED_RESULTS, PROFILER_WINDOWS, RECHECK_RESULTS, CANDIDATES, EQUIVALENCE_MEASURES,
    SERVER_METRICS,
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
    (5, "engine source identity and patch on each launch; checkpoints hashed at freeze (docs/engines.md)", [
        *(f"ALTER TABLE engine_launches ADD COLUMN IF NOT EXISTS {c.name} {c.type}" for c in IDENTITY_COLUMNS),
        "ALTER TABLE plans ADD COLUMN IF NOT EXISTS checkpoints_json VARCHAR",
    ]),
    (6, "validator runs (validator_runs; docs/plans.md, \"Validators\")", [VALIDATOR_RUNS.create_sql()]),
    (7, "imported results, profiler windows, recheck results (docs/results.md)",
     [IMPORTED_RESULTS.create_sql(), PROFILER_WINDOWS.create_sql(), RECHECK_RESULTS.create_sql()]),
    (8, "candidates and the configuration each attempt tried (docs/results.md, \"Candidates\")", [
        CANDIDATES.create_sql(),
        "ALTER TABLE attempts ADD COLUMN IF NOT EXISTS config_sha256 VARCHAR",
    ]),
    (9, "equivalence verdicts' per-utterance measures (docs/equivalence.md)", [EQUIVALENCE_MEASURES.create_sql()]),
    (11, "the engines' own metrics scraped during each run (server_metrics; docs/results.md)",
     [SERVER_METRICS.create_sql()]),
    (13, "each launch's sampling, length and precision settings (engine_launches.settings_json; docs/engines.md)", [
        "ALTER TABLE engine_launches ADD COLUMN IF NOT EXISTS settings_json VARCHAR",
    ]),
    # No statement of its own: the views' SQL belongs to the layer that defines them (data/views.py),
    # so the migrating transaction stores every registered view (data/store.py, Store._migrate).
    (14, "the views (run_summary, quality_summary, cell_summary) stored in the file, versioned (data/views.py)", []),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
# Migrations a read-only open may leave pending: they add only stored views, which a reader makes
# as TEMP views of its own instead (data/views.py), so an older store is readable without a write.
READER_SAFE_MIGRATIONS = frozenset({14})


def markdown(views: Sequence[View] = ()) -> str:
    """docs/schema.md, one line per column of every table, then the `views` (data/views.py)."""
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
    if views:
        out += ["# Views", "",
                "Stored in the file (schema version 14), so any DuckDB client reads them: "
                "`duckdb campaign.duckdb -c \"from cell_summary\"`. Each view's comment carries the SHA-256 of its "
                "definition; a read-write open by the console replaces a view whose definition differs from its own "
                "(an older store gets them on its next write open), and a read-only open, which never writes, shadows "
                "such a view with a TEMP view of its own in that connection (data/views.py). Query them like tables.",
                ""]
        out += views_markdown(list(views))
    return "\n".join(out)


if __name__ == "__main__":
    # The statistics layer registers the views it defines when imported (data/views.py); this
    # generator is a tool run from the repository, not a module the data layer depends on.
    import importlib

    importlib.import_module("stats.metrics.views")
    sys.stdout.write(markdown(list(VIEWS.values())))
