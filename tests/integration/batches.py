"""Stream micro-batches made in-process (the ingest query's own foreachBatch on a bronze-shaped
DataFrame, no streaming query to start) and the comparison of two tables' rows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from spark_jobs import stream, transforms
from spark_jobs.catalog import Pipeline
from spark_jobs.layers import PipelineTables


def bronze_batch(spark: SparkSession, files: list[Path], ingest: dt.datetime) -> DataFrame:
    """The bronze-shaped micro-batch the file source would make of `files`."""
    rows = [(line, f"file://{path}", i + 1, None, None, None, None, ingest, ingest.date(), None, None)
            for path in files for i, line in enumerate(path.read_text().splitlines())]
    return spark.createDataFrame(rows, transforms.BRONZE_SCHEMA)


def ingest(spark: SparkSession, pipeline: Pipeline, tables: PipelineTables, files: list[Path],
           ingest_time: dt.datetime, batch_id: int) -> None:
    """One stream micro-batch of `files`, through the stream's own foreachBatch."""
    stream.IngestBatch(pipeline, tables)(bronze_batch(spark, files, ingest_time), batch_id)


def differs(got: DataFrame, want: DataFrame) -> str:
    """'' when both hold the same rows (with multiplicity), else a sample both ways."""
    lost, extra = want.exceptAll(got), got.exceptAll(want)
    if lost.isEmpty() and extra.isEmpty():
        return ""
    return (f"lost {lost.count()}: {lost.limit(3).collect()}; "
            f"extra {extra.count()}: {extra.limit(3).collect()}")
