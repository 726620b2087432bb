"""Gold and the session table after a reset or a fresh query over an existing silver (issue 12,
scenario 6; issue 16): the query would re-read silver in file order, a bounded batch at a time,
and drop as late what its first batch's watermark excludes. The table is rebuilt from silver in
batch first, and the query starts after the silver version it was rebuilt from."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from spark_jobs import backfill, queries, sessions, stream, transforms
from spark_jobs.generator import generate, write_lines
from spark_jobs.layers import ensure_tables
from spark_jobs.queries import FROM_SILVER, REBUILT_FROM, REBUILT_THROUGH, rebuild_marker
from spark_jobs.tables import delta_version
from spark_jobs.topology import checkpoint_location
from tests.helpers import table
from tests.integration.batches import differs, ingest
from tests.integration.pipelines import playback

pytestmark = pytest.mark.slow


def silver_read_in(spark, tables, batches: int):
    """`playback` with silver's batch bound at a `batches`-th of silver's bytes: a query re-reading
    silver as a stream takes `batches` batches or more."""
    size = DeltaTable.forPath(spark, str(tables.silver)).detail().first()["sizeInBytes"]
    return dataclasses.replace(playback(), silver_max_bytes_per_trigger=size // batches)


def silver_of_many_small_commits(spark, tables, files: int, commits: int = 3) -> None:
    """Silver rewritten as `commits` commits of `files` files in all, events of far-apart minutes
    mixed in each file (a stream re-reading it takes the files in order)."""
    rows = table(spark, tables.silver).localCheckpoint()
    for part in range(commits):
        share = rows.where(F.abs(F.hash("event_id")) % commits == part)
        (share.repartition(files // commits).write.format("delta")
         .mode("overwrite" if part == 0 else "append").save(str(tables.silver)))


def sessions_differ(spark, pipeline, tables) -> str:
    """'' when the session table holds what the state function makes of all of silver."""
    silver, got = table(spark, tables.silver), table(spark, tables.sessions)
    want = sessions.batch_rows(silver, pipeline, sessions.watermark_horizon(silver, pipeline))
    return differs(got, want.select(*got.columns))


def continuations(spark, tables, count: int) -> list[str]:
    """Later events of `count` sessions of the evening the table holds (not ended, if it has
    enough): a heartbeat a minute after each one's last event, and an end for the first of them."""
    held = (table(spark, tables.sessions).where("first_event_time >= '2026-11-19 20:00'")
            .orderBy(F.col("state") == "ended", "session_id").limit(count).collect())
    assert len(held) == count, held
    lines = []
    for n, row in enumerate(held):
        kinds = [("heartbeat", 60), *([("end", 120)] if n == 0 else [])]
        for kind, after_s in kinds:
            at = row["last_event_time"] + dt.timedelta(seconds=after_s)
            lines.append(json.dumps({
                "event_id": f"{row['session_id']}-more-{kind}", "session_id": row["session_id"],
                "user_id": row["user_id"], "content_id": row["content_id"], "cdn": "a",
                "event_type": kind, "event_time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "bitrate_kbps": 2500, "position_s": 900.0}))
    return lines


def test_fresh_gold_and_sessions_queries_over_a_silver_of_many_files_equal_their_batch_derivation(
        spark, home, tmp_path):
    tables = ensure_tables(spark, home, playback())
    morning = generate(tmp_path / "a", files=2, sessions_per_file=40, seed=81,
                       start=dt.datetime(2026, 11, 19, 3, 0, tzinfo=dt.UTC))
    evening = generate(tmp_path / "b", files=2, sessions_per_file=40, seed=82,
                       start=dt.datetime(2026, 11, 19, 20, 0, tzinfo=dt.UTC))
    ingest(spark, playback(), tables, morning.files + evening.files,
           dt.datetime(2026, 11, 19, 21, 0, tzinfo=dt.UTC), 0)
    silver_of_many_small_commits(spark, tables, files=48)
    pipeline = silver_read_in(spark, tables, batches=4)

    shutil.rmtree(checkpoint_location(home, pipeline, "gold"), ignore_errors=True)   # a reset
    stream.run(pipeline, once=True, home=home, spark=spark)
    silver = table(spark, tables.silver)
    assert not (d := differs(table(spark, tables.gold), transforms.aggregate(silver, pipeline))), f"gold: {d}"
    # gold was rebuilt in batch from silver's latest version, and not re-streamed from silver
    last = DeltaTable.forPath(spark, str(tables.gold)).history(1).first()
    # silver's newest commit is the empty one the rebuild made so that V+1 exists (the queries
    # start there, never at `latest`); the rebuild read the version before it
    newest, rebuilt_at = DeltaTable.forPath(spark, str(tables.silver)).history(2).collect()
    assert newest["operationMetrics"]["numOutputRows"] == "0", newest
    silver_version = rebuilt_at["version"]
    assert json.loads(last["userMetadata"] or "{}").get(REBUILT_FROM) == silver_version, last
    # the session table too (its query had no checkpoint yet): every session whole
    assert not (d := sessions_differ(spark, pipeline, tables)), f"sessions: {d}"
    last = DeltaTable.forPath(spark, str(tables.sessions)).history(1).first()
    assert json.loads(last["userMetadata"] or "{}").get(REBUILT_FROM) == silver_version, last

    # and the gold query goes on from there: a later file's windows are added, nothing doubled;
    # events that fall in windows the rebuild already holds are added to them, not written over
    # them (the query's state starts empty: it never saw the events gold was rebuilt from)
    generate(home.landing("playback"), files=1, sessions_per_file=3, seed=83,
             start=dt.datetime(2026, 11, 19, 22, 0, tzinfo=dt.UTC))
    generate(home.landing("playback"), files=1, sessions_per_file=6, seed=84,
             start=dt.datetime(2026, 11, 19, 20, 0, tzinfo=dt.UTC))
    # sessions the rebuild holds go on: the query's keyed state never saw their first events
    write_lines(home.landing("playback"), "more.jsonl", continuations(spark, tables, 3))
    stream.run(pipeline, once=True, home=home, spark=spark)
    silver = table(spark, tables.silver)
    assert not (d := differs(table(spark, tables.gold), transforms.aggregate(silver, pipeline))), f"gold: {d}"
    assert not (d := sessions_differ(spark, pipeline, tables)), f"sessions: {d}"


def test_a_query_behind_silver_catches_up_in_batches_of_the_pipelines_bound(spark, home, tmp_path):
    """Delta's stream source takes 1,000 files a batch by default, whatever their size: a gold or
    sessions query behind a silver of large files would read all of it in one batch. The
    pipeline's `silver_max_bytes_per_trigger` bounds it by bytes."""
    tables = ensure_tables(spark, home, playback())
    lines = generate(tmp_path / "a", files=2, sessions_per_file=30, seed=86)
    ingest(spark, playback(), tables, lines.files, dt.datetime(2026, 11, 19, 21, 0, tzinfo=dt.UTC), 0)
    silver_of_many_small_commits(spark, tables, files=12)
    pipeline = silver_read_in(spark, tables, batches=3)
    query = (queries.gold(spark, pipeline, tables).writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    read = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(read) >= 3 and sum(read) == table(spark, tables.silver).count(), read


def test_a_first_start_over_an_empty_silver_rebuilds_nothing_and_an_emptied_silver_empties_the_tables(
        spark, home, tmp_path):
    """A pipeline's first start: gold and the session table are what an empty silver derives to
    already, and rebuilding them cost a cold driver about 8 s. Once they hold rows, an empty
    silver still rebuilds them (to empty)."""
    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    silver_before = delta_version(tables.silver)
    assert backfill.rebuild_from_silver(spark, pipeline, home, tables) == {}
    assert delta_version(tables.silver) == silver_before      # no version made for a query start
    for query in FROM_SILVER:
        assert rebuild_marker(tables, query) is None, query

    lines = generate(tmp_path / "a", files=1, sessions_per_file=5, seed=85)
    ingest(spark, pipeline, tables, lines.files, dt.datetime(2026, 11, 19, 21, 0, tzinfo=dt.UTC), 0)
    rebuilt = backfill.rebuild_from_silver(spark, pipeline, home, tables)
    assert set(rebuilt) == set(FROM_SILVER), rebuilt
    assert table(spark, tables.gold).count() > 0 and table(spark, tables.sessions).count() > 0

    empty = table(spark, tables.silver).limit(0)
    empty.write.format("delta").mode("overwrite").save(str(tables.silver))
    rebuilt = backfill.rebuild_from_silver(spark, pipeline, home, tables)
    assert set(rebuilt) == set(FROM_SILVER), rebuilt
    assert table(spark, tables.gold).count() == 0 and table(spark, tables.sessions).count() == 0
    for query in FROM_SILVER:
        assert rebuild_marker(tables, query)[REBUILT_THROUGH] is None, query
