"""The tables written a row per input line keep per-file statistics of the columns their readers
skip files by, not of every column: Delta's default (the first 32 columns) computed the minimum and
maximum of a line's whole text in bronze and of every contract field in silver on every write
(`layers.statistics_columns`, docs/performance.md)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from pyspark.sql import SparkSession

from spark_jobs.generator import generate
from spark_jobs.layers import ensure_tables, statistics_columns
from spark_jobs.tables import STATS_COLUMNS, delta_identifier, delta_log, delta_version
from tests.integration.batches import ingest
from tests.integration.pipelines import playback

INGEST = dt.datetime(2026, 11, 20, 6, 0, tzinfo=dt.UTC)


def added_statistics(path: Path) -> list[dict]:
    """The statistics of every file the table's commits added."""
    stats = []
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for action in map(json.loads, commit.read_text().splitlines()):
            if "add" in action:
                stats.append(json.loads(action["add"]["stats"]))
    return stats


def test_the_line_tables_keep_statistics_of_the_columns_their_reads_skip_by(
        spark: SparkSession, home) -> None:
    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    landing = home.landing("playback")
    written = generate(landing, files=2, sessions_per_file=6, seed=5, bad_ratio=0.2)
    ingest(spark, pipeline, tables, sorted(landing.iterdir()), INGEST, 0)

    columns = statistics_columns(pipeline)
    assert set(columns) == {"bronze", "quarantine", "silver"}
    assert columns["silver"][0] == pipeline.key and "_key_hash" in columns["silver"]
    for key in columns:
        path = getattr(tables, key)
        assert delta_log(path).metadata().configuration[STATS_COLUMNS] == ",".join(columns[key])
        stats = added_statistics(path)
        assert stats, f"{key}: no file written"
        for file_stats in stats:
            assert set(file_stats["minValues"]) == set(file_stats["maxValues"]) == set(columns[key]), key
            assert file_stats["numRecords"] > 0
    assert sum(s["numRecords"] for s in added_statistics(tables.bronze)) == written.lines
    assert sum(s["numRecords"] for s in added_statistics(tables.silver)) == len(written.event_ids)
    # gold is small, and keeps every column's for the analysts' filters
    assert STATS_COLUMNS not in delta_log(tables.gold).metadata().configuration


def test_a_table_from_before_gets_its_statistics_columns_once_and_keeps_an_operators_own(
        spark: SparkSession, home) -> None:
    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    spark.sql(f"ALTER TABLE {delta_identifier(tables.silver)} UNSET TBLPROPERTIES ('{STATS_COLUMNS}')")
    assert STATS_COLUMNS not in delta_log(tables.silver).metadata().configuration
    before = {key: delta_version(path) for key, path in tables.outputs().items()}

    ensure_tables(spark, home, pipeline)
    after = {key: delta_version(path) for key, path in tables.outputs().items()}
    assert after == {**before, "silver": before["silver"] + 1}, "one commit, to silver only"
    assert delta_log(tables.silver).metadata().configuration[STATS_COLUMNS] == \
        ",".join(statistics_columns(pipeline)["silver"])
    ensure_tables(spark, home, pipeline)
    assert {key: delta_version(path) for key, path in tables.outputs().items()} == after

    # an operator's own choice stays: statistics of one more column, for an analyst's filter
    own = f"{delta_log(tables.silver).metadata().configuration[STATS_COLUMNS]},device"
    spark.sql(f"ALTER TABLE {delta_identifier(tables.silver)} "
              f"SET TBLPROPERTIES ('{STATS_COLUMNS}' = '{own}')")
    ensure_tables(spark, home, pipeline)
    assert delta_log(tables.silver).metadata().configuration[STATS_COLUMNS] == own
