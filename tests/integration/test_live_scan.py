"""`weir.LiveScan` gives each read of a Delta table its files from the driver's list of the table
instead of a Spark job over Delta's state. Its oracle is Delta's own path (the rule switched off):
every read returns the same rows, reads every file that holds one of them, and prunes partitions
exactly as Delta does; its point is that planning a read then runs no Spark job at all."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ENABLED = "spark.weir.liveScan.enabled"
SCHEMA = "id long, v string, day date, region string"
WIDE = f"{SCHEMA}, seen date"
DAYS = [dt.date(2026, 11, d) for d in (1, 2, 3, 4)]
REGIONS = ["eu", "us", None]


@contextmanager
def live_scan(spark: SparkSession, on: bool) -> Iterator[None]:
    spark.conf.set(ENABLED, str(on).lower())
    try:
        yield
    finally:
        spark.conf.unset(ENABLED)


def rows_and_files(read: Callable[[], DataFrame], on: bool) -> tuple[list[tuple], set[str]]:
    """The rows a new frame of `read` reads, and the files its plan lists, with the rule on or off
    (a new frame each time: a frame keeps the plan it was first optimized to)."""
    frame = read()
    with live_scan(frame.sparkSession, on):
        return sorted(tuple(r) for r in frame.collect()), set(frame.inputFiles())


def holding(frame: DataFrame) -> set[str]:
    """The files that hold a row of `frame` (as Delta's own path reads it)."""
    return {r[0] for r in frame.select(F.input_file_name()).distinct().collect()}


@pytest.fixture(scope="module")
def table(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four days by three regions (one of them null), written in three appends of distinct id
    ranges and `seen` dates (the last one's null): several files a partition, whose statistics
    tell the appends apart."""
    path = tmp_path_factory.mktemp("live_scan") / "t"
    for chunk in range(3):
        seen = dt.date(2026, 10, chunk + 1) if chunk < 2 else None
        rows = [(chunk * 100 + i, f"{'x' if i % 2 else 'y'}{i}", day, region, seen)
                for i, (day, region) in enumerate((d, r) for d in DAYS for r in REGIONS)]
        (spark.createDataFrame(rows, WIDE).write.format("delta").mode("append")
         .partitionBy("day", "region").save(str(path)))
    return path


WHERE = [
    "day = DATE'2026-11-01'",
    "day >= '2026-11-02' AND day <= '2026-11-03'",
    "day IN (DATE'2026-11-01', DATE'2026-11-04')",
    "region IS NULL",
    "region = 'eu' OR day = DATE'2026-11-02'",
    "DAY = DATE'2026-11-03'",
    "month(day) = 11 AND region <> 'eu'",
    "id BETWEEN 105 AND 108",
    "id > 205 AND region = 'us'",
    "day = DATE'2026-11-01' OR id = 207",
    "v LIKE 'x%' AND day < DATE'2026-11-03'",
    "region IS NOT NULL AND id < 3",
    "day = DATE'2026-12-01'",
    "seen BETWEEN DATE'2026-10-02' AND DATE'2026-10-03' OR seen IS NULL",
    "seen IS NOT NULL AND day = DATE'2026-11-04'",
]


@pytest.mark.parametrize("where", WHERE)
def test_a_read_returns_what_deltas_own_path_returns(spark: SparkSession, table: Path,
                                                     where: str) -> None:
    def read() -> DataFrame:
        return spark.read.format("delta").load(str(table)).where(where)

    delta_rows, delta_files = rows_and_files(read, on=False)
    rows, files = rows_and_files(read, on=True)

    assert rows == delta_rows
    with live_scan(spark, on=False):
        assert holding(read()) <= files   # every file holding a row meeting the filter is read
    if not any(column in where for column in ("id", "v ", "seen")):
        assert files == delta_files      # partitions pruned exactly as Delta prunes them


@pytest.mark.parametrize("where", [
    "id BETWEEN 105 AND 108",
    # a back-fill's read of bronze: the dates' hint, or none (`backfill.bronze_lines`)
    "seen BETWEEN DATE'2026-10-02' AND DATE'2026-10-03' OR seen IS NULL",
    "seen IS NOT NULL",
])
def test_statistics_skip_the_files_whose_values_miss(spark: SparkSession, table: Path, where: str) -> None:
    """Ranges of integers and dates, and null counts: an append's files are left out."""
    with live_scan(spark, on=True):
        everything = spark.read.format("delta").load(str(table))
        some = set(everything.where(where).inputFiles())
        assert 0 < len(some) < len(everything.inputFiles())


def test_planning_a_read_of_a_listed_table_runs_no_spark_job(spark: SparkSession, table: Path) -> None:
    """Delta's path picks a read's files with Spark jobs over its state; the rule, once the table's
    files are listed (its first read lists them), picks them in the driver."""
    tracker = spark.sparkContext.statusTracker()

    def jobs_to_plan(on: bool, group: str) -> int:
        with live_scan(spark, on):
            spark.sparkContext.setJobGroup(group, "plan a read")
            try:
                spark.read.format("delta").load(str(table)).where("day = DATE'2026-11-02'").inputFiles()
            finally:
                spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        return len(tracker.getJobIdsForGroup(group))

    jobs_to_plan(True, "live-scan-first")   # lists the table, if no read has yet
    assert jobs_to_plan(True, "live-scan-again") == 0
    assert jobs_to_plan(False, "delta-scan") > 0


def test_versions_after_deletes_merges_and_time_travel(spark: SparkSession, tmp_path: Path) -> None:
    """A version read after commits that remove files (a DELETE, a MERGE) lists the files brought
    forward; an older version read by time travel lists that version's files."""
    from delta.tables import DeltaTable

    path = tmp_path / "t"
    spark.createDataFrame([(i, "a", DAYS[i % 4], "eu") for i in range(40)], SCHEMA).write.format(
        "delta").partitionBy("day").save(str(path))
    DeltaTable.forPath(spark, str(path)).delete("id % 3 = 0")
    changes = spark.createDataFrame([(i, "b", DAYS[i % 4], "us") for i in range(30, 50)], SCHEMA)
    (DeltaTable.forPath(spark, str(path)).alias("t").merge(changes.alias("s"), "t.id = s.id")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

    for version in (0, 1, 2):
        def read(version: int = version) -> DataFrame:
            return (spark.read.format("delta").option("versionAsOf", version).load(str(path))
                    .where("day >= DATE'2026-11-02'"))

        assert rows_and_files(read, on=True) == rows_and_files(read, on=False)
    with live_scan(spark, on=True):
        latest = spark.read.format("delta").load(str(path))
        assert latest.count() == 50 - len([i for i in range(30) if i % 3 == 0])
        assert latest.where("v = 'b'").count() == 20


@pytest.mark.parametrize("properties", [
    {"delta.enableDeletionVectors": "true"},
    {"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"},
])
def test_deletion_vectors_and_column_mapping_read_as_delta_reads_them(
        spark: SparkSession, tmp_path: Path, properties: dict[str, str]) -> None:
    """Deletion vectors are applied to the files listed; a table with column mapping (whose
    partition values are kept under physical names) is left to Delta."""
    from delta.tables import DeltaTable

    path = tmp_path / "t"
    frame = spark.createDataFrame([(i, "a", DAYS[i % 4], "eu") for i in range(40)], SCHEMA)
    writer = frame.coalesce(1).write.format("delta").partitionBy("day")
    for key, value in properties.items():
        writer = writer.option(key, value)
    writer.save(str(path))
    DeltaTable.forPath(spark, str(path)).delete("id % 4 = 1")

    def read() -> DataFrame:
        return spark.read.format("delta").load(str(path)).where("day <= DATE'2026-11-02'")

    assert rows_and_files(read, on=True) == rows_and_files(read, on=False)
    with live_scan(spark, on=True):
        assert read().count() == len([i for i in range(40) if i % 4 == 0])
