"""`gold.playback_sessions`: keyed state with event-time timeouts, kept by the stream and
recomputed by the back-fill with the same state function."""

from __future__ import annotations

import datetime as dt
import json
import signal

import pytest
from pyspark.sql import functions as F

from spark_jobs import backfill, sessions, stream, topology
from spark_jobs.generator import generate, write_lines
from spark_jobs.layers import PipelineTables, ensure_tables
from tests.helpers import table
from tests.integration.batches import differs, ingest
from tests.integration.pipelines import playback, write_catalog
from tests.integration.test_exactly_once import batch_files, exited, start_driver
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow
DAY = dt.date(2026, 11, 20)
INGESTED = dt.datetime(2026, 11, 20, 12, 0)


def event(session: str, n: int, kind: str, at: str, **extra: object) -> str:
    return json.dumps({"event_id": f"{session}-{n}", "session_id": session, "user_id": "u1",
                       "content_id": "c001", "cdn": "a", "event_type": kind,
                       "event_time": f"2026-11-20T{at}Z", **extra})


def rows_by_session(spark, path) -> dict[str, dict]:
    return {r["session_id"]: r.asDict() for r in table(spark, path).collect()}


def run_sessions(spark, pipeline, home, tables, landing, name: str, lines: list[str], batch: int) -> None:
    """One ingest micro-batch of `lines` (silver), then the sessions query over what is new."""
    ingest(spark, pipeline, tables, [write_lines(landing, name, lines)], INGESTED, batch)
    query = stream.start_query(spark, pipeline, home, tables, "sessions", once=True)
    query.awaitTermination()
    assert query.exception() is None


def test_sessions_span_batches_time_out_take_late_events_and_equal_the_backfill(spark, home):
    pipeline = playback(files_per_trigger=1)
    landing = home.landing("playback")
    tables = ensure_tables(spark, home, pipeline)
    assert tables.sessions is not None
    # batch 1: three sessions begin
    run_sessions(spark, pipeline, home, tables, landing, "1.jsonl", [
        event("a", 1, "start", "10:00:00", position_s=0),
        event("a", 2, "heartbeat", "10:00:02", bitrate_kbps=3000, position_s=2),
        event("a", 3, "buffer_end", "10:00:10", buffer_ms=500, bitrate_kbps=3000, position_s=10),
        event("b", 1, "start", "10:00:00"),
        event("c", 1, "start", "10:05:00", position_s=0),
        event("c", 2, "heartbeat", "10:05:03", bitrate_kbps=1500, position_s=3),
    ], 0)
    first = rows_by_session(spark, tables.sessions)
    assert {k: v["state"] for k, v in first.items()} == {"a": "active", "b": "active", "c": "active"}
    # batch 2: `a` ends in a later micro-batch; `d` moves the watermark to 10:35, past b's gap
    run_sessions(spark, pipeline, home, tables, landing, "2.jsonl", [
        event("a", 4, "heartbeat", "10:01:00", bitrate_kbps=6000, position_s=60),
        event("a", 5, "end", "10:02:00", position_s=60),
        event("d", 1, "start", "10:45:00"),
    ], 1)
    # batch 3: an event of `c` older than the newest (10:45) but within the watermark (10:35)
    run_sessions(spark, pipeline, home, tables, landing, "3.jsonl", [
        event("c", 3, "heartbeat", "10:40:00", bitrate_kbps=4500, position_s=120)], 2)

    got = rows_by_session(spark, tables.sessions)
    sessions_table = table(spark, tables.sessions)
    assert sessions_table.count() == sessions_table.select("session_id").distinct().count() == 4
    a, b, c, d = (got[k] for k in "abcd")
    assert (a["state"], a["events"], a["time_to_first_frame_ms"], a["rebuffer_ms"]) == ("ended", 5, 2000, 500)
    assert a["avg_bitrate_kbps"] == 4000.0 and a["watch_time_s"] == 60.0
    assert a["rebuffer_ratio"] == pytest.approx(500 / (500 + 60_000))
    assert not a["exit_before_video_start"]
    assert (b["state"], b["exit_before_video_start"]) == ("timed_out", True), b   # a 30-minute gap
    assert (c["state"], c["events"], c["last_event_time"]) == ("active", 3, dt.datetime(2026, 11, 20, 10, 40))
    assert c["avg_bitrate_kbps"] == 3000.0, "the late event within the watermark updated the session"
    assert d["state"] == "active"

    # stream = back-fill: the same state function over silver, in batch
    before = table(spark, tables.sessions).localCheckpoint()
    backfill.backfill(spark, pipeline, DAY, DAY, home)
    assert differs(table(spark, tables.sessions), before) == ""
    horizon = sessions.watermark_horizon(table(spark, tables.silver), pipeline)
    recomputed = sessions.batch_rows(table(spark, tables.silver), pipeline, horizon)
    assert differs(recomputed.select(*before.columns), before) == ""


def test_kill_9_of_the_driver_then_restart_keeps_one_row_per_session(spark, home, tmp_path):
    pipeline = playback(files_per_trigger=2)
    conf = write_catalog(tmp_path / "conf", files_per_trigger=2)
    written = generate(home.landing("playback"), files=6, sessions_per_file=6, seed=16)
    expected = {i.rsplit("-", 1)[0] for i in written.event_ids}
    driver = start_driver(home, conf)
    try:
        # kill once the sessions query has planned a batch
        wait_for("a sessions batch to be planned",
                 lambda: batch_files(home, pipeline, "offsets") and any(
                     (topology.checkpoint_location(home, pipeline, "sessions") / "offsets").glob("[0-9]*")),
                 600, poll_s=0.1, abort=exited(driver))
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
    assert driver.returncode == -signal.SIGKILL
    stream.run(pipeline, once=True, home=home, spark=spark)
    tables = PipelineTables.of(home, pipeline)
    got = table(spark, tables.sessions)
    keys = {r[0] for r in got.select("session_id").collect()}
    assert got.count() == len(keys) == len(expected) and keys == expected, \
        (got.count(), len(keys), len(expected), sorted(keys ^ expected)[:5])
    silver = table(spark, tables.silver)
    recomputed = sessions.batch_rows(silver, pipeline, sessions.watermark_horizon(silver, pipeline))
    ended = F.col("state") == "ended"
    assert differs(got.where(ended), recomputed.select(*got.columns).where(ended)) == ""
