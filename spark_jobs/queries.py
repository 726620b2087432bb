"""The streaming DataFrame each query of the topology runs, built in one place for the driver
(`stream.start_query`) and for the checkpoint compatibility check (`checkpoints.compat`), so the
plan the check compares with the checkpoint is the plan the driver starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs import transforms
from spark_jobs.sources import read_stream

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.catalog import Pipeline
    from spark_jobs.home import WeirHome
    from spark_jobs.layers import PipelineTables


def ingest(spark: SparkSession, pipeline: Pipeline, home: WeirHome) -> DataFrame:
    """Bronze-shaped rows from the pipeline's source."""
    return read_stream(spark, pipeline, home)


def gold(spark: SparkSession, pipeline: Pipeline, tables: PipelineTables) -> DataFrame:
    """Silver as a Delta stream → watermarked event-time windows with the catalog's measures.
    Back-fills rewrite silver partitions; their change commits are skipped here, and the
    back-fill replaces gold for those dates itself."""
    silver = (spark.readStream.format("delta").option("skipChangeCommits", "true")
              .load(str(tables.silver)))
    return transforms.aggregate(
        silver.withWatermark(pipeline.event_time, pipeline.aggregation.watermark), pipeline)


def build(spark: SparkSession, pipeline: Pipeline, home: WeirHome, tables: PipelineTables,
          query: str) -> DataFrame:
    """The streaming DataFrame of `query` (one of `topology.QUERIES`)."""
    if query == "ingest":
        return ingest(spark, pipeline, home)
    if query == "gold":
        return gold(spark, pipeline, tables)
    raise ValueError(f"unknown query {query!r}")
