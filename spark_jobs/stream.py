"""The streaming driver of a pipeline: its queries (`topology.queries_of`), each exactly once
through any crash.

- `ingest`: source → one foreachBatch that writes bronze, quarantine and silver, every write
  idempotent by record identity (see `tables`), so a replayed batch changes nothing;
- `gold`: silver (a Delta stream) → watermarked event-time windows → upsert into gold, in update
  mode, so a window is visible before it closes and late events within the watermark update it;
- `sessions` (when the catalog declares them): silver → keyed state with event-time timeouts
  (`spark_jobs.sessions`) → upsert into the session table by session key.

Before the queries start, the driver takes the pipeline's lease, claims each table it writes with
its fencing token, and rebuilds gold and the session table from silver if their queries start
without a checkpoint and there is something to rebuild (`backfill.rebuild_from_silver`).

`python -m spark_jobs.stream PIPELINE [--once]` is the spark-submit entry point; `weir run` calls
the same `run`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import operator
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.util import inheritable_thread_target

from spark_jobs import catalog, derived, queries, sessions, transforms
from spark_jobs.backfill import rebuild_from_silver
from spark_jobs.checkpoints.generations import safety_backup
from spark_jobs.checkpoints.layout import clear_interrupted_writes
from spark_jobs.concurrently import run_concurrently
from spark_jobs.control import lease as leases
from spark_jobs.control import progress
from spark_jobs.control.heartbeat import DriverMonitor
from spark_jobs.control.lease import LeaseHeldError, LeaseLostError, fence, fencing
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables, ensure_tables, read_dimension
from spark_jobs.quality import rules as row_rules
from spark_jobs.session import build_session, session_conf
from spark_jobs.sources import holds_planning
from spark_jobs.tables import (
    Fencing,
    Inserted,
    checkpoint_after_commits,
    in_list,
    insert_absent,
    key_ranges,
    partitions_holding,
    upsert,
    warm_key_hashes,
)
from spark_jobs.timing import StepTimes
from spark_jobs.topology import checkpoint_location, queries_of, query_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from spark_jobs.catalog import Pipeline, RowRule
    from spark_jobs.control.heartbeat import DriverMonitor

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class BatchSummary:
    """What one aggregate over a parsed micro-batch tells before anything is written."""

    positions: dict[str, tuple[int, int]]   # source → (first, last) position of its lines here
    rejects: int
    valid: int
    dates: tuple[object, object] | None     # the first and last event date of the valid rows
    rule_counts: dict[str, int]
    # (partition of the batch, event_date_hint) → how many of its lines bronze files under it
    # (`transforms.bronze_rows`), for `transforms.by_hint`
    lines_by_hint: dict[tuple[int, object], int] = dataclasses.field(default_factory=dict)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(self.positions)

    @staticmethod
    def aggregate(parsed: DataFrame, pipeline: Pipeline, rules: tuple[RowRule, ...]) -> DataFrame:
        """The summary's aggregate, one row per source, `event_date_hint` (bronze's: a batch's
        lines rarely span more than a few) and partition of the batch (a source is read by one
        task, or a few). Counts and bounds only: every function keeps a fixed-size buffer, so Spark
        runs it as a hash aggregate over the batch's rows. A set of the dates (`collect_set`) made
        it an object hash aggregate, 3 % of a backlog's CPU samples (docs/performance.md)."""
        valid = F.col(transforms.REASON).isNull()
        date = F.when(valid, transforms.event_date(pipeline))
        hint = transforms.event_date_hint(pipeline, F.col(f"{transforms.CARRIED}.ingest_date"))
        return parsed.groupBy("_source", hint.alias("_hint"), F.spark_partition_id().alias("_part")).agg(
            F.min("_position").alias("_first"), F.max("_position").alias("_last"),
            F.count_if(~valid).alias("_rejects"), F.count_if(valid).alias("_valid"),
            F.min(date).alias("_first_date"), F.max(date).alias("_last_date"),
            *row_rules.metrics(rules))

    @classmethod
    def of(cls, parsed: DataFrame, pipeline: Pipeline, rules: tuple[RowRule, ...]) -> BatchSummary:
        rows = cls.aggregate(parsed, pipeline, rules).collect()
        names = [row_rules.metric_name(r) for r in rules]
        firsts = [r["_first_date"] for r in rows if r["_first_date"] is not None]
        lasts = [r["_last_date"] for r in rows if r["_last_date"] is not None]
        positions: dict[str, tuple[int, int]] = {}
        lines_by_hint: dict[tuple[int, object], int] = {}
        for r in rows:
            first, last = positions.get(r["_source"], (r["_first"], r["_last"]))
            positions[r["_source"]] = (min(first, r["_first"]), max(last, r["_last"]))
            where = (r["_part"], r["_hint"])
            lines_by_hint[where] = lines_by_hint.get(where, 0) + r["_rejects"] + r["_valid"]
        return cls(positions=positions,
                   rejects=sum(r["_rejects"] for r in rows), valid=sum(r["_valid"] for r in rows),
                   dates=(min(firsts), max(lasts)) if firsts else None,
                   rule_counts={n: sum(r[n] for r in rows) for n in names},
                   lines_by_hint=lines_by_hint)


class IngestBatch:
    """foreachBatch of the ingest query: bronze, quarantine and silver from one batch.

    One aggregate over the parsed batch gives its sources, rejects, event dates and row-rule
    counts; a `fail` rule (`spark_jobs.quality.rules`) stops the batch there, before any write.
    Each write is idempotent by record identity on its own, so bronze, quarantine and silver are
    written concurrently (see below)."""

    def __init__(self, pipeline: Pipeline, tables: PipelineTables) -> None:
        self.pipeline = pipeline
        self.tables = tables
        self.rules = pipeline.row_rules

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        fence(self.pipeline.name)
        p, t, token = self.pipeline, self.tables, fencing(self.pipeline.name)
        steps = StepTimes()
        # One pass over the source: bronze is written from the parsed batch, which carries it.
        parsed = row_rules.with_rules(transforms.parse(batch, p), self.rules).persist()
        # Silver's insert compares the batch's key hashes with each silver file's, kept in the
        # driver once read: those of the files the batch before wrote are read now, beside the
        # parse, instead of after it on the way to silver.
        key_hash = transforms.key_hash_expression((p.key,))
        warming = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weir-warm")
        warmed = warming.submit(inheritable_thread_target(parsed.sparkSession)(warm_key_hashes),
                                parsed.sparkSession, t.silver, key_hash)
        warming.shutdown(wait=False)
        try:
            summary = steps.time("read+parse+summary", lambda: BatchSummary.of(parsed, p, self.rules))
            if not summary.sources:
                return
            row_rules.check(summary.rule_counts, self.rules, pipeline=p.name, batch_id=batch_id)
            progress.note_batch_metrics(query_name(p, "ingest"), batch_id, summary.rule_counts)
            # Where a line of this batch can already be in bronze or quarantine (a replay): its
            # source, at its position. Delta's file statistics skip every other file, so the
            # dedupe reads what the batch's lines could collide with, not the whole history.
            by_source = key_ranges("source", "position", summary.positions)
            # Bronze, quarantine and silver side by side: each is idempotent by record identity
            # on its own, and none waits for another. A back-fill beside the stream deletes a
            # silver row only if it read that row's line in bronze (`tables.reconcile`'s
            # `owned`), so a silver row committed ahead of its bronze row is never one it erases.
            # A batch spanning several dates (a backlog, late events) writes each date's bronze in
            # files of its own, so that a back-fill of one date reads only that date's. The keys
            # looked up come from the cached batch as it is: the repartitioned rows are computed
            # once, by the write.
            bronze = transforms.by_hint(transforms.bronze_rows(parsed, p), summary.lines_by_hint,
                                        parsed.sparkSession.sparkContext.defaultParallelism)
            lines = parsed.select(*(F.col(f"_{c}").alias(c) for c in transforms.BRONZE_KEY))
            writes: dict[str, Callable[[], object]] = {
                "bronze": lambda: insert_absent(bronze, t.bronze, transforms.BRONZE_KEY, keys=lines,
                                                prune=by_source, fencing=token)}
            if summary.rejects:
                # not a blind append: a back-fill may be inserting the same lines' rows (it reads
                # bronze, which commits beside this), and a read of the keys conflicts with that
                writes["quarantine"] = lambda: insert_absent(
                    transforms.rejects(parsed), t.quarantine, transforms.BRONZE_KEY, prune=by_source,
                    fencing=token)
            if summary.valid:
                # Derived from the cached batch as it is written, not materialised first: the
                # keys looked up are the valid lines' (before the dedupe, so it runs once). An
                # event resent with another event time stands under another date already: every
                # partition is read, by its key hashes, and the keys only of the files holding one
                # of the batch's hashes.
                rows = transforms.silver(parsed, read_dimension(parsed.sparkSession, t), p)
                keys = transforms.valid(parsed).select(p.key)

                def silver() -> Inserted:
                    files_warmed(warmed)   # the hashes read beside the parse are in the cache
                    return insert_absent(rows, t.silver, (p.key,), keys=keys, key_hash=key_hash,
                                         fencing=token)

                writes["silver"] = silver
            done = run_concurrently(steps.timed(writes), what=f"{p.name} ingest batch {batch_id}",
                                    spark=parsed.sparkSession)
            inserted = done.get("silver")
            if not isinstance(inserted, Inserted):
                inserted = Inserted(0, 0)
            # A write the fencing token made Delta skip (a newer holder committed) is loud here,
            # before Spark records the batch as done.
            fence(p.name)
            checkpoint_after_commits(*(getattr(t, name) for name in done))
            beside = files_warmed(warmed)
            log.info("%s ingest batch %d: %d source(s), %d reject(s), %d new event(s) of %s "
                     "(silver's keys read from %d file(s), key hashes from %d, %d of them read: %d "
                     "beside the parse, %d after it) written in %.1fs (%s)",
                     p.name, batch_id, len(summary.sources), summary.rejects, inserted.rows,
                     "..".join(map(str, summary.dates or ("no date",))), inserted.files_read,
                     inserted.files_hashed,
                     beside + inserted.hashes_read, beside, inserted.hashes_read, steps.elapsed(),
                     steps)
        finally:
            if warmed.exception() is not None:   # waits: nothing of a batch outlives it
                log.warning("%s ingest batch %d: silver's key hashes were not read beside the "
                            "parse (the insert read them): %s", p.name, batch_id, warmed.exception())
            parsed.unpersist()


def files_warmed(warmed: Future[int]) -> int:
    """The files whose key hashes `warmed` (a `warm_key_hashes`) read, once it is done; 0 when it
    failed. A failed warm-up is not raised: it only ever gave the insert a head start, and the
    insert reads whatever it lacks (and fails loudly where that fails)."""
    return 0 if warmed.exception() is not None else warmed.result()


class GoldBatch:
    """foreachBatch of the gold query: the updated windows replace their rows in gold.

    After gold was rebuilt in batch (a fresh gold checkpoint over an existing silver), the query's
    state starts empty: a window that started by the latest event time the rebuild saw may hold
    events the query never saw, and its streamed counts would write over the rebuilt ones. Such
    windows are recomputed from silver instead (once the watermark has passed that time, the query
    emits none of them any more)."""

    def __init__(self, pipeline: Pipeline, tables: PipelineTables,
                 rebuilt_through_ms: int | None = None) -> None:
        self.pipeline = pipeline
        self.tables = tables
        self.rebuilt_through_ms = rebuilt_through_ms

    def __call__(self, windows: DataFrame, batch_id: int) -> None:
        fence(self.pipeline.name)
        windows = windows.localCheckpoint()   # a stable MERGE source, see IngestBatch
        if self.rebuilt_through_ms is not None:
            windows = self.with_rebuilt_windows_recomputed(windows)
        dates = [row[0] for row in windows.select("event_date").distinct().collect()]
        if dates:
            upsert(windows, self.tables.gold, transforms.gold_key(self.pipeline),
                   prune=in_list("event_date", dates), fencing=fencing(self.pipeline.name))
        fence(self.pipeline.name)   # a skipped (fenced) write is loud, see IngestBatch
        checkpoint_after_commits(self.tables.gold)
        log.info("%s gold batch %d: %d date(s) updated", self.pipeline.name, batch_id, len(dates))

    def with_rebuilt_windows_recomputed(self, windows: DataFrame) -> DataFrame:
        through = F.timestamp_millis(F.lit(self.rebuilt_through_ms))
        rebuilt = windows.where(F.col("window_start") <= through)
        bounds = rebuilt.agg(F.unix_millis(F.min("window_start")),
                             F.unix_millis(F.max("window_end"))).first()
        if bounds[0] is None:
            return windows
        first, last = (F.timestamp_millis(F.lit(ms)) for ms in bounds)
        event_time = F.col(self.pipeline.event_time)
        silver = (windows.sparkSession.read.format("delta").load(str(self.tables.silver))
                  .where(F.col("event_date").between(F.to_date(first), F.to_date(last)))
                  .where((event_time >= first) & (event_time < last)))
        key = transforms.gold_key(self.pipeline)
        exact = transforms.aggregate(silver, self.pipeline).alias("exact")
        keys = rebuilt.select(*key).alias("batch")
        same = [F.col(f"exact.{c}").eqNullSafe(F.col(f"batch.{c}")) for c in key]
        exact = exact.join(keys, functools.reduce(operator.and_, same), "left_semi")
        return windows.where(F.col("window_start") > through).unionByName(exact).localCheckpoint()


class SessionsBatch:
    """foreachBatch of the sessions query: the sessions the batch changed replace their rows (a
    MERGE by session key, so a replayed batch changes nothing). A session stands under the date of
    its first event; a late event may move it, hence the dates where its key already stands, found
    through the files whose key hashes meet the batch's (`tables.holding`): the lookup's cost
    follows the files written since the batch before, not the table's history.

    After the session table was rebuilt in batch (a fresh sessions checkpoint over an existing
    silver), the keyed state starts empty: a session the rebuild holds that gets later events, or
    whose state times out later, would be written with the measures of the streamed events only.
    Such sessions are recomputed from silver instead, as is a rebuilt session still active once the
    stream's watermark passes its gap (the query holds no timer for it)."""

    def __init__(self, pipeline: Pipeline, tables: PipelineTables,
                 rebuilt_through_ms: int | None = None) -> None:
        self.pipeline = pipeline
        self.tables = tables
        self.rebuilt_through_ms = rebuilt_through_ms
        self.horizon_ms: int | None = None

    def __call__(self, rows: DataFrame, batch_id: int) -> None:
        fence(self.pipeline.name)
        rows = rows.localCheckpoint()   # a stable MERGE source, see IngestBatch
        if self.rebuilt_through_ms is not None:
            rows = self.with_rebuilt_sessions_recomputed(rows)
        assert self.tables.sessions is not None
        key = sessions.table_key(self.pipeline)
        dates = {row[0] for row in rows.select("event_date").distinct().collect()}
        if dates:
            dates |= set(partitions_holding(rows, self.tables.sessions, key, "event_date",
                                            key_hash=transforms.key_hash_expression(key)))
            upsert(rows, self.tables.sessions, key, prune=in_list("event_date", dates),
                   fencing=fencing(self.pipeline.name))
        fence(self.pipeline.name)   # a skipped (fenced) write is loud, see IngestBatch
        checkpoint_after_commits(self.tables.sessions)
        log.info("%s sessions batch %d: %d date(s) updated", self.pipeline.name, batch_id, len(dates))

    def with_rebuilt_sessions_recomputed(self, rows: DataFrame) -> DataFrame:
        assert self.tables.sessions is not None and self.pipeline.sessions is not None
        spec, spark = self.pipeline.sessions, rows.sparkSession
        key = spec.key
        through = F.timestamp_millis(F.lit(self.rebuilt_through_ms))
        newest = rows.agg(F.unix_millis(F.max("last_event_time"))).first()[0]
        if newest is None:
            return rows
        # the stream's watermark once it has read this batch (`sessions.watermark_horizon`);
        # like the watermark, it never goes back
        horizon = max(int(newest) - sessions.interval_ms(spec.watermark), self.horizon_ms or 0)
        self.horizon_ms = horizon
        gap = sessions.interval_ms(spec.gap)
        held = (spark.read.format("delta").load(str(self.tables.sessions))
                .where(F.col("event_date") <= F.to_date(through))
                .where(F.col("first_event_time") <= through))
        # a session's events all stand at or after the date of its first one
        touched = (rows.where(F.col("first_event_time") <= through).select(key, "event_date")
                   .unionByName(held.join(rows.select(key), key, "left_semi").select(key, "event_date"))
                   .unionByName(held.where((F.col("state") == sessions.ACTIVE)
                                           & (F.unix_millis("last_event_time") + gap <= horizon))
                                .select(key, "event_date"))).localCheckpoint()
        first = touched.agg(F.min("event_date")).first()[0]
        if first is None:
            return rows
        keys = touched.select(key).distinct()
        silver = (spark.read.format("delta").load(str(self.tables.silver))
                  .where(F.col("event_date") >= F.lit(first))
                  .join(keys, key, "left_semi"))
        exact = sessions.batch_rows(silver, self.pipeline, horizon).select(*rows.columns)
        return rows.join(keys, key, "left_anti").unionByName(exact).localCheckpoint()


def start_query(spark: SparkSession, pipeline: Pipeline, home: WeirHome, tables: PipelineTables,
                query: str, *, once: bool, stopping: threading.Event | None = None) -> StreamingQuery:
    """Start `query`: to the end of what is available with `once`, else on the pipeline's trigger,
    planning no further batch once `stopping` is set where its source allows (`queries.build`)."""
    frame = queries.build(spark, pipeline, home, tables, query, stopping)
    if query == "ingest":
        sink = frame.writeStream.foreachBatch(IngestBatch(pipeline, tables))
    elif query == "sessions":
        sink = frame.writeStream.outputMode("update").foreachBatch(
            SessionsBatch(pipeline, tables, queries.rebuilt_through(tables, "sessions")))
    else:
        sink = frame.writeStream.outputMode("update").foreachBatch(
            GoldBatch(pipeline, tables, queries.rebuilt_through(tables, "gold")))
    sink = sink.trigger(availableNow=True) if once else sink.trigger(
        processingTime=pipeline.trigger_of(query))
    # The query's thread inherits the JVM thread's active session; under PySpark's pinned threads
    # the calling JVM thread may have none, and Delta's source then fails ("no active or default
    # Spark session"). Make this session active where the query thread is born.
    jvm_session = spark._jsparkSession  # type: ignore[attr-defined]
    spark._jvm.SparkSession.setActiveSession(jvm_session)  # type: ignore[attr-defined]
    spark._jvm.SparkSession.setDefaultSession(jvm_session)  # type: ignore[attr-defined]
    return (sink.queryName(query_name(pipeline, query))
            .option("checkpointLocation", str(checkpoint_location(home, pipeline, query)))
            .start())


class StreamFailedError(RuntimeError):
    pass


def stop_at_batch_boundary(queries: list[StreamingQuery], timeout_s: float = STOP_TIMEOUT_S, *,
                           unending: Collection[str] = ()) -> bool:
    """Stop each query between two micro-batches, all of them watched at once. After `timeout_s`
    a query is stopped anyway. Returns whether every query stopped at a boundary.

    A query is stopped as soon as it is idle. Once the driver is stopping, the landing source
    plans nothing more (`start_query`), and silver soon stops changing for gold and sessions. So
    each query goes idle after the batch it has in flight, with every planned batch committed.

    The queries named in `unending` read a source that keeps planning while a backlog lasts
    (Kafka's, which is Spark's). Such a query is stopped once its batch in flight has committed.
    The stop interrupts the batch planned meanwhile, and its replay at the next start is a no-op.
    So a stop takes about one batch, however long the backlog."""
    in_flight = {query.id: _last_batch(query) + 1 for query in queries if query.name in unending}
    deadline = time.monotonic() + timeout_s
    graceful, pending = True, list(queries)
    while pending:
        for query in list(pending):
            at_boundary = not query.isActive or not query.status.get("isTriggerActive") or (
                query.name in unending and _last_batch(query) >= in_flight[query.id])
            if at_boundary or time.monotonic() >= deadline:
                graceful &= at_boundary
                query.stop()
                pending.remove(query)
        if pending:
            time.sleep(0.05)
    return graceful


def _last_batch(query: StreamingQuery) -> int:
    """The id of the query's latest finished batch in this run, -1 before its first."""
    progress = query.lastProgress
    return -1 if progress is None else int(progress["batchId"])


def run(pipeline: Pipeline, *, once: bool = False, home: WeirHome | None = None,
        spark: SparkSession | None = None, stop: threading.Event | None = None) -> None:
    """Run the pipeline's queries. With `once`, process everything available through every layer
    and return; otherwise run until `stop` is set (SIGTERM/SIGINT set it in `main`, a stop request
    from the control plane too) or a query fails, which raises `StreamFailedError`.

    The driver first takes the pipeline's lease (`LeaseHeldError` when another driver is alive),
    and publishes a heartbeat and per-batch progress while it runs (see `spark_jobs.control`)."""

    home = home or WeirHome.from_env()
    stop = stop or threading.Event()
    conf = driver_conf(pipeline)
    used = Fencing.used_tokens(pipeline.name, PipelineTables.of(home, pipeline).named().values())
    with leases.acquire(home, pipeline.name, used_tokens=used) as lease:
        spark = spark or build_session(f"weir-{pipeline.name}", conf=conf)
        # A session passed in (tests, benchmarks) runs with the driver's settings too, as a
        # deployed driver does, and gets its own back afterwards.
        with session_conf(spark, conf), DriverMonitor(spark, home, lease, stop) as monitor:
            _run_queries(spark, pipeline, home, once=once, stop=stop, monitor=monitor)


def driver_conf(pipeline: Pipeline) -> dict[str, str]:
    """What a pipeline's driver sets on top of `build_session`'s settings.

    * A stateful query pins its shuffle partitions in its checkpoint: the pipeline's own.
    * The ingest batch is cached once (`IngestBatch`) and read by its summary and three writes.
      Spark's columnar cache stores it uncompressed: about a third more memory (258 against 194
      MB for a 128 MB batch, bounded like the batch) and about 0.9 s less per such batch, 5 %
      of the ingest. A batch far above the default bound spills sooner than a compressed
      one and is then slower (docs/performance.md).
    * The silver rows are deduplicated with one sort of each batch's rows, not two
      (`transforms.DEDUPE_CONF`)."""
    return {"spark.sql.shuffle.partitions": str(pipeline.shuffle_partitions),
            "spark.sql.inMemoryColumnarStorage.compressed": "false", **transforms.DEDUPE_CONF}


def _run_queries(spark: SparkSession, pipeline: Pipeline, home: WeirHome, *, once: bool,
                 stop: threading.Event, monitor: DriverMonitor) -> None:
    tables = ensure_tables(spark, home, pipeline)
    held = fencing(pipeline.name)
    if held is not None:
        held.claim(tables.outputs().values())
    for query in queries_of(pipeline):
        for leftover in clear_interrupted_writes(checkpoint_location(home, pipeline, query)):
            log.warning("%s: removed %s, left half-written by a crash", pipeline.name, leftover)
    retire_python_sessions_state(home, pipeline)
    # a fresh gold or sessions query does not re-stream silver
    rebuild_from_silver(spark, pipeline, home, tables, held)
    if once:
        for name in queries_of(pipeline):
            query = start_query(spark, pipeline, home, tables, name, once=True)
            monitor.watch([query])
            try:
                query.awaitTermination()
            except Exception as err:
                raise StreamFailedError(f"{query.name} failed: {err}") from err
            if query.exception() is not None:
                raise StreamFailedError(f"{query.name} failed: {query.exception()}")
        return
    if stop.is_set():  # stopped while starting up: no query to start, nothing to replay
        log.info("%s: stop requested before the queries started", pipeline.name)
        return
    apart = derived.runs_apart(pipeline, spark, queries_of(pipeline))
    # first: its JVM starts while this one plans its queries, not during the ingest's batches
    second = derived.DerivedProcess.start(spark, pipeline, home) if apart else None
    queries: list[StreamingQuery] = []
    unending = () if holds_planning(pipeline) else (query_name(pipeline, "ingest"),)
    with stopped_at_batch_boundary(pipeline.name, queries, monitor, unending=unending, second=second):
        queries += [start_query(spark, pipeline, home, tables, name, once=False, stopping=stop)
                    for name in queries_of(pipeline) if name not in apart]
        monitor.watch(queries, elsewhere=second.query_states if second else None)
        log.info("%s running: %s", pipeline.name, ", ".join(q.name for q in queries)
                 + (f"; {', '.join(apart)} in process {second.process.pid}" if second else ""))
        run_until_stopped(queries, stop, failure=second.failure if second else None)


@contextmanager
def stopped_at_batch_boundary(what: str, queries: list[StreamingQuery], monitor: DriverMonitor, *,
                              unending: Collection[str] = (),
                              second: derived.DerivedProcess | None = None) -> Iterator[None]:
    """However the block ends (a stop, a failure, a query that failed to start), stop the queries
    it put in `queries` at a batch boundary, and the driver's `second` process with them (asked
    first, so that its stop overlaps theirs)."""
    try:
        yield
    finally:
        monitor.state = "stopping"
        if second is not None:
            second.terminate()
        graceful = stop_at_batch_boundary([q for q in queries if q.isActive], unending=unending)
        if second is not None:
            graceful &= second.wait(STOP_TIMEOUT_S + 30)
        log.info("%s stopped (%s)", what, "at a batch boundary" if graceful else "forced")


def run_until_stopped(queries: list[StreamingQuery], stop: threading.Event, *,
                      failure: Callable[[], str | None] | None = None) -> None:
    """Return once `stop` is set; raise `StreamFailedError` as soon as a query has stopped on its
    own, or `failure` tells why the driver cannot go on."""
    while not stop.wait(0.5):
        failed = [q for q in queries if not q.isActive]
        if failed:
            raise StreamFailedError(
                f"{failed[0].name} stopped: {failed[0].exception() or 'no error reported'}")
        why = failure() if failure is not None else None
        if why is not None:
            raise StreamFailedError(why)


def run_derived(pipeline: Pipeline, *, parent: int, master: str, states: int,
                driver_memory: str | None, stop: threading.Event) -> int:
    """The second process of `parent`'s driver (`spark_jobs.derived`): gold's and the sessions'
    queries, under the driver's lease, until the driver stops it or goes."""
    if not derived.die_with_parent(parent):
        log.error("%s: the driver (pid %d) is gone before its second process started", pipeline.name, parent)
        return 1
    os.nice(derived.NICENESS)
    home = WeirHome.from_env()
    conf = driver_conf(pipeline) | ({"spark.driver.memory": driver_memory} if driver_memory else {})
    with leases.join(home, pipeline.name, parent) as lease:
        spark = build_session(f"weir-{pipeline.name}-derived", master=master, conf=conf)
        tables = PipelineTables.of(home, pipeline)
        with (os.fdopen(states, "w", encoding="utf-8") as out,
              derived.DerivedMonitor(spark, home, lease, stop, out) as monitor):
            names = [q for q in queries_of(pipeline) if q != "ingest"]
            queries: list[StreamingQuery] = []
            with stopped_at_batch_boundary(f"{pipeline.name}: {', '.join(names)}", queries, monitor):
                queries += [start_query(spark, pipeline, home, tables, name, once=False, stopping=stop)
                            for name in names]
                monitor.watch(queries)
                log.info("%s: %s running in the driver's second process (pid %d)", pipeline.name,
                         ", ".join(q.name for q in queries), os.getpid())
                run_until_stopped(queries, stop, failure=lambda: derived.parent_gone(parent))
    return 0


def retire_python_sessions_state(home: WeirHome, pipeline: Pipeline) -> str | None:
    """Start the sessions query afresh when its checkpoint holds the Python state function's
    state. Spark refuses to run that state under the JVM's operator (its first batch fails with
    STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA), and a driver would crash-loop. The
    session table is what silver derives to, so nothing is lost: the checkpoint is backed up
    whole, the query's folder removed, and `rebuild_from_silver` then rebuilds the table and starts
    the query after silver's latest version. The caller holds the lease. Returns the backup's id."""
    if not sessions.holds_python_state(checkpoint_location(home, pipeline, "sessions")):
        return None
    backup = safety_backup(home, pipeline, "sessions state moved to the JVM", actor="weir",
                           reason="the sessions checkpoint holds the Python state function's state",
                           progress=None)
    assert backup is not None, "a sessions checkpoint was found, so there is one to back up"
    shutil.rmtree(home.confine(checkpoint_location(home, pipeline, "sessions")))
    log.warning("%s: the sessions checkpoint held the Python state function's state; backed up as "
                "%s, and the session table is rebuilt from silver", pipeline.name, backup.id)
    return backup.id


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT, so the driver stops at a batch boundary."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.stream", description=__doc__)
    parser.add_argument("pipeline")
    parser.add_argument("--once", action="store_true")
    second = parser.add_argument_group("a driver's second process (started by the driver itself)")
    second.add_argument("--derived-of", type=int, metavar="PID",
                        help="run gold and the sessions for the driver PID, its entry read from stdin")
    second.add_argument("--master")
    second.add_argument("--states-fd", type=int)
    second.add_argument("--driver-memory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s"
                        + (" [derived]" if args.derived_of else "") + ": %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)   # a line per call into Python otherwise

    stop = stop_on_signals()
    try:
        if args.derived_of is not None:
            if args.master is None or args.states_fd is None:
                parser.error("--derived-of needs --master and --states-fd")
            pipeline = pickle.load(sys.stdin.buffer)
            return run_derived(pipeline, parent=args.derived_of, master=args.master,
                               states=args.states_fd, driver_memory=args.driver_memory, stop=stop)
        run(catalog.load(args.pipeline), once=args.once, stop=stop)
    except LeaseHeldError as err:
        log.error("refusing to start: %s", err)
        return 3
    except LeaseLostError as err:
        log.error("FENCED: %s; another driver holds the pipeline, this one committed nothing since", err)
        return derived.FENCED_EXIT
    except StreamFailedError as err:
        if args.derived_of is None:
            raise
        log.error("%s", err)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
