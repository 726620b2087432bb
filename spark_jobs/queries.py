"""The streaming DataFrame each query of the topology runs, built in one place for the driver
(`stream.start_query`) and for the checkpoint compatibility check (`checkpoints.compat`), so the
plan the check compares with the checkpoint is the plan the driver starts."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from spark_jobs import sessions as session_state
from spark_jobs import transforms
from spark_jobs.sources import read_stream
from spark_jobs.topology import has_started

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.catalog import Pipeline
    from spark_jobs.home import WeirHome
    from spark_jobs.layers import PipelineTables


def ingest(spark: SparkSession, pipeline: Pipeline, home: WeirHome) -> DataFrame:
    """Bronze-shaped rows from the pipeline's source."""
    return read_stream(spark, pipeline, home)


# Keys of the `userMetadata` JSON of the gold commit that rebuilt gold from silver in batch: the
# silver version it was rebuilt from, and the latest event time silver held then (epoch ms).
GOLD_REBUILT_FROM = "gold_rebuilt_from_silver_version"
GOLD_REBUILT_THROUGH = "gold_rebuilt_through_event_ms"
REBUILD_HISTORY = 1000   # gold commits searched for the rebuild's marker


def gold_rebuild(spark: SparkSession, tables: PipelineTables) -> dict | None:
    """The marker of the latest batch rebuild of gold (`backfill.rebuild_gold`), or None."""
    if not DeltaTable.isDeltaTable(spark, str(tables.gold)):
        return None
    marked = (DeltaTable.forPath(spark, str(tables.gold)).history(REBUILD_HISTORY)
              .where(F.col("userMetadata").contains(GOLD_REBUILT_FROM))
              .orderBy(F.col("version").desc()).select("userMetadata").first())
    return None if marked is None else json.loads(marked[0])


def gold_starting_version(spark: SparkSession, pipeline: Pipeline, home: WeirHome,
                          tables: PipelineTables) -> str | None:
    """The silver version a gold query on a fresh checkpoint starts from: the one after the
    version V gold was last rebuilt from in batch (`backfill.rebuild_gold`, run just before the
    query starts). Delta refuses a starting version that does not exist yet, so while V is still
    silver's latest this is `latest` (= V+1, resolved when the query starts). None once the query
    has a checkpoint (Spark ignores starting options then) or when gold was never rebuilt."""

    if has_started(home, pipeline, "gold"):
        return None
    marker = gold_rebuild(spark, tables)
    if marker is None:
        return None
    rebuilt_from = int(marker[GOLD_REBUILT_FROM])
    latest = int(DeltaTable.forPath(spark, str(tables.silver)).history(1).first()["version"])
    return str(rebuilt_from + 1) if latest > rebuilt_from else "latest"


def gold_rebuilt_through(spark: SparkSession, tables: PipelineTables) -> int | None:
    """The latest event time (epoch ms) of the silver gold was last rebuilt from, or None. The
    gold query's state starts empty after a rebuild: a window starting at or before this time may
    hold rebuilt events the query never saw (`stream.GoldBatch` recomputes those from silver)."""
    marker = gold_rebuild(spark, tables)
    return None if marker is None else marker.get(GOLD_REBUILT_THROUGH)


def gold(spark: SparkSession, pipeline: Pipeline, tables: PipelineTables,
         home: WeirHome | None = None) -> DataFrame:
    """Silver as a Delta stream → watermarked event-time windows with the catalog's measures.
    Back-fills rewrite silver partitions; their change commits are skipped here, and the
    back-fill replaces gold for those dates itself. On a fresh checkpoint (with `home`) the query
    starts after the silver version gold was rebuilt from, instead of re-reading all of silver in
    file order (which drops as late what its first batch's watermark excludes)."""
    reader = spark.readStream.format("delta").option("skipChangeCommits", "true")
    starting = gold_starting_version(spark, pipeline, home, tables) if home is not None else None
    if starting is not None:
        reader = reader.option("startingVersion", starting)
    silver = reader.load(str(tables.silver))
    return transforms.aggregate(
        silver.withWatermark(pipeline.event_time, pipeline.aggregation.watermark), pipeline)


def sessions(spark: SparkSession, pipeline: Pipeline, tables: PipelineTables) -> DataFrame:
    """Silver as a Delta stream → the session rows each micro-batch changes (keyed state with
    event-time timeouts, `spark_jobs.sessions`). Back-fills' change commits are skipped, as for
    gold; on a fresh checkpoint the query reads silver from its beginning."""

    silver = (spark.readStream.format("delta").option("skipChangeCommits", "true")
              .load(str(tables.silver)))
    return session_state.stream_rows(silver, pipeline)


def build(spark: SparkSession, pipeline: Pipeline, home: WeirHome, tables: PipelineTables,
          query: str) -> DataFrame:
    """The streaming DataFrame of `query` (one of `topology.QUERIES`)."""
    if query == "ingest":
        return ingest(spark, pipeline, home)
    if query == "gold":
        return gold(spark, pipeline, tables, home)
    if query == "sessions":
        return sessions(spark, pipeline, tables)
    raise ValueError(f"unknown query {query!r}")
