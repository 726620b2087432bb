"""The same `event_id` with a different `event_time` (issue 12, scenario 8): a resent event whose
clock moved it to another day is still the same event. Silver holds one row per key — the first
ingested copy (by ingest time, source, position) — whatever the batching, and a back-fill of
either date, or of both, keeps that very copy."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from spark_jobs import stream
from spark_jobs.backfill import backfill
from spark_jobs.generator import write_lines
from spark_jobs.layers import PipelineTables
from tests.helpers import assert_exactly_once, table
from tests.integration.pipelines import playback

pytestmark = pytest.mark.slow
DAY_1, DAY_2, DAY_3 = "2026-11-17", "2026-11-18", "2026-11-19"


def event(event_id: str, day: str, session: str = "s") -> str:
    return json.dumps({"event_id": event_id, "session_id": session, "user_id": "u",
                       "content_id": "c001", "event_type": "heartbeat",
                       "event_time": f"{day}T12:00:00Z"}, separators=(",", ":"))


def silver_rows(spark, tables: PipelineTables) -> dict[str, tuple[str, str]]:
    rows = table(spark, tables.silver).collect()
    assert len(rows) == len({r.event_id for r in rows}), "one silver row per event_id"
    return {r.event_id: (r.event_date.isoformat(), r.session_id) for r in rows}


@pytest.mark.parametrize("together", [False, True], ids=["later-batch", "same-batch"])
def test_a_key_resent_with_another_date_stays_one_row_through_stream_and_backfill(
        spark, home, together):
    pipeline = playback(files_per_trigger=None)
    tables = PipelineTables.of(home, pipeline)
    landing = home.landing("playback")
    # first file: "moved" on day 2 and "back" on day 3, the originals
    write_lines(landing, "a-first.jsonl", [event("moved", DAY_2, "first"), event("back", DAY_3, "first"),
                                            event("plain-1", DAY_2)])
    if not together:
        stream.run(pipeline, once=True, home=home, spark=spark)
    # second file, a later batch (or the same): both resent with another day ("back" twice), and none of
    # its events falls on day 3, where the first copy of "back" is
    write_lines(landing, "b-second.jsonl", [event("moved", DAY_1, "second"), event("back", DAY_2, "second"),
                                             event("plain-2", DAY_1), event("back", DAY_1, "third")])
    stream.run(pipeline, once=True, home=home, spark=spark)

    first_copies = {"moved": (DAY_2, "first"), "back": (DAY_3, "first"),
                    "plain-1": (DAY_2, "s"), "plain-2": (DAY_1, "s")}
    assert silver_rows(spark, tables) == first_copies
    assert table(spark, tables.bronze).count() == 7

    if together:
        return   # the back-fills below start from the same silver either way
    # a back-fill of any one date, then of all of them, keeps the stream's copy
    for day_from, day_to in [(DAY_1, DAY_1), (DAY_2, DAY_2), (DAY_3, DAY_3), (DAY_1, DAY_3)]:
        backfill(spark, pipeline, _date(day_from), _date(day_to), home=home)
        assert silver_rows(spark, tables) == first_copies, (day_from, day_to)
    assert_exactly_once(table(spark, tables.silver), ("event_id",), set(first_copies), "silver")
    gold_events = sum(r.events for r in table(spark, tables.gold).collect())
    assert gold_events == len(first_copies), "gold counts each event once, on its silver date"


def _date(day: str) -> dt.date:
    return dt.date.fromisoformat(day)
