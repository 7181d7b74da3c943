"""The SQL views of the metrics (docs/schema.md, "Views"; docs/metrics.md, "In SQL"), built from the
registry each time a store connection opens, so a metric added to stats/metrics/registry.py is a
`run_summary` column with no other change.

`run_summary`: one row per run, its identity (engine, concurrency, repeat, kind, pool, status,
excluded) and one column per registry metric in display units (`MetricDef.sql_column`: ttfa_p50_ms,
continuity_ok_pct ...), read from the stored metrics (`run_metrics`) of this console's
METRICS_VERSION under the metric parameters the run recorded. A run whose metrics are not stored
(yet) has `metrics_stored` false and NULL metric columns: any report, gate or export of its plan on
a writable store stores them (stats/metrics/stored.py).

`quality_summary`: one row per scored output and metric (long form): run, engine, concurrency,
repeat, utterance, metric, value, scorer, status.
"""

from __future__ import annotations

from data.metric_params import DEFAULT_METRIC_PARAMS
from data.views import View, ViewColumn, register_view
from stats.metrics import registry

RUN_IDENTITY: tuple[ViewColumn, ...] = (
    ViewColumn("run_id", "VARCHAR", "run"),
    ViewColumn("plan_hash", "VARCHAR", "plan the run belongs to (NULL: ad hoc)"),
    ViewColumn("engine", "VARCHAR", "engine name"),
    ViewColumn("concurrency", "INTEGER", "concurrent streams C"),
    ViewColumn("repeat", "INTEGER", "repeat index (runs.repeat_index)"),
    ViewColumn("kind", "VARCHAR", "measured, exploratory, warmup, profiled ... (runs.kind)"),
    ViewColumn("pool", "VARCHAR", "workload pool (the sweep's, or the reserved holdout)"),
    ViewColumn("status", "VARCHAR", "running, complete, incomplete or failed"),
    ViewColumn("excluded", "BOOLEAN", "the run is excluded (exclusions), so in no aggregate"),
    ViewColumn("metrics_stored", "BOOLEAN", "its metrics are stored under this console's metrics version and the "
                                            "run's parameters; false: the metric columns are NULL"),
    ViewColumn("requests", "INTEGER", "measured requests"),
)


def _param(name: str) -> str:
    """A metric parameter of the run (runs.params_json), the default where it recorded none."""
    default = float(getattr(DEFAULT_METRIC_PARAMS, name))
    return f"coalesce(TRY_CAST(r.params_json->>'$.{name}' AS DOUBLE), {default!r})"


def _metric_sql(d: registry.MetricDef) -> str:
    value = f"TRY_CAST(m.metrics_json->>'$.{d.name}' AS DOUBLE)"
    if d.scale != 1.0:
        value = f"{value} * {d.scale!r}"
    if d.integer:
        value = f"CAST(round({value}) AS BIGINT)"
    return f"{value} AS {d.sql_column}"


def run_summary_columns() -> list[ViewColumn]:
    return [*RUN_IDENTITY, *(ViewColumn(d.sql_column, "BIGINT" if d.integer else "DOUBLE",
                                        f"{d.label}" + (f" ({d.unit})" if d.unit else "") + f": {d.doc}")
                             for d in registry.METRICS)]


def run_summary_sql() -> str:
    params = " AND ".join([*(f"TRY_CAST(m.params_json->>'$.{p}' AS DOUBLE) = {_param(p)}"
                             for p in ("throughput_scale", "stall_threshold_s", "preroll_s")),
                           *(f"TRY_CAST(m.params_json->>'$.{p}' AS DOUBLE) IS NOT DISTINCT FROM "
                             f"TRY_CAST(r.params_json->>'$.{p}' AS DOUBLE)" for p in ("slo_ttfa_ms", "slo_rtf"))])
    metrics = ", ".join(_metric_sql(d) for d in registry.METRICS)
    return (
        "SELECT r.run_id, r.plan_hash, r.engine, r.concurrency, r.repeat_index AS repeat, r.kind, r.pool, r.status, "
        "(x.run_id IS NOT NULL) AS excluded, (m.run_id IS NOT NULL) AS metrics_stored, "
        f"CAST(m.metrics_json->>'$.requests' AS INTEGER) AS requests, {metrics} "
        "FROM runs r LEFT JOIN exclusions x USING (run_id) "
        f"LEFT JOIN run_metrics m ON m.run_id = r.run_id AND m.metrics_version = '{registry.METRICS_VERSION}' "
        f"AND {params}"
    )


QUALITY_COLUMNS: tuple[ViewColumn, ...] = (
    ViewColumn("run_id", "VARCHAR", "run"),
    ViewColumn("engine", "VARCHAR", "engine name"),
    ViewColumn("concurrency", "INTEGER", "concurrent streams C"),
    ViewColumn("repeat", "INTEGER", "repeat index"),
    ViewColumn("kind", "VARCHAR", "run kind"),
    ViewColumn("pool", "VARCHAR", "workload pool"),
    ViewColumn("request_index", "INTEGER", "request within the run"),
    ViewColumn("utt_id", "VARCHAR", "utterance id"),
    ViewColumn("metric", "VARCHAR", "wer, sim or mos (docs/quality.md)"),
    ViewColumn("value", "DOUBLE", "per-output WER (ratio), SIM (cosine x 100) or MOS; NULL when scoring failed"),
    ViewColumn("scorer", "VARCHAR", "scorer id (pocketsphinx-en, whisper, resemblyzer, dnsmos, utmos22 ...)"),
    ViewColumn("status", "VARCHAR", "ok or error"),
)


def quality_summary_sql() -> str:
    return ("SELECT q.run_id, r.engine, r.concurrency, r.repeat_index AS repeat, r.kind, r.pool, q.request_index, "
            "q.utt_id, q.metric, q.value, q.scorer_id AS scorer, q.status "
            "FROM quality_scores q JOIN runs r USING (run_id)")


register_view(View("run_summary", "One row per run: its identity and one column per registry metric "
                   "(stats/metrics/registry.py) in display units (the unit is in the column name: `_ms`, `_pct`; "
                   "throughput in audio tok/s), from the stored metrics of this console's metrics version "
                   "(docs/metrics.md, \"In SQL\"). A TEMP view built when the store opens.",
                   run_summary_columns, run_summary_sql))
register_view(View("quality_summary", "One row per scored output and quality metric (long form): run, engine, "
                   "concurrency, utterance, metric, value, scorer. A TEMP view built when the store opens.",
                   lambda: list(QUALITY_COLUMNS), quality_summary_sql))
