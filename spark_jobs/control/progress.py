"""Per-batch progress of a driver's queries, as the Delta table `tables/platform/stream_progress`.

`ProgressListener` (a PySpark `StreamingQueryListener`) turns each progress event into a flat row
and hands it to `ProgressWriter`, whose own thread appends the rows with delta-rs every couple of
seconds — the listener thread only parses JSON and enqueues, so it never blocks the stream.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import queue
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.control import platform_tables
from spark_jobs.home import WeirHome

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
TABLE = "stream_progress"
FLUSH_EVERY_S = 2.0


@cache
def schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("pipeline", pa.string(), nullable=False),
        pa.field("query", pa.string()),
        pa.field("query_id", pa.string()),
        pa.field("run_id", pa.string()),
        pa.field("batch_id", pa.int64()),
        pa.field("progress_at", pa.timestamp("us", tz="UTC")),
        pa.field("recorded_at", pa.timestamp("us", tz="UTC")),
        pa.field("driver_pid", pa.int64()),
        pa.field("num_input_rows", pa.int64()),
        pa.field("input_rows_per_second", pa.float64()),
        pa.field("processed_rows_per_second", pa.float64()),
        pa.field("batch_duration_ms", pa.int64()),
        pa.field("durations_ms", pa.string()),
        pa.field("watermark", pa.string()),
        pa.field("state_rows_total", pa.int64()),
        pa.field("state_rows_updated", pa.int64()),
        pa.field("source_offsets", pa.string()),
        pa.field("kafka_lag", pa.int64()),
        pa.field("kafka_lag_by_partition", pa.string()),
        pa.field("row_rule_counts", pa.string()),
    ])


def table_path(home: WeirHome) -> Path:
    return home.table("platform", TABLE)


def _offsets(value: Any) -> Any:
    """Source offsets arrive as JSON text or already parsed; None when absent."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def kafka_lag(sources: list[dict[str, Any]]) -> tuple[int | None, dict[str, int] | None]:
    """Kafka lag from a progress's sources: latestOffset - endOffset per topic-partition
    (None when no source is Kafka)."""
    per_partition: dict[str, int] = {}
    seen = False
    for source in sources:
        if not str(source.get("description", "")).startswith("KafkaV2"):
            continue
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        if not isinstance(end, dict) or not isinstance(latest, dict):
            continue
        seen = True
        for topic, partitions in latest.items():
            for partition, offset in partitions.items():
                done = end.get(topic, {}).get(partition)
                if done is not None:
                    per_partition[f"{topic}-{partition}"] = max(0, int(offset) - int(done))
    if not seen:
        return None, None
    return sum(per_partition.values()), per_partition


_batch_metrics: dict[tuple[str, int], dict[str, int]] = {}
_batch_metrics_lock = threading.Lock()


def note_batch_metrics(query: str, batch_id: int, metrics: dict[str, int]) -> None:
    """Counts a micro-batch computed itself (row-rule violations), for its progress row: the
    batch's foreachBatch and the listener run in the same driver process."""
    with _batch_metrics_lock:
        _batch_metrics[(query, batch_id)] = dict(metrics)
        while len(_batch_metrics) > 1000:   # never unbounded, even if no progress event comes
            _batch_metrics.pop(next(iter(_batch_metrics)))


def take_batch_metrics(query: str | None, batch_id: int | None) -> dict[str, int] | None:
    with _batch_metrics_lock:
        return _batch_metrics.pop((query or "", batch_id if batch_id is not None else -1), None)


def progress_row(pipeline: str, progress: dict[str, Any], driver_pid: int) -> dict[str, Any]:
    """One row of `stream_progress` from a `StreamingQueryProgress` as JSON."""
    sources = progress.get("sources") or []
    states = progress.get("stateOperators") or []
    lag, lag_by_partition = kafka_lag(sources)
    durations = progress.get("durationMs") or {}
    stamp = progress.get("timestamp")
    return {
        "pipeline": pipeline,
        "query": progress.get("name"),
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "batch_id": progress.get("batchId"),
        "progress_at": dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None,
        "recorded_at": dt.datetime.now(dt.UTC),
        "driver_pid": driver_pid,
        "num_input_rows": progress.get("numInputRows"),
        "input_rows_per_second": _number(progress.get("inputRowsPerSecond")),
        "processed_rows_per_second": _number(progress.get("processedRowsPerSecond")),
        "batch_duration_ms": durations.get("triggerExecution"),
        "durations_ms": json.dumps(durations, sort_keys=True),
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
        "state_rows_total": sum(int(s.get("numRowsTotal") or 0) for s in states) if states else None,
        "state_rows_updated": sum(int(s.get("numRowsUpdated") or 0) for s in states) if states else None,
        "source_offsets": json.dumps([
            {"description": s.get("description"), "start": _offsets(s.get("startOffset")),
             "end": _offsets(s.get("endOffset")), "latest": _offsets(s.get("latestOffset")),
             "num_input_rows": s.get("numInputRows")} for s in sources], default=str),
        "kafka_lag": lag,
        "kafka_lag_by_partition": json.dumps(lag_by_partition) if lag_by_partition is not None else None,
        "row_rule_counts": json.dumps(counts, sort_keys=True) if (counts := take_batch_metrics(
            progress.get("name"), progress.get("batchId"))) is not None else None,
    }


def _number(value: Any) -> float | None:
    """A finite rate, or None (the JVM's JSON writes NaN/Infinity as strings)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class ProgressWriter:
    """Appends progress rows to the Delta table from its own thread, a few seconds at a time."""

    def __init__(self, home: WeirHome, flush_every_s: float = FLUSH_EVERY_S) -> None:
        self.path = table_path(home)
        self.flush_every_s = flush_every_s
        self._rows: queue.Queue[dict[str, Any]] = queue.Queue()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="weir-progress-writer", daemon=True)

    def start(self) -> ProgressWriter:
        self._thread.start()
        return self

    def put(self, row: dict[str, Any]) -> None:
        self._rows.put(row)

    def _drain(self) -> None:
        rows: list[dict[str, Any]] = []
        while True:
            try:
                rows.append(self._rows.get_nowait())
            except queue.Empty:
                break
        if rows:
            try:
                platform_tables.append(self.path, rows, schema())
            except Exception:  # progress history must never take the stream down
                log.exception("could not append %d progress row(s) to %s", len(rows), self.path)

    def _loop(self) -> None:
        while not self._closed.wait(self.flush_every_s):
            self._drain()
        self._drain()

    def close(self, timeout_s: float = 10.0) -> None:
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)


def make_listener(pipeline: str, writer: ProgressWriter,
                  on_progress: Callable[[dict[str, Any]], None]) -> Any:
    """A `StreamingQueryListener` feeding `writer` and `on_progress` (the heartbeat's per-query
    state). Built in a function so this module imports without pyspark."""

    from pyspark.sql.streaming import StreamingQueryListener

    pid = os.getpid()

    class ProgressListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            log.info("%s query %s started (run %s)", pipeline, event.name, event.runId)

        def onQueryProgress(self, event: Any) -> None:
            try:
                progress = json.loads(event.progress.json)
                on_progress(progress)
                writer.put(progress_row(pipeline, progress, pid))
            except Exception:
                log.exception("%s: could not record a progress event", pipeline)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            log.info("%s query %s terminated%s", pipeline, event.id,
                     f": {event.exception}" if event.exception else "")

    return ProgressListener()


def read(home: WeirHome, pipeline: str | None = None, *,
         since: dt.datetime | None = None) -> list[dict[str, Any]]:
    """The progress history (oldest first), of one pipeline or all, whole or only the rows
    recorded at or after `since` (only the files that can hold them are read)."""
    rows = platform_tables.read(table_path(home), equals={"pipeline": pipeline} if pipeline else None,
                                since=("recorded_at", since) if since is not None else None)
    return sorted(rows, key=lambda r: (r["recorded_at"], r["query"] or "", r["batch_id"] or 0))


# How far back `latest_by_query` looks from the pipeline's newest row, widening only while a
# query has no row yet: a running pipeline is answered from its last hour, a long-stopped one
# from the hour before it stopped, and only a query silent for days costs the whole history.
LATEST_LOOKBACKS = (dt.timedelta(hours=1), dt.timedelta(days=1), None)


def latest_by_query(home: WeirHome, pipeline: str, *, expected: tuple[str, ...] = (),
                    now: dt.datetime | None = None) -> dict[str, dict[str, Any]]:
    """The newest progress row of each query of `pipeline`, reading as little history as it
    can: the hour before the pipeline's newest row first (found from the Delta log's file
    statistics), wider only while a query of `expected` is still missing."""
    now = now or dt.datetime.now(dt.UTC)
    newest = platform_tables.newest(table_path(home), "recorded_at", equals={"pipeline": pipeline})
    anchor = min(now, newest) if newest is not None else now
    latest: dict[str, dict[str, Any]] = {}
    for lookback in LATEST_LOOKBACKS:
        rows = read(home, pipeline, since=anchor - lookback if lookback is not None else None)
        latest = {row["query"]: row for row in rows}
        if latest and all(q in latest for q in expected):
            break
    return latest
