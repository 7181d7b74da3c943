"""The SQL views of the metrics (docs/schema.md, "Views"; docs/metrics.md, "In SQL"), built from the
registry, so a metric added to stats/metrics/registry.py is a `run_summary` and `cell_summary`
column with no other change. They are stored in the file with their definition's version and
kept in step with this console's definitions on every open (data/views.py).

`run_summary`: one row per run, its identity (engine, concurrency, repeat, kind, pool, phase,
status, excluded) and one column per registry metric in display units (`MetricDef.sql_column`:
ttfa_p50_ms, continuity_ok_pct ...), read from the stored metrics (`run_metrics`) of this console's
METRICS_VERSION under the metric parameters the run recorded. A run whose metrics are not stored
(yet) has `metrics_stored` false and NULL metric columns: any report, gate or export of its plan on
a writable store stores them (stats/metrics/stored.py).

`cell_summary`: one row per plan x engine x concurrency x phase over the runs that enter
aggregates, each report metric's median, min, max and CV across the cell's runs. The aggregates are
`cell_aggregates_sql`, the one statement the report's cells are computed with as well
(stats/results/report.py runs it over the runs it shows), so the view's sweep cells are the
report's cells, number for number. Imported figures are rows of phase `imported`.

`quality_summary`: one row per scored output and metric, one unit per column (wer_pct, sim_x100,
mos), with the run's pool, phase and exclusion.
"""

from __future__ import annotations

from data.metric_params import DEFAULT_METRIC_PARAMS
from data.queries import in_aggregates, run_phase
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
    ViewColumn("phase", "VARCHAR", "sweep, quality (the holdout phase's arms), equivalence, probe (no plan) or smoke "
                                   "(docs/results.md, \"Phases\"); the report's table is the sweep"),
    ViewColumn("status", "VARCHAR", "running, complete, incomplete or failed"),
    ViewColumn("excluded", "BOOLEAN", "the run is excluded (exclusions), so in no aggregate"),
    ViewColumn("in_aggregates", "BOOLEAN", "the run enters aggregates: measured, complete, not excluded "
                                           "(data/queries.py; cell_summary's runs)"),
    ViewColumn("metrics_stored", "BOOLEAN", "its metrics are stored under this console's metrics version and the "
                                            "run's parameters; false: the metric columns are NULL"),
    ViewColumn("requests", "INTEGER", "measured requests"),
)


def _param(name: str) -> str:
    """A metric parameter of the run (runs.params_json), the default where it recorded none."""
    default = float(getattr(DEFAULT_METRIC_PARAMS, name))
    return f"coalesce(TRY_CAST(r.params_json->>'$.{name}' AS DOUBLE), {default!r})"


def _raw(d: registry.MetricDef) -> str:
    """A metric's stored value in base units (seconds, ratios)."""
    return f"TRY_CAST(m.metrics_json->>'$.{d.name}' AS DOUBLE)"


def _metric_sql(d: registry.MetricDef) -> str:
    value = _raw(d)
    if d.scale != 1.0:
        value = f"{value} * {d.scale!r}"
    if d.integer:
        value = f"CAST(round({value}) AS BIGINT)"
    return f"{value} AS {d.sql_column}"


def _runs_from() -> str:
    """Every run with its exclusion and its stored metrics (alias m) under its own parameters."""
    params = " AND ".join([*(f"TRY_CAST(m.params_json->>'$.{p}' AS DOUBLE) = {_param(p)}"
                             for p in ("throughput_scale", "stall_threshold_s", "preroll_s")),
                           *(f"TRY_CAST(m.params_json->>'$.{p}' AS DOUBLE) IS NOT DISTINCT FROM "
                             f"TRY_CAST(r.params_json->>'$.{p}' AS DOUBLE)" for p in ("slo_ttfa_ms", "slo_rtf"))])
    return ("FROM runs r LEFT JOIN exclusions x USING (run_id) "
            f"LEFT JOIN run_metrics m ON m.run_id = r.run_id AND m.metrics_version = '{registry.METRICS_VERSION}' "
            f"AND {params}")


def run_summary_columns() -> list[ViewColumn]:
    return [*RUN_IDENTITY, *(ViewColumn(d.sql_column, "BIGINT" if d.integer else "DOUBLE",
                                        f"{d.label}" + (f" ({d.unit})" if d.unit else "") + f": {d.doc}")
                             for d in registry.METRICS)]


def run_summary_sql() -> str:
    metrics = ", ".join(_metric_sql(d) for d in registry.METRICS)
    return (
        "SELECT r.run_id, r.plan_hash, r.engine, r.concurrency, r.repeat_index AS repeat, r.kind, r.pool, "
        f"{run_phase('r')} AS phase, r.status, "
        f"(x.run_id IS NOT NULL) AS excluded, {in_aggregates('r')} AS in_aggregates, "
        "(m.run_id IS NOT NULL) AS metrics_stored, "
        f"CAST(m.metrics_json->>'$.requests' AS INTEGER) AS requests, {metrics} {_runs_from()}"
    )


# -- cell_summary: the report's cells --------------------------------------------------------------
def cell_metrics() -> tuple[registry.MetricDef, ...]:
    """The metrics of a cell: the report's two tables (the registry's `report`, `report_service`)."""
    on = (registry.REPORT, registry.REPORT_SERVICE)
    return tuple(d for d in registry.METRICS if any(s in d.on for s in on))


def cell_aggregates_sql(source: str) -> str:
    """The one computation of a cell's figures: per (plan_hash, engine, concurrency, phase) of
    `source` (one row per run, each metric in base units in a column named as the metric), the
    runs, and for each cell metric its median, min, max, CV (sample standard deviation over the
    mean; NULL with fewer than two values or a zero mean) and count of values (`<name>__median`
    ...), NaN and NULL left out. `cell_summary` runs it over the stored metrics, the report over
    the metrics it shows (stats/results/report.py)."""
    parts = []
    for d in cell_metrics():
        x = f'(CASE WHEN isnan("{d.name}") THEN NULL ELSE "{d.name}" END)'
        parts += [f"median({x}) AS {d.name}__median", f"min({x}) AS {d.name}__min", f"max({x}) AS {d.name}__max",
                  f"CASE WHEN count({x}) >= 2 AND avg({x}) <> 0 THEN stddev_samp({x}) / avg({x}) END AS {d.name}__cv",
                  f"count({x}) AS {d.name}__n"]
    return (f"SELECT plan_hash, engine, concurrency, phase, count(*) AS runs, {', '.join(parts)} "
            f"FROM {source} GROUP BY plan_hash, engine, concurrency, phase")


CELL_IDENTITY: tuple[ViewColumn, ...] = (
    ViewColumn("plan_hash", "VARCHAR", "plan (NULL: ad hoc probes, imported figures)"),
    ViewColumn("engine", "VARCHAR", "engine name (imported: the source's own label)"),
    ViewColumn("concurrency", "INTEGER", "concurrent streams C"),
    ViewColumn("phase", "VARCHAR", "sweep (the report's table), quality, equivalence, probe, smoke, or imported (a "
                                   "figure from outside: not measured, never aggregated)"),
    ViewColumn("runs", "INTEGER", "runs in the cell: measured, complete, not excluded (0 for an imported figure)"),
)


def cell_summary_columns() -> list[ViewColumn]:
    out = list(CELL_IDENTITY)
    for d in cell_metrics():
        what = f"{d.label}" + (f" ({d.unit})" if d.unit else "")
        out += [ViewColumn(d.sql_column, "DOUBLE", f"{what}: median across the cell's runs"),
                ViewColumn(f"{d.sql_column}_min", "DOUBLE", f"{what}: lowest run"),
                ViewColumn(f"{d.sql_column}_max", "DOUBLE", f"{what}: highest run"),
                ViewColumn(f"{d.sql_column}_cv_pct", "DOUBLE", f"{what}: coefficient of variation across runs (%)")]
    out.append(ViewColumn("note", "VARCHAR", "imported figures: where from and the unit as stated; NULL for measured cells"))
    return out


def _cell_runs_sql() -> str:
    """One row per run that enters aggregates, with its phase and base-unit metrics."""
    metrics = ", ".join(f'{_raw(d)} AS "{d.name}"' for d in cell_metrics())
    return (f"SELECT r.run_id, r.plan_hash, r.engine, r.concurrency, {run_phase('r')} AS phase, {metrics} "
            f"{_runs_from()} WHERE {in_aggregates('r')}")


def cell_summary_sql() -> str:
    measured = []
    imported = []
    for d in cell_metrics():
        s = f" * {d.scale!r}" if d.scale != 1.0 else ""
        measured += [f"{d.name}__median{s} AS {d.sql_column}", f"{d.name}__min{s} AS {d.sql_column}_min",
                     f"{d.name}__max{s} AS {d.sql_column}_max", f"{d.name}__cv * 100 AS {d.sql_column}_cv_pct"]
        # the figure under the column's name is in display units already; under the metric's, in base units
        figure = f"CASE WHEN i.metric = '{d.sql_column}' THEN i.value WHEN i.metric = '{d.name}' THEN i.value{s} END"
        imported += [f"{figure} AS {d.sql_column}", f"{figure} AS {d.sql_column}_min", f"{figure} AS {d.sql_column}_max",
                     f"CAST(NULL AS DOUBLE) AS {d.sql_column}_cv_pct"]
    names = tuple(n for d in cell_metrics() for n in (d.name, d.sql_column))
    return (f"SELECT plan_hash, engine, concurrency, phase, runs, {', '.join(measured)}, CAST(NULL AS VARCHAR) AS note "
            f"FROM ({cell_aggregates_sql(f'({_cell_runs_sql()})')}) "
            f"UNION ALL SELECT CAST(NULL AS VARCHAR), i.engine, i.concurrency, 'imported', 0, {', '.join(imported)}, "
            "'imported, not measured: ' || i.source || ' (' || i.reference || '); ' || i.metric || ' ' || i.value_text "
            "|| ' ' || i.unit || ' as stated' "
            f"FROM imported_results i WHERE i.metric IN ({', '.join(repr(n) for n in names)})")


# -- quality_summary -------------------------------------------------------------------------------
QUALITY_COLUMNS: tuple[ViewColumn, ...] = (
    ViewColumn("run_id", "VARCHAR", "run"),
    ViewColumn("plan_hash", "VARCHAR", "plan the run belongs to"),
    ViewColumn("engine", "VARCHAR", "engine name"),
    ViewColumn("concurrency", "INTEGER", "concurrent streams C"),
    ViewColumn("repeat", "INTEGER", "repeat index"),
    ViewColumn("kind", "VARCHAR", "run kind"),
    ViewColumn("pool", "VARCHAR", "workload pool of the run (the quality arms': the plan's `quality.pool`)"),
    ViewColumn("phase", "VARCHAR", "the run's phase (run_summary.phase): quality for the holdout phase's arms"),
    ViewColumn("run_status", "VARCHAR", "the run's status (complete, incomplete ...)"),
    ViewColumn("excluded", "BOOLEAN", "the run is excluded (exclusions), so in no aggregate"),
    ViewColumn("request_index", "INTEGER", "request within the run"),
    ViewColumn("is_warmup", "BOOLEAN", "an in-run warmup request (no aggregate reads its scores)"),
    ViewColumn("in_aggregates", "BOOLEAN", "the output enters aggregates: its run is measured, complete and not "
                                           "excluded, and it is no warmup (the report's quality under load reads these)"),
    ViewColumn("utt_id", "VARCHAR", "utterance id"),
    ViewColumn("metric", "VARCHAR", "wer, sim or mos (docs/quality.md)"),
    ViewColumn("scorer", "VARCHAR", "scorer id (pocketsphinx-en, whisper, resemblyzer, dnsmos, utmos22 ...)"),
    ViewColumn("status", "VARCHAR", "ok or error (the score's)"),
    ViewColumn("wer_pct", "DOUBLE", "WER rows: the output's WER in % (100 x errors / reference words); NULL otherwise"),
    ViewColumn("wer_errors", "INTEGER", "WER rows: substitutions + deletions + insertions (corpus WER: "
                                        "100 x sum(wer_errors) / sum(wer_words))"),
    ViewColumn("wer_words", "INTEGER", "WER rows: reference words after normalisation"),
    ViewColumn("sim_x100", "DOUBLE", "SIM rows: speaker similarity, cosine x 100; NULL otherwise"),
    ViewColumn("mos", "DOUBLE", "MOS rows: the scorer's mean opinion score (1-5); NULL otherwise"),
)


def quality_summary_sql() -> str:
    def of(metric: str, value: str) -> str:
        return f"CASE WHEN q.metric = '{metric}' THEN {value} END"

    return ("SELECT q.run_id, r.plan_hash, r.engine, r.concurrency, r.repeat_index AS repeat, r.kind, r.pool, "
            f"{run_phase('r')} AS phase, r.status AS run_status, "
            "EXISTS (SELECT 1 FROM exclusions x WHERE x.run_id = q.run_id) AS excluded, q.request_index, "
            "coalesce(rq.is_warmup, false) AS is_warmup, "
            f"({in_aggregates('r')} AND NOT coalesce(rq.is_warmup, false)) AS in_aggregates, "
            "q.utt_id, q.metric, q.scorer_id AS scorer, q.status, "
            f"{of('wer', 'q.value * 100')} AS wer_pct, "
            f"{of('wer', 'q.wer_substitutions + q.wer_deletions + q.wer_insertions')} AS wer_errors, "
            f"{of('wer', 'q.wer_ref_words')} AS wer_words, {of('sim', 'q.value')} AS sim_x100, "
            f"{of('mos', 'q.value')} AS mos "
            "FROM quality_scores q JOIN runs r USING (run_id) "
            "LEFT JOIN requests rq ON rq.run_id = q.run_id AND rq.request_index = q.request_index")


register_view(View("run_summary", "One row per run: its identity and phase, and one column per registry metric "
                   "(stats/metrics/registry.py) in display units (the unit is in the column name: `_ms`, `_pct`; "
                   "throughput in audio tok/s), from the stored metrics of this console's metrics version "
                   "(docs/metrics.md, \"In SQL\").",
                   run_summary_columns, run_summary_sql))
register_view(View("cell_summary", "One row per plan x engine x concurrency x phase: the runs that enter aggregates "
                   "(measured, complete, not excluded) and each report metric's median, min, max and CV across them, in "
                   "display units; `phase = 'sweep'` is the report's table, cell for cell (docs/results.md, \"Cells\"). "
                   "Figures imported from outside are rows of phase `imported`.",
                   cell_summary_columns, cell_summary_sql))
register_view(View("quality_summary", "One row per scored output and quality metric (long form): the run's plan, "
                   "engine, concurrency, pool, phase and exclusion, the utterance, and the score in its own unit's "
                   "column (`wer_pct`, `sim_x100`, `mos`; docs/quality.md).",
                   lambda: list(QUALITY_COLUMNS), quality_summary_sql))
