"""Back-fill: re-derive silver, quarantine and gold for a range of event dates from bronze, with
the very transforms the stream uses. Running it again changes nothing, and it may run beside the
stream without erasing anything the stream commits meanwhile:

- bronze is read as of one version `Vb`, and only its files that can hold lines of these dates
  (bronze's `event_date_hint`, see `transforms.event_date_hint`);
- each layer is reconciled with what those lines derive to by one MERGE of the differences
  (`tables.reconcile`): a row is deleted only when its line is one of those read at `Vb` and no
  longer derives to it, so the stream's rows from newer lines are never touched, and the MERGE's
  own conflict detection retries around the stream's concurrent commits;
- gold is recomputed from silver until it equals the aggregates of silver (the gold query may
  have upserted windows meanwhile).

Which lines a back-fill of dates D re-derives: those whose event time (as the contract parses it)
falls on D, and those without a usable event time that were ingested on D (their quarantine rows).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from spark_jobs import queries, sessions, transforms
from spark_jobs.concurrently import run_concurrently
from spark_jobs.control import eventlog
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables, ensure_tables, read_dimension
from spark_jobs.quality import rules as row_rules
from spark_jobs.session import session_conf
from spark_jobs.tables import (
    Fencing,
    checkpoint_after_commits,
    commit_nothing,
    delta_version,
    holds_data,
    reconcile,
    retry_conflicts,
    save_fenced,
    sql_literal,
)
from spark_jobs.timing import StepTimes
from spark_jobs.topology import has_started, queries_of

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger(__name__)
# At most this many bronze lines per partition of the lines a back-fill (or a refresh) parses and
# caches, and about as many silver rows per partition of what they derive. A day of a million lines
# read from a few small bronze files came in two partitions, cached blocks of over 260 MB that a
# 1 GB driver could not hold; a day of four million ran out of memory in the dedupe's four.
PARTITION_LINES = 100_000
# Up to this many lines read, a back-fill broadcasts their key hashes (8 bytes each, about 64 MB
# of the driver's memory at most) to find which of their events silver holds under another date
# (`_first_copies`); above it, the hashes are joined by a shuffle.
BROADCAST_HASHES_LINES = 4_000_000
# Rounds of "recompute gold from silver, merge the differences": more than one only when the
# stream commits silver or gold for these dates while the back-fill runs.
GOLD_ROUNDS = 4
Hold = Callable[[str], None]
# A back-fill's and a refresh's settings. Their caches (the lines parsed, the rows to reconcile)
# are stored uncompressed, as the stream's batch is (`stream.driver_conf`): 5 s less to cache a
# day of parsed lines, and 3 s less for its silver rows (docs/performance.md). Their dedupe sorts
# its rows once (`transforms.DEDUPE_CONF`).
BATCH_CONF = {"spark.sql.inMemoryColumnarStorage.compressed": "false", **transforms.DEDUPE_CONF}


class DateRangeError(UserError, ValueError):
    """The end of a back-fill's range is before its start."""


@dataclass(frozen=True)
class BackfillResult:
    pipeline: str
    date_from: dt.date
    date_to: dt.date
    silver_replaced: bool
    gold_replaced: bool
    quarantine_replaced: bool = False
    bronze_version: int | None = None
    sessions_replaced: bool | None = None     # None: the pipeline declares no sessions
    lines_read: int = 0                       # the bronze lines the dates' files held
    seconds: dict[str, float] = field(default_factory=dict)   # by step, for the log and the record
    elapsed_s: float = 0.0                    # the whole: steps side by side overlap


def date_range(column: str, first: dt.date, last: dt.date) -> str:
    return f"{column} >= {sql_literal(first)} AND {column} <= {sql_literal(last)}"


def backfill(spark: SparkSession, pipeline: Pipeline, date_from: dt.date, date_to: dt.date,
             home: WeirHome | None = None, *, hold: Hold | None = None) -> BackfillResult:
    """Re-derive silver, quarantine and gold of `date_from..date_to` (event dates, UTC) and
    record the run in the event log. `hold(layer)` is called before each layer's write (tests use
    it to commit a stream batch between the back-fill's read and its write)."""
    if date_to < date_from:
        raise DateRangeError(f"--to {date_to} is before --from {date_from}")
    home = home or WeirHome.from_env()
    dates = {"from": date_from.isoformat(), "to": date_to.isoformat()}
    try:
        with session_conf(spark, BATCH_CONF):
            result = _backfill(spark, pipeline, date_from, date_to, home, hold or (lambda _layer: None))
    except Exception as err:
        reason = (str(err).splitlines() or [type(err).__name__])[0][:500]
        eventlog.record(pipeline.name, "backfill", "failed", reason=reason, details=dates, home=home)
        raise
    eventlog.record(pipeline.name, "backfill", "ok", home=home, details={
        **dates, "bronze_version": result.bronze_version, "silver_replaced": result.silver_replaced,
        "quarantine_replaced": result.quarantine_replaced, "gold_replaced": result.gold_replaced,
        "sessions_replaced": result.sessions_replaced, "lines_read": result.lines_read,
        "seconds": result.seconds, "elapsed_s": result.elapsed_s})
    return result


def latest_version(path: Path) -> int:
    """The latest committed version of the Delta table at `path`, which must exist, from its log
    (`tables.delta_version`, no JVM)."""
    version = delta_version(path)
    if version is None:
        raise FileNotFoundError(f"no Delta table at {path}")
    return version


def bronze_lines(spark: SparkSession, path: Path, version: int, date_from: dt.date,
                 date_to: dt.date) -> DataFrame:
    """The bronze rows, as of `version`, that a back-fill of these dates re-derives. Rows written
    before `event_date_hint` existed have none and are read whatever the dates; Delta's per-file
    statistics on the hint skip every other file."""

    hint = F.col(transforms.EVENT_DATE_HINT)
    return (spark.read.format("delta").option("versionAsOf", version).load(str(path))
            .where(hint.between(F.lit(date_from), F.lit(date_to)) | hint.isNull()))


def in_partitions_of(rows: DataFrame, most: int) -> tuple[DataFrame, int]:
    """`rows` spread evenly over partitions of at most `most` rows each, and how many. How a
    table's files split into partitions follows their compressed bytes: bronze's raw lines
    compress about six to one, so a split Spark sizes for 128 MB of Parquet holds several times
    that once parsed and cached. The count reads only what `rows`' filters need; the spread is one
    shuffle of the rows."""
    partitions = max(1, -(-rows.count() // most))
    return rows.repartition(partitions), partitions


def cached_parse(lines: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Bronze `lines` parsed by the stream's own contract and row rules (so both keep and refuse
    the same rows), cached for the several reads of a back-fill or a refresh: without what only
    bronze keeps (`transforms.without_kept_lines`). Under `BATCH_CONF`, a day of 995 k lines
    takes 232 MB, built in 10.5 s against 15.5 s for whole rows compressed (377 MB in memory and
    14 MB spilled to disk at the default driver memory)."""
    return transforms.without_kept_lines(
        row_rules.with_rules(transforms.parse(lines, pipeline), pipeline.row_rules)).persist()


def _backfill(spark: SparkSession, pipeline: Pipeline, date_from: dt.date, date_to: dt.date,
              home: WeirHome, hold: Hold) -> BackfillResult:
    tables = ensure_tables(spark, home, pipeline)
    in_range = date_range("event_date", date_from, date_to)
    version = latest_version(tables.bronze)
    steps = StepTimes()
    lines, partitions = steps.time("read", lambda: in_partitions_of(
        bronze_lines(spark, tables.bronze, version, date_from, date_to), PARTITION_LINES))
    parsed = cached_parse(lines, pipeline)
    what = f"{pipeline.name} back-fill {date_from}..{date_to}"
    # Side by side, as the stream's writes are (`concurrently`): silver and quarantine, each from
    # the parsed lines; then gold and sessions, each from silver as it now stands.
    try:
        read = steps.time("read+parse", parsed.count)
        derived = transforms.silver(parsed, read_dimension(spark, tables), pipeline,
                                    partitions=partitions)
        lineage = parsed.select("_source", "_position")
        lines_to = run_concurrently(steps.timed({
            "silver": lambda: reconcile(
                _first_copies(derived, tables, pipeline, in_range, read), tables.silver,
                (pipeline.key,), scope=in_range, partition="event_date", owned=lineage,
                before_write=lambda: hold("silver")),
            "quarantine": lambda: _reconcile_quarantine(parsed, tables, pipeline, date_from, date_to,
                                                        hold)}), what=what, spark=spark)
    finally:
        parsed.unpersist()
    from_silver: dict[str, Callable[[], object]] = {
        "gold": lambda: _reconcile_gold(spark, tables, pipeline, date_from, date_to, hold)}
    if tables.sessions is not None:
        from_silver["sessions"] = lambda: _reconcile_sessions(spark, tables, pipeline, date_from,
                                                              date_to, hold)
    derived_to = run_concurrently(steps.timed(from_silver), what=what, spark=spark)
    silver_replaced, quarantine_replaced = bool(lines_to["silver"]), bool(lines_to["quarantine"])
    gold_replaced = bool(derived_to["gold"])
    sessions_replaced = bool(derived_to["sessions"]) if "sessions" in derived_to else None
    # a table's checkpoint is written after its commits, not in one (`tables.CHECKPOINT_INTERVAL`)
    checkpoint_after_commits(*(p for p in (tables.silver, tables.quarantine, tables.gold,
                                           tables.sessions) if p is not None))
    log.info("%s back-fill %s..%s from bronze version %d (%d line(s) read): silver %s, quarantine %s, "
             "gold %s in %.1fs (%s)", pipeline.name, date_from, date_to, version, read,
             word(silver_replaced), word(quarantine_replaced), word(gold_replaced), steps.elapsed(), steps)
    return BackfillResult(pipeline.name, date_from, date_to, silver_replaced, gold_replaced,
                          quarantine_replaced, version, sessions_replaced, lines_read=read,
                          seconds=steps.rounded(), elapsed_s=round(steps.elapsed(), 2))


def _first_copies(derived: DataFrame, tables: PipelineTables, pipeline: Pipeline,
                  in_range: str, lines: int) -> DataFrame:
    """The derived silver rows of the range, less the events silver already holds under a date
    outside it: an event resent with another event time keeps its first ingested copy, which the
    stream put in silver first (the copies a back-fill reads are deduplicated the same way).

    Such an event may stand under any other date, so every row of silver outside the range is
    looked at, by its key hash first: the range's hashes are broadcast (when its `lines` are at
    most `BROADCAST_HASHES_LINES`) and silver's rows outside it are filtered against them where
    they are read, so that only the rows whose hash is the range's reach the join on the key
    itself. Joined on the key alone, every key of silver's history was shuffled and sorted: the
    silver step of a day's back-fill took 16-20 s longer among 30 days of history than among one
    (docs/performance.md, "A day's back-fill among 30 days of history")."""
    rows = derived.where(in_range)          # `transforms.silver`'s rows carry their key hash
    hashes = rows.select(transforms.KEY_HASH).distinct()
    silver = derived.sparkSession.read.format("delta").load(str(tables.silver))
    if transforms.KEY_HASH not in silver.columns:      # a silver from before its key hash
        silver = silver.withColumn(transforms.KEY_HASH,
                                   F.expr(transforms.key_hash_expression((pipeline.key,))))
    elsewhere = (silver.where(f"NOT ({in_range})").select(pipeline.key, transforms.KEY_HASH)
                 .join(F.broadcast(hashes) if lines <= BROADCAST_HASHES_LINES else hashes,
                       on=transforms.KEY_HASH, how="left_semi")
                 .select(pipeline.key))
    return rows.join(elsewhere, on=pipeline.key, how="left_anti")


def _reconcile_quarantine(parsed: DataFrame, tables: PipelineTables, pipeline: Pipeline,
                          date_from: dt.date, date_to: dt.date, hold: Hold) -> bool:
    """Quarantine rows of the lines read: the rejects are set, and a line that is now valid loses
    its row — unless its event date is outside the range (its silver row belongs to a back-fill of
    that date, which then takes it out of quarantine; until then it stays accounted for)."""

    inside = transforms.event_date(pipeline).between(F.lit(date_from), F.lit(date_to))
    outside = F.col(transforms.REASON).isNull() & ~F.coalesce(inside, F.lit(False))
    owned = (parsed.where(~outside)
             .select(F.col("_source").alias("source"), F.col("_position").alias("position")))
    # one pass over the lines read: their ingest dates, and how many are valid events outside
    by_date = (parsed.groupBy(F.to_date("_ingest_time").alias("ingest_date"))
               .agg(F.count_if(outside).alias("outside")).collect())
    if not by_date:
        return False
    ingest_dates = [row.ingest_date for row in by_date]
    if outside_count := sum(row.outside for row in by_date):
        log.warning("%s back-fill: %d line(s) read are valid events of dates outside the range; "
                    "their quarantine rows stay until those dates are back-filled",
                    pipeline.name, outside_count)
    scope = "ingest_date IN ({})".format(", ".join(sql_literal(d) for d in sorted(ingest_dates)))
    return reconcile(transforms.rejects(parsed), tables.quarantine, transforms.BRONZE_KEY,
                     scope=scope, partition="ingest_date", owned=owned,
                     before_write=lambda: hold("quarantine"))


def _reconcile_gold(spark: SparkSession, tables: PipelineTables, pipeline: Pipeline,
                    date_from: dt.date, date_to: dt.date, hold: Hold) -> bool:
    """Gold of the range = the aggregates of silver, recomputed until nothing differs: the gold
    query may upsert a window from its own state while this runs, and the next round sees it. A
    round after which neither table holds any commit but its own ends it: the next would read
    the same silver against what this one wrote, and find nothing to change."""
    in_range = date_range("event_date", date_from, date_to)
    # A window starting on the last day may reach into the next one (sliding windows).
    spill = date_range("event_date", date_from, date_to + dt.timedelta(days=1))
    replaced = False
    for _ in range(GOLD_ROUNDS):
        silver_read, gold_read = latest_version(tables.silver), latest_version(tables.gold)
        silver = (spark.read.format("delta").option("versionAsOf", silver_read).load(str(tables.silver))
                  .where(spill))
        windows = transforms.aggregate(silver, pipeline).where(in_range)
        if not reconcile(windows, tables.gold, transforms.gold_key(pipeline), scope=in_range,
                         partition="event_date", before_write=lambda: hold("gold")):
            return replaced
        replaced = True
        if (latest_version(tables.silver), latest_version(tables.gold)) == (silver_read, gold_read + 1):
            return replaced
    log.warning("%s back-fill %s..%s: gold still changing after %d rounds (the stream is writing "
                "these dates); the next back-fill or gold batch completes it",
                pipeline.name, date_from, date_to, GOLD_ROUNDS)
    return replaced


def _reconcile_sessions(spark: SparkSession, tables: PipelineTables, pipeline: Pipeline,
                        date_from: dt.date, date_to: dt.date, hold: Hold) -> bool:
    """The sessions that start in the range, recomputed from silver by the stream's state function
    (`sessions.batch_rows`). A session stands under the date of its first event and may run past
    midnight, so silver is read from the day before to the day after the range."""

    assert tables.sessions is not None
    in_range = date_range("event_date", date_from, date_to)
    around = date_range("event_date", date_from - dt.timedelta(days=1), date_to + dt.timedelta(days=1))
    silver = spark.read.format("delta").load(str(tables.silver))
    rows = sessions.batch_rows(silver.where(around), pipeline,
                               sessions.watermark_horizon(silver, pipeline)).where(in_range)
    return reconcile(rows, tables.sessions, sessions.table_key(pipeline), scope=in_range,
                     partition="event_date", before_write=lambda: hold("sessions"))


def rebuild_from_silver(spark: SparkSession, pipeline: Pipeline, home: WeirHome,
                        tables: PipelineTables, fencing: Fencing | None = None) -> dict[str, int]:
    """Before a query that reads silver (gold, sessions) starts on a fresh checkpoint (first start,
    reset, rewind, refresh): set its table to what silver as of its latest version V derives to, in
    one batch job, and mark that commit so the query reads silver from V+1
    (`queries.starting_version`). Re-reading an existing silver as a stream would take it in file
    order, and rows older than its first batch's watermark would be dropped as late: windows and
    sessions upserted with partial measures. Returns query → V for the tables rebuilt."""
    fresh = [q for q in queries.FROM_SILVER
             if q in queries_of(pipeline) and not has_started(home, pipeline, q)]
    if fresh and not holds_data(tables.silver):
        # An empty table is what an empty silver derives to; the query reads silver from its first
        # batch on (`queries.starting_version`). A table holding rows, or marked as rebuilt from
        # rows, is rebuilt (to empty) all the same. A pipeline's first start takes this path.
        fresh = [q for q in fresh if holds_data(queries.rebuilt_table(tables, q))
                 or queries.rebuilt_through(tables, q) is not None]
    if not fresh:
        return {}
    # one version and one scan of it for every table rebuilt (the caller holds the lease)
    version = latest_version(tables.silver)
    silver = spark.read.format("delta").option("versionAsOf", version).load(str(tables.silver))
    through = silver.agg(F.unix_millis(F.max(F.col(pipeline.event_time).cast("timestamp")))).first()[0]
    marker = json.dumps({queries.REBUILT_FROM: version, queries.REBUILT_THROUGH: through})

    def rebuild(query: str) -> None:
        rows = (transforms.aggregate(silver, pipeline) if query == "gold" else
                sessions.batch_rows(silver, pipeline, sessions.horizon_after(through, pipeline)))
        path = queries.rebuilt_table(tables, query)

        def overwrite() -> None:
            writer = rows.write.format("delta").mode("overwrite").option("userMetadata", marker)
            save_fenced(writer, path, fencing)

        retry_conflicts(overwrite, what=f"rebuild {path}")
        log.info("%s: %s rebuilt from silver version %d; the %s query starts after it",
                 pipeline.name, path.name, version, query)

    # each table from the same scan of silver, side by side (`concurrently`)
    run_concurrently({query: functools.partial(rebuild, query) for query in fresh},
                     what=f"{pipeline.name} rebuild from silver", spark=spark)
    rebuilt = dict.fromkeys(fresh, version)
    if latest_version(tables.silver) == version:
        # The queries start at V+1, which must exist: Delta refuses a future version, and `latest`
        # (resolved only at a query's first batch) would skip a commit made in between.
        commit_nothing(tables.silver, fencing)
    return rebuilt


def rebuild_from_bronze(spark: SparkSession, pipeline: Pipeline, home: WeirHome) -> int:
    """A full refresh's derivation: silver and quarantine replaced as a whole by what every line
    of bronze (as of its latest version V) derives to with the current code, in one overwrite each
    (the schema may have changed: that is why one refreshes). The caller holds the pipeline's
    lease, so no stream commits meanwhile; the old versions stay in the tables' history. Gold and
    the sessions are left to `rebuild_from_silver`, which runs on their fresh checkpoints. Returns V."""
    with session_conf(spark, BATCH_CONF):
        return _rebuild_from_bronze(spark, pipeline, home)


def _rebuild_from_bronze(spark: SparkSession, pipeline: Pipeline, home: WeirHome) -> int:
    tables = ensure_tables(spark, home, pipeline)
    version = latest_version(tables.bronze)
    lines, partitions = in_partitions_of(spark.read.format("delta").option("versionAsOf", version)
                                         .load(str(tables.bronze)), PARTITION_LINES)
    parsed = cached_parse(lines, pipeline)
    try:
        derived = transforms.silver(parsed, read_dimension(spark, tables), pipeline,
                                    partitions=partitions)

        def overwrite(frame: DataFrame, path: Path, partition: str) -> None:
            retry_conflicts(lambda: frame.write.format("delta").mode("overwrite")
                            .option("overwriteSchema", "true").partitionBy(partition).save(str(path)),
                            what=f"rebuild {path}")

        run_concurrently({
            "silver": functools.partial(overwrite, derived, tables.silver, "event_date"),
            "quarantine": functools.partial(overwrite, transforms.rejects(parsed), tables.quarantine,
                                            "ingest_date")},
            what=f"{pipeline.name} rebuild from bronze", spark=spark)
    finally:
        parsed.unpersist()
    log.info("%s: silver and quarantine rebuilt from bronze version %d", pipeline.name, version)
    return version


def word(changed: bool) -> str:
    """How a back-fill names what it did to a layer."""
    return "replaced" if changed else "unchanged"
