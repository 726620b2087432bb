"""Stream and back-fill share the transforms and agree; a back-fill is idempotent, repairs what
differs, and may run while the stream runs without losing or doubling anything."""

from __future__ import annotations

import datetime as dt
import json
import threading

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from spark_jobs import stream, transforms
from spark_jobs.backfill import backfill
from spark_jobs.generator import generate, write_lines
from spark_jobs.layers import PipelineTables
from tests.helpers import assert_exactly_once, table
from tests.integration.pipelines import playback

pytestmark = pytest.mark.slow
DAY = dt.date(2026, 11, 19)


def version(spark, path) -> int:
    return DeltaTable.forPath(spark, str(path)).history(1).first()["version"]


def same_rows(a, b) -> bool:
    return a.exceptAll(b).isEmpty() and b.exceptAll(a).isEmpty()


def test_stream_and_backfill_agree_and_backfill_is_idempotent(spark, home, monkeypatch):
    pipeline = playback(files_per_trigger=2)
    tables = PipelineTables.of(home, pipeline)
    generate(home.landing("playback"), files=6, sessions_per_file=6, seed=21)
    stream.run(pipeline, once=True, home=home, spark=spark)
    silver_before = table(spark, tables.silver).persist()
    gold_before = table(spark, tables.gold).persist()
    versions = (version(spark, tables.silver), version(spark, tables.gold))

    result = backfill(spark, pipeline, DAY, DAY, home=home)
    assert (result.silver_replaced, result.gold_replaced) == (False, False), \
        "gold from the stream must equal gold from a back-fill of the same input"
    assert (version(spark, tables.silver), version(spark, tables.gold)) == versions

    # damage one day of silver and gold; the back-fill puts back exactly what was there
    DeltaTable.forPath(spark, str(tables.gold)).delete("content_id = 'c001' OR events > 3")
    DeltaTable.forPath(spark, str(tables.silver)).delete("event_type = 'heartbeat'")
    table(spark, tables.silver).where("event_type = 'start'").write.format("delta").mode(
        "append").save(str(tables.silver))         # doubled rows: the same key twice
    aggregated = []
    real = transforms.aggregate
    monkeypatch.setattr(transforms, "aggregate", lambda *args: aggregated.append(args) or real(*args))
    result = backfill(spark, pipeline, DAY, DAY, home=home)
    monkeypatch.undo()
    assert (result.silver_replaced, result.gold_replaced) == (True, True)
    # no other writer committed meanwhile: gold's first round, which wrote, is its last
    assert len(aggregated) == 1
    assert same_rows(table(spark, tables.silver), silver_before)
    assert same_rows(table(spark, tables.gold), gold_before)

    versions = (version(spark, tables.silver), version(spark, tables.gold))
    result = backfill(spark, pipeline, DAY, DAY, home=home)
    assert (result.silver_replaced, result.gold_replaced) == (False, False)
    assert (version(spark, tables.silver), version(spark, tables.gold)) == versions


def test_backfill_beside_the_running_stream_loses_and_doubles_nothing(spark, home):
    pipeline = playback(files_per_trigger=1)
    tables = PipelineTables.of(home, pipeline)
    written = generate(home.landing("playback"), files=2, sessions_per_file=6, seed=31)
    stream.run(pipeline, once=True, home=home, spark=spark)
    stop = threading.Event()
    failures: list[BaseException] = []

    def drive() -> None:
        try:
            stream.run(pipeline, home=home, spark=spark, stop=stop)
        except BaseException as err:
            failures.append(err)

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    try:
        for wave in range(3):
            written.add(generate(home.landing("playback"), files=1, sessions_per_file=6,
                                 seed=32 + wave, start=dt.datetime(2026, 11, 19, 21, wave * 5,
                                                                   tzinfo=dt.UTC)))
            backfill(spark, pipeline, DAY, DAY, home=home)
    finally:
        stop.set()
        driver.join(300)
    assert not failures, "\n".join(str(f) for f in failures)
    stream.run(pipeline, once=True, home=home, spark=spark)
    assert_exactly_once(table(spark, tables.silver), ("event_id",), written.event_ids, "silver")
    gold = table(spark, tables.gold)
    assert same_rows(gold, transforms.aggregate(table(spark, tables.silver), pipeline))


def test_late_events_and_duplicates_far_apart(spark, home):
    pipeline = playback(files_per_trigger=1)
    tables = PipelineTables.of(home, pipeline)
    landing = home.landing("playback")
    written = generate(landing, files=2, sessions_per_file=4, seed=41)
    stream.run(pipeline, once=True, home=home, spark=spark)
    first_line = written.files[0].read_text().splitlines()[0]
    late = {"event_id": "late-1", "session_id": "s-late", "user_id": "u1", "content_id": "c001",
            "event_type": "start", "event_time": "2026-11-16T08:00:00Z", "cdn": "akamai"}
    write_lines(landing, "later.jsonl", [first_line, json.dumps(late), first_line])
    stream.run(pipeline, once=True, home=home, spark=spark)

    silver = table(spark, tables.silver)
    assert_exactly_once(silver, ("event_id",), written.event_ids | {"late-1"}, "silver")
    assert silver.where("event_id = 'late-1'").first().event_date == dt.date(2026, 11, 16)
    backfill(spark, pipeline, dt.date(2026, 11, 16), dt.date(2026, 11, 16), home=home)
    late_window = table(spark, tables.gold).where(F.col("event_date") == dt.date(2026, 11, 16)).collect()
    assert [(r.content_id, r.cdn, r.events, r.plays) for r in late_window] == [("c001", "akamai", 1, 1)]
