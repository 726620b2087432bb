"""Streaming sources, each producing bronze-shaped rows (see `transforms.BRONZE_SCHEMA`):
the raw record, a unique `(source, position)` and ingest metadata."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from spark_jobs import kafka, landing, landing_manifest
from spark_jobs.catalog import FileSource, KafkaSource
from spark_jobs.topology import checkpoint_location
from spark_jobs.transforms import BRONZE_SCHEMA

if TYPE_CHECKING:
    import threading

    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.catalog import Pipeline
    from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)


def read_stream(spark: SparkSession, pipeline: Pipeline, home: WeirHome,
                stopping: threading.Event | None = None) -> DataFrame:
    """The pipeline's source as a stream. Once `stopping` is set, a source that `holds_planning`
    plans no further batch, so the driver stops right after the one in flight."""
    source = pipeline.source
    if isinstance(source, FileSource):
        return _files(spark, pipeline, home, source, stopping)
    if isinstance(source, KafkaSource):
        return _kafka(spark, pipeline, home, source)
    raise TypeError(f"unknown source {source!r}")


def holds_planning(pipeline: Pipeline) -> bool:
    """Whether the pipeline's source plans no further batch once the driver is stopping: the
    landing folder's planner is Weir's; Kafka's is Spark's, and keeps planning while a backlog
    lasts (`stream.stop_at_batch_boundary`)."""
    return isinstance(pipeline.source, FileSource)


def _files(spark: SparkSession, pipeline: Pipeline, home: WeirHome, source: FileSource,
           stopping: threading.Event | None) -> DataFrame:
    """Lines of the landing folder's files (`spark_jobs.landing`): `source` names the file and
    its content digest, `position` is the line's byte offset in the file. Files whose name starts
    with `.` or `_` are ignored, so writers write there and rename when complete. The reader's
    manifest of discovered files lives in the ingest checkpoint, so it is backed up, restored and
    reset with it."""
    landing_dir = home.landing(pipeline.name)
    landing_dir.mkdir(parents=True, exist_ok=True)
    manifest = landing_manifest.manifest_dir(checkpoint_location(home, pipeline, "ingest"))
    options = {"path": str(landing_dir), "manifest": str(manifest),
               "maxBytesPerTrigger": str(source.max_bytes_per_trigger),
               "maxBytesPerPartition": str(source.max_bytes_per_partition)}
    if source.max_files_per_trigger:
        options["maxFilesPerTrigger"] = str(source.max_files_per_trigger)
    return bronze_columns(landing.read_stream(spark, options, stopping), value=F.col("value"),
                          source=F.col("source"), position=F.col("position"), raw_bytes=F.col("raw"),
                          line_bytes=F.col("line_bytes"))


def _kafka(spark: SparkSession, pipeline: Pipeline, home: WeirHome, source: KafkaSource) -> DataFrame:
    """Records of the pipeline's topic; `(source, position)` is `kafka://topic/partition@topic-id`
    (`kafka.record_source`) and the offset, so a recreated topic's records are not taken for the
    old ones. The brokers are checked first, so an unreachable cluster, a missing topic or a
    recreated one fails the start with a clear message instead of a hang or a silent skip."""
    conn = kafka.connection(source, home=home)
    topic = kafka.describe_topic(conn, source.topic)
    kafka.check_topic(home, pipeline, topic)
    options = kafka.source_options(home, pipeline, source, conn)
    log.info("%s reads Kafka topic %s (id %s, %d partitions) from %s, max %s offsets per batch",
             pipeline.name, source.topic, topic.topic_id, topic.partitions, conn.describe(),
             source.max_offsets_per_trigger or "all")
    if source.max_offsets_per_trigger is None:
        log.warning("%s: max_offsets_per_trigger=None takes the whole backlog of topic %s in one "
                    "micro-batch; the driver's memory then grows with the backlog (the catalog's "
                    "default bounds it)", pipeline.name, source.topic)
    records = spark.readStream.format("kafka").options(**options).load()
    return bronze_columns(
        records,
        value=F.expr("make_valid_utf8(CAST(value AS STRING))"),
        raw_bytes=F.when(~F.expr("is_valid_utf8(value)"), F.col("value")),
        source=F.format_string("kafka://%s/%d@%s", F.col("topic"), F.col("partition"),
                               F.lit(topic.topic_id)),
        position=F.col("offset"),
        topic=F.col("topic"),
        partition=F.col("partition").cast("long"),
        offset=F.col("offset"),
        kafka_timestamp=F.col("timestamp"),
    )


def bronze_columns(df: DataFrame, **columns: object) -> DataFrame:
    """Project `df` onto the bronze schema; ingest time is the micro-batch's timestamp, which
    the offset log records, so a replayed batch gets the same value."""
    ingest_time = F.current_timestamp()
    given = {**columns, "ingest_time": ingest_time, "ingest_date": F.to_date(ingest_time)}
    out = []
    for field in BRONZE_SCHEMA.fields:
        column = given.get(field.name, F.lit(None))
        out.append(column.cast(field.dataType).alias(field.name))  # type: ignore[union-attr]
    return df.select(*out)
