"""Scrape an engine's own Prometheus metrics while a run drives it (docs/results.md, "Server metrics").

A thread of the recording process (never the driver's: its loop stamps chunks) GETs the engine's
`metrics_path` once before the run's first request, every `interval_s` while it runs, and once
after its last, parses the text with prometheus_client's parser and keeps the samples of the
audio-serving families (`KEPT_PREFIXES`). Every scrape has its own row (family NULL, sample
'scrape'): the samples it kept, or why it failed (refused, timeout, HTTP error, unparsable text);
nothing here ever fails the run. The rows leave as one Arrow table (`Scraper.table`): the local
runner stores it (console/server_scrape.py), a cluster node sends it with the run's end
(engine_adapters/cluster.py).

Bounded cost: one GET per interval (>= 0.1 s, 1 s by default) with a timeout of
min(interval, 2 s); at most `MAX_SAMPLES_PER_SCRAPE` samples kept per scrape (the rest dropped,
counted in the scrape's row) and at most `MAX_ROWS_PER_RUN` rows held per run: past it, only the last
scrape is still kept (the one the per-run figures read). `_created` samples are not kept.

The scrape after the run settles: an engine counts a request after it has written the stream's
end, so the client can be done before the server's counters are. The last scrape is repeated
every `SETTLE_S` until two in a row read the same samples, at most `SETTLE_TRIES` times.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from data.hashing import canonical_json

# vLLM-Omni >= 0.24 (vllm_omni:), vLLM-Omni before 0.24 (vllm:omni_), SGLang-Omni (sglang_omni:)
KEPT_PREFIXES = ("vllm_omni:", "vllm:omni_", "sglang_omni:")
MAX_SAMPLES_PER_SCRAPE = 5_000
MAX_ROWS_PER_RUN = 1_000_000
MAX_TIMEOUT_S = 2.0
SETTLE_S = 0.1
SETTLE_TRIES = 10


@dataclass(frozen=True)
class ScrapeTarget:
    run_id: str
    engine: str
    url: str  # the engine's base URL plus its metrics path
    interval_s: float


@dataclass(frozen=True)
class Row:
    scrape_seq: int
    t_ns: int
    family: str | None = None
    type: str | None = None
    sample: str | None = None
    labels_json: str | None = None
    value: float | None = None
    error: str | None = None


SCRAPE_SAMPLE = "scrape"  # the `sample` of each scrape's own row (family NULL)


def parse_exposition(text: str, seq: int, t_ns: int) -> list[Row]:
    """One scrape's rows: its own row (sample 'scrape', value = samples kept, labels
    {"dropped": N} past the cap), then the kept samples (prometheus_client's parser; ValueError
    if the text is not the exposition format)."""
    rows: list[Row] = []
    dropped = 0
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(KEPT_PREFIXES):
            continue
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            if len(rows) >= MAX_SAMPLES_PER_SCRAPE:
                dropped += 1
                continue
            rows.append(Row(seq, t_ns, fam.name, fam.type, s.name, canonical_json(dict(s.labels)), float(s.value)))
    marker = Row(seq, t_ns, sample=SCRAPE_SAMPLE, labels_json=canonical_json({"dropped": dropped} if dropped else {}),
                 value=float(len(rows)))
    return [marker, *rows]


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


@dataclass
class Scraper:
    """`with Scraper(target) as s:` around a run: scrapes before, during and after it; `s.table()`
    then holds its rows (None when the run raised: its cell runs again, so nothing is kept)."""

    target: ScrapeTarget
    rows: list[Row] = field(default_factory=list)
    _seq: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def scrape(self, client: httpx.Client, last: bool = False) -> tuple[tuple[Any, ...], ...] | None:
        """One GET and parse; a failure becomes an error row. Returns the samples read (None on a
        failure), for the settling of the last scrape."""
        seq, self._seq = self._seq, self._seq + 1
        try:
            resp = client.get(self.target.url)
            t_ns = time.perf_counter_ns()
            resp.raise_for_status()
            rows = parse_exposition(resp.text, seq, t_ns)
        except Exception as exc:  # evidence, not a gate: any failure is recorded, never raised
            rows = [Row(seq, time.perf_counter_ns(), sample=SCRAPE_SAMPLE, labels_json="{}", error=one_line(exc))]
        if last or len(self.rows) + len(rows) <= MAX_ROWS_PER_RUN:
            self.rows.extend(rows)
        if rows[0].error is not None:
            return None
        return tuple((r.sample, r.labels_json, r.value) for r in rows[1:])

    def settle(self, client: httpx.Client) -> None:
        """The scrape after the run, repeated until two in a row agree (module docstring)."""
        seen = self.scrape(client, last=True)
        for _ in range(SETTLE_TRIES):
            if seen is None:
                return
            time.sleep(SETTLE_S)
            again = self.scrape(client, last=True)
            if again == seen:
                return
            seen = again

    def _loop(self, client: httpx.Client) -> None:
        while not self._stop.wait(self.target.interval_s):
            self.scrape(client)

    def __enter__(self) -> "Scraper":
        self._client = httpx.Client(timeout=min(self.target.interval_s, MAX_TIMEOUT_S))
        self.scrape(self._client)
        self._thread = threading.Thread(target=self._loop, args=(self._client,), name="server-scrape", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc_type is not None:  # the run did not end (its cell runs again on --resume): keep nothing
            self._client.close()
            self.rows.clear()
            return
        try:
            self.settle(self._client)
        finally:
            self._client.close()

    def table(self) -> pa.Table | None:
        """The rows as `server_metrics` columns (None when there are none)."""
        if not self.rows:
            return None
        cols: dict[str, list[Any]] = {n: [getattr(r, n) for r in self.rows] for n in Row.__dataclass_fields__}
        n = len(self.rows)
        return pa.table({
            "run_id": pa.array([self.target.run_id] * n, pa.string()),
            "engine": pa.array([self.target.engine] * n, pa.string()),
            "scrape_seq": pa.array(cols["scrape_seq"], pa.int32()),
            "t_ns": pa.array(cols["t_ns"], pa.int64()),
            **{c: pa.array(cols[c], pa.string()) for c in ("family", "type", "sample", "labels_json", "error")},
            "value": pa.array(cols["value"], pa.float64()),
        })


def scrape_target(run_id: str, engine_name: str, url: str, metrics_path: str | None,
                  interval_s: float | None) -> ScrapeTarget | None:
    """The run's target (the engine's URL and `metrics_path`, the plan's interval); None when off."""
    if interval_s is None or not metrics_path:
        return None
    return ScrapeTarget(run_id, engine_name, url + metrics_path, interval_s)
