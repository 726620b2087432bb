"""A Delta table's checkpoint is written after its writer's commits, never inside one: a commit
that landed on a multiple of Delta's checkpoint interval used to wait for the whole table state to
be rebuilt and written (2-3 s of every tenth micro-batch, the stream's tail latency)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from spark_jobs import stream
from spark_jobs.generator import Written, generate
from spark_jobs.layers import PipelineTables
from spark_jobs.tables import (
    CHECKPOINT_EVERY,
    CHECKPOINT_INTERVAL,
    INTERVAL_OUT_OF_REACH,
    checkpoint_after_commits,
    delta_log,
    delta_version,
    ensure_table,
    last_checkpoint,
    set_properties,
)
from tests.helpers import assert_exactly_once, landing_keys, table
from tests.integration.pipelines import playback

APP = "weir-test-writer"


def _fresh_log_view(spark: SparkSession, path: Path):
    """Spark's view of the table as a new driver gets it: from its last checkpoint and the commits
    after it, not from the snapshots this session kept."""
    jvm = spark._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path))
    return log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())


def test_a_checkpoint_is_written_after_the_commits_and_spark_reads_the_table_from_it(
        spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    ensure_table(spark, path, spark.range(0).selectExpr("id", "CAST(id % 2 AS INT) AS part").schema,
                 ["part"])
    assert delta_log(path).metadata().configuration[CHECKPOINT_INTERVAL] == INTERVAL_OUT_OF_REACH
    for n in range(1, CHECKPOINT_EVERY + 3):   # each an application's transaction, as fenced writes
        (spark.range(n * 10, n * 10 + 10).selectExpr("id", "CAST(id % 2 AS INT) AS part")
         .write.format("delta").mode("append").option("txnAppId", APP).option("txnVersion", n)
         .save(str(path)))
    latest = delta_version(path)
    assert latest == CHECKPOINT_EVERY + 2
    assert last_checkpoint(path) is None, "Delta checkpointed inside a commit"

    checkpoint_after_commits(path)
    assert last_checkpoint(path) == latest
    snapshot = _fresh_log_view(spark, path)
    assert snapshot.checkpointProvider().version() == latest
    assert snapshot.transactions().apply(APP) == CHECKPOINT_EVERY + 2
    rows = table(spark, path)
    assert rows.count() == rows.select("id").distinct().count() == 10 * (CHECKPOINT_EVERY + 2)
    assert rows.where("part = 1").count() == 5 * (CHECKPOINT_EVERY + 2)

    # not due again until CHECKPOINT_EVERY more commits; Spark writes on top of it
    spark.range(1000, 1010).selectExpr("id", "CAST(id % 2 AS INT) AS part").write.format("delta") \
        .mode("append").save(str(path))
    checkpoint_after_commits(path)
    assert last_checkpoint(path) == latest
    assert table(spark, path).count() == 10 * (CHECKPOINT_EVERY + 3)


def test_a_table_from_before_gets_the_interval_once_and_keeps_its_rows(
        spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "old"
    spark.range(5).write.format("delta").save(str(path))   # no interval of its own
    set_properties(spark, path, {})
    assert delta_log(path).metadata().configuration[CHECKPOINT_INTERVAL] == INTERVAL_OUT_OF_REACH
    version = delta_version(path)
    set_properties(spark, path, {})
    assert delta_version(path) == version, "set once"
    assert sorted(r.id for r in table(spark, path).collect()) == [0, 1, 2, 3, 4]


def test_the_streams_tables_are_checkpointed_after_its_batches_and_read_back_exactly_once(
        spark: SparkSession, home) -> None:
    """More micro-batches than the checkpoint's interval, then a restart that reads its tables
    (and its fencing transactions) from the checkpoints the batches left."""
    pipeline = playback(files_per_trigger=1)
    tables = PipelineTables.of(home, pipeline)
    landed = Written()
    landed.add(generate(home.landing("playback"), files=CHECKPOINT_EVERY, sessions_per_file=1,
                        seed=71, prefix="ck"))
    stream.run(pipeline, once=True, home=home, spark=spark)
    for path in (tables.bronze, tables.silver):
        assert last_checkpoint(path) is not None and last_checkpoint(path) >= CHECKPOINT_EVERY, path
        assert last_checkpoint(path) > delta_version(path) - CHECKPOINT_EVERY, path

    for path in (tables.bronze, tables.silver):
        _fresh_log_view(spark, path)
    landed.add(generate(home.landing("playback"), files=1, sessions_per_file=1, seed=72, prefix="cl"))
    stream.run(pipeline, once=True, home=home, spark=spark)
    assert_exactly_once(table(spark, tables.silver), ("event_id",), landed.event_ids, "silver")
    assert_exactly_once(table(spark, tables.bronze), ("source", "position"),
                        landing_keys(landed.files), "bronze")
