"""The streaming DataFrame each query of the topology runs, built in one place for the driver
(`stream.start_query`) and for the checkpoint compatibility check (`checkpoints.compat`), so the
plan the check compares with the checkpoint is the plan the driver starts."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from spark_jobs import sessions as session_state
from spark_jobs import transforms
from spark_jobs.sources import read_stream
from spark_jobs.tables import delta_log, delta_version
from spark_jobs.topology import has_started

if TYPE_CHECKING:
    import threading
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.catalog import Pipeline
    from spark_jobs.home import WeirHome
    from spark_jobs.layers import PipelineTables


def ingest(spark: SparkSession, pipeline: Pipeline, home: WeirHome,
           stopping: threading.Event | None = None) -> DataFrame:
    """Bronze-shaped rows from the pipeline's source (`sources.read_stream`)."""
    return read_stream(spark, pipeline, home, stopping)


# Keys of the `userMetadata` JSON of the commit that rebuilt a table read from silver (gold, the
# session table) in batch: the silver version it was rebuilt from, and the latest event time
# silver held then (epoch ms). The names date from gold's rebuild; both tables are gold-layer.
REBUILT_FROM = "gold_rebuilt_from_silver_version"
REBUILT_THROUGH = "gold_rebuilt_through_event_ms"
REBUILD_HISTORY = 1000   # commits searched for the rebuild's marker
# The queries that read silver as a Delta stream, and are rebuilt from it on a fresh checkpoint.
FROM_SILVER = ("gold", "sessions")


def rebuilt_table(tables: PipelineTables, query: str) -> Path:
    """The table `query` (one of `FROM_SILVER`) writes, rebuilt from silver in batch."""
    path = {"gold": tables.gold, "sessions": tables.sessions}[query]
    assert path is not None, query
    return path


def rebuild_marker(tables: PipelineTables, query: str) -> dict | None:
    """The marker of the latest batch rebuild of `query`'s table (`backfill.rebuild_from_silver`),
    or None. Read from the table's log with delta-rs, without the JVM: every start of the query
    reads it, and through Spark it took 0.5-1.5 s of a driver's start each time."""
    path = rebuilt_table(tables, query)
    if delta_version(path) is None:
        return None
    for commit in delta_log(path).history(REBUILD_HISTORY):  # newest first
        marker = commit.get("userMetadata")
        if marker is not None and REBUILT_FROM in marker:
            return json.loads(marker)
    return None


def starting_version(pipeline: Pipeline, home: WeirHome, tables: PipelineTables,
                     query: str) -> str | None:
    """The silver version `query` (gold, sessions) starts from on a fresh checkpoint: the one after
    the version V its table was last rebuilt from in batch (`backfill.rebuild_from_silver`, run
    just before the query starts, which also makes sure V+1 exists: Delta refuses a starting
    version that does not exist yet, and `latest` would skip a commit made before it resolves).
    None once the query has a checkpoint (Spark ignores starting options then) or when its table
    was never rebuilt, or rebuilt from a silver without rows: the query then reads silver's
    snapshot as of its first batch and what follows, all of it new."""

    if has_started(home, pipeline, query):
        return None
    marker = rebuild_marker(tables, query)
    if marker is None or marker.get(REBUILT_THROUGH) is None:
        return None
    return str(int(marker[REBUILT_FROM]) + 1)


def rebuilt_through(tables: PipelineTables, query: str) -> int | None:
    """The latest event time (epoch ms) of the silver `query`'s table was last rebuilt from, or
    None. The query's state starts empty after a rebuild: a window or session holding events by
    this time may hold rebuilt events the query never saw (`stream.GoldBatch` and
    `stream.SessionsBatch` recompute those from silver)."""
    marker = rebuild_marker(tables, query)
    return None if marker is None else marker.get(REBUILT_THROUGH)


def silver_stream(spark: SparkSession, pipeline: Pipeline, tables: PipelineTables, query: str,
                  home: WeirHome | None = None) -> DataFrame:
    """Silver as a Delta stream for `query` (one of `FROM_SILVER`). Back-fills rewrite silver
    partitions; their change commits are skipped here, and the back-fill reconciles the query's
    table for those dates itself. On a fresh checkpoint (with `home`) the query starts after the
    silver version its table was rebuilt from, instead of re-reading all of silver in file order
    (which drops as late what its first batch's watermark excludes). A batch reads at most the
    pipeline's `silver_max_bytes_per_trigger` of silver's files."""
    reader = (spark.readStream.format("delta").option("skipChangeCommits", "true")
              .option("maxBytesPerTrigger", str(pipeline.silver_max_bytes_per_trigger)))
    starting = starting_version(pipeline, home, tables, query) if home is not None else None
    if starting is not None:
        reader = reader.option("startingVersion", starting)
    return reader.load(str(tables.silver))


def gold(spark: SparkSession, pipeline: Pipeline, tables: PipelineTables,
         home: WeirHome | None = None) -> DataFrame:
    """Silver (`silver_stream`) → watermarked event-time windows with the catalog's measures."""
    silver = silver_stream(spark, pipeline, tables, "gold", home)
    return transforms.aggregate(
        silver.withWatermark(pipeline.event_time, pipeline.aggregation.watermark), pipeline)


def sessions(spark: SparkSession, pipeline: Pipeline, tables: PipelineTables,
             home: WeirHome | None = None) -> DataFrame:
    """Silver (`silver_stream`) → the session rows each micro-batch changes (keyed state with
    event-time timeouts, `spark_jobs.sessions`)."""
    silver = silver_stream(spark, pipeline, tables, "sessions", home)
    return session_state.stream_rows(silver, pipeline)


def build(spark: SparkSession, pipeline: Pipeline, home: WeirHome, tables: PipelineTables,
          query: str, stopping: threading.Event | None = None) -> DataFrame:
    """The streaming DataFrame of `query` (one of `topology.QUERIES`); ingest plans no further
    batch once `stopping` is set, where its source allows (`sources.read_stream`)."""
    if query == "ingest":
        return ingest(spark, pipeline, home, stopping)
    if query == "gold":
        return gold(spark, pipeline, tables, home)
    if query == "sessions":
        return sessions(spark, pipeline, tables, home)
    raise ValueError(f"unknown query {query!r}")
