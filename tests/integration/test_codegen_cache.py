"""A running stream's generated code is compiled once, not in every micro-batch.

Spark keeps 100 classes compiled from generated code by default (`spark.sql.codegen.cache.maxEntries`).
An ingest micro-batch runs more distinct plans than that (the parse, each write, Delta's statistics,
its log replays and commits), so each batch evicted the classes of the batch before and compiled
them again, and HotSpot's C2 compiler JIT-compiled every new class again: as much CPU as the
tasks themselves, batch after batch (docs/performance.md). `spark_jobs.session` makes room."""

from __future__ import annotations

import datetime as dt

from spark_jobs.generator import generate
from spark_jobs.layers import ensure_tables
from tests.integration.batches import ingest
from tests.integration.pipelines import playback

# What a batch like the one before may still compile: the plans that carry the batch's own
# literals (where its lines can already stand, its ingest time): 0 here (2026-12-01: 84, 24, 0,
# 0 for the four batches). The second batch is the first to find rows in the tables, so it runs
# plans the first did not (silver's key hashes and keys read): 24-26, and not a batch "like the
# one before". With Spark's default cache the batches after the first compiled 73 to 104 classes
# each, the first 123.
AT_MOST_PER_BATCH = 25


def compiled(spark) -> int:
    """How many classes Spark has compiled from generated code in this JVM so far."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def test_a_micro_batch_like_the_one_before_compiles_next_to_nothing(spark, home, tmp_path) -> None:
    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    written = generate(tmp_path / "landing", files=4, sessions_per_file=10, seed=91)
    at = dt.datetime(2026, 11, 19, 21, 0, tzinfo=dt.UTC)
    per_batch = []
    for batch_id, path in enumerate(written.files):
        before = compiled(spark)
        ingest(spark, pipeline, tables, [path], at + dt.timedelta(minutes=batch_id), batch_id)
        per_batch.append(compiled(spark) - before)
    # the first batch compiles its plans (unless an earlier test did), the second those of the
    # reads into tables that now hold rows; the later ones find them
    assert max(per_batch[2:]) <= AT_MOST_PER_BATCH, per_batch
