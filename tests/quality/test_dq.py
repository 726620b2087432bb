"""Data quality on real outputs: the stream writes playback silver and gold once (module
fixture); each test copies that WEIR_HOME, writes bad data straight into the Delta tables, and
checks that Great Expectations names exactly the expectation that should fail."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs import catalog, cli, stream
from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.quality import results, run_dq, suites
from tests.helpers import table

GOLD = "gold.playback_qoe_1m"
SILVER = "silver.playback_events"


@dataclass(frozen=True)
class Clean:
    """A WEIR_HOME where the stream wrote clean playback data, and a clock just after it."""

    root: Path
    now: dt.datetime


@pytest.fixture(scope="module")
def clean(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Clean:
    home = WeirHome(tmp_path_factory.mktemp("dq") / "weir")
    generate(home.landing("playback"), files=2, sessions_per_file=6)
    stream.run(catalog.load("playback"), once=True, home=home, spark=spark)
    newest = table(spark, home.table("silver", "playback_events")).agg(F.max("event_time")).first()[0]
    # The stream "just" processed the newest event: pin the clock one minute after it.
    now = newest.astimezone(dt.UTC) + dt.timedelta(minutes=1)
    return Clean(home.root, now)


@pytest.fixture
def home_copy(clean: Clean, tmp_path: Path) -> WeirHome:
    root = tmp_path / "weir"
    shutil.copytree(clean.root, root)
    return WeirHome(root)


def tables_of(home: WeirHome) -> PipelineTables:
    return PipelineTables.of(home, catalog.load("playback"))


def overwrite(df: DataFrame, path: Path) -> None:
    """Replace the table's rows (the bad-data writer of these tests; the schema is unchanged)."""
    df.localCheckpoint().write.format("delta").mode("overwrite").save(str(path))


def test_clean_data_passes_and_the_run_is_stored_and_documented(
        spark: SparkSession, clean: Clean, home_copy: WeirHome) -> None:
    report = run_dq("playback", home=home_copy, spark=spark, freshness=True, now=clean.now)

    assert report.success, report.failed
    assert report.failed == [] and report.warnings == []
    spec = suites.load("playback")
    assert len(report.outcomes) == len(spec.expectations)        # freshness included
    assert report.row_counts[SILVER] > 100 and report.row_counts[GOLD] > 10
    rows = [r for r in results.read(home_copy, "playback") if r["run_id"] == report.run_id]
    assert len(rows) == len(spec.expectations)
    assert all(r["success"] and r["run_success"] for r in rows)
    assert {r["date_from"] for r in rows} == {report.date_from}
    counted = {r["expectation"]: r["observed_value"] for r in rows if r["table"] == SILVER}
    assert counted["expect_table_row_count_to_equal()"] == str(report.row_counts[SILVER])
    assert report.docs_path == home_copy.dq / "docs" / "index.html"
    index = report.docs_path.read_text()
    assert f"playback-{report.run_id}" in index                  # the run is listed in Data Docs
    pages = list((home_copy.dq / "docs" / "validations").rglob(f"playback-{report.run_id}/**/*.html"))
    assert len(pages) == len(report.row_counts) == 3             # one page per table validated
    events = [e for e in _event_log(home_copy) if e["action"] == "dq"]
    assert [e["outcome"] for e in events] == ["success"]


BadData = Callable[[SparkSession, PipelineTables, dt.datetime], None]


def duplicate_gold_key(spark: SparkSession, t: PipelineTables, now: dt.datetime) -> None:
    gold = table(spark, t.gold)
    overwrite(gold.unionByName(gold.limit(1).withColumn("plays", F.lit(0))), t.gold)


def negative_rebuffer(spark: SparkSession, t: PipelineTables, now: dt.datetime) -> None:
    gold = table(spark, t.gold)
    first = gold.orderBy("window_start", "content_id").first()
    hit = ((F.col("window_start") == F.lit(first["window_start"]))
           & (F.col("content_id") == first["content_id"]))
    negative = F.when(hit, F.lit(-250)).otherwise(F.col("rebuffer_ms"))
    overwrite(gold.withColumn("rebuffer_ms", negative), t.gold)


def unknown_event_type(spark: SparkSession, t: PipelineTables, now: dt.datetime) -> None:
    silver = table(spark, t.silver)
    victim = silver.orderBy("event_id").first()["event_id"]
    overwrite(silver.withColumn("event_type", F.when(F.col("event_id") == victim, F.lit("rewind"))
                                .otherwise(F.col("event_type"))), t.silver)


def stale_newest_window(spark: SparkSession, t: PipelineTables, now: dt.datetime) -> None:
    """Gold stopped moving: its windows of the last 30 minutes are gone."""
    cutoff = now - dt.timedelta(minutes=30)
    overwrite(table(spark, t.gold).where(F.col("window_start") < F.lit(cutoff)), t.gold)


# The duplicate gold key is checked through the CLI below (one DQ run less).
@pytest.mark.parametrize(("corrupt", "expected"), [
    (negative_rebuffer, f"{GOLD}: expect_column_values_to_be_between(rebuffer_ms)"),
    (unknown_event_type, f"{SILVER}: expect_column_values_to_be_in_set(event_type)"),
    (stale_newest_window, f"{GOLD}: expect_column_max_to_be_between(window_start)"),
], ids=lambda v: getattr(v, "__name__", "")[:40])
def test_bad_data_fails_naming_the_expectation(spark: SparkSession, clean: Clean, home_copy: WeirHome,
                                               corrupt: BadData, expected: str) -> None:
    corrupt(spark, tables_of(home_copy), clean.now)

    report = run_dq("playback", home=home_copy, spark=spark, freshness=True, now=clean.now)

    assert not report.success
    assert report.failed == [expected], report.to_dict()["outcomes"]
    stored = [r for r in results.read(home_copy, "playback") if r["run_id"] == report.run_id]
    failed = [f"{r['table']}: {r['expectation']}" for r in stored if not r["success"]]
    assert failed == [expected]
    assert not any(r["run_success"] for r in stored)


def test_cli_exits_non_zero_naming_the_failed_expectation(
        spark: SparkSession, clean: Clean, home_copy: WeirHome, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WEIR_HOME", str(home_copy.root))
    duplicate_gold_key(spark, tables_of(home_copy), clean.now)

    code = cli.main(["dq", "playback", "--no-freshness", "--json"])

    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert out["success"] is False
    assert out["failed"] == [f"{GOLD}: expect_compound_columns_to_be_unique(window_start, content_id, cdn)"]
    assert not any(o["expectation"].startswith("expect_column_max") for o in out["outcomes"])

    code = cli.main(["dq", "playback", "--from", "2026-11-19", "--to", "2026-11-18"])
    assert code == 2
    assert "before --from" in capsys.readouterr().err


def test_every_pipeline_suite_loads_with_known_expectation_types() -> None:
    from great_expectations.expectations.registry import get_expectation_impl

    for name in catalog.names():
        spec = suites.load(name)
        assert spec.expectations, name
        for e in spec.expectations:
            assert get_expectation_impl(e.type) is not None
        sessions = {"sessions"} if catalog.load(name).sessions is not None else set()
        assert {e.layer for e in spec.expectations} == {"silver", "gold", *sessions}


def _event_log(home: WeirHome) -> list[dict]:
    from spark_jobs.control import eventlog

    return eventlog.read(home, "playback")


def test_a_home_without_output_is_refused_before_a_driver_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from spark_jobs.quality import runner

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("a DQ run without tables started Spark")

    monkeypatch.setattr(runner, "build_session", no_spark)
    monkeypatch.setenv("WEIR_HOME", str(tmp_path / "weir"))
    assert cli.main(["dq", "playback"]) == 2
    err = capsys.readouterr().err
    assert "no silver table at" in err and "run the pipeline first" in err, err


def test_the_default_range_is_the_newest_date_silver_holds_rows_of(tmp_path: Path) -> None:
    """Read from the log's active files: a date whose rows were all deleted is not the newest."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from spark_jobs.quality import runner

    tables = tables_of(WeirHome(tmp_path / "weir"))
    dates = [dt.date(2026, 11, 18), dt.date(2026, 11, 20), dt.date(2026, 11, 19)]
    rows = pa.table({"event_id": ["a", "b", "c"], "event_date": dates})
    write_deltalake(str(tables.silver), rows, partition_by=["event_date"])
    assert runner._date_range(tables, None, None) == (dates[1], dates[1])
    DeltaTable(str(tables.silver)).delete("event_date = '2026-11-20'")
    assert runner._date_range(tables, None, None) == (dates[2], dates[2])
    assert runner._date_range(tables, dates[0], None) == (dates[0], dates[0])
