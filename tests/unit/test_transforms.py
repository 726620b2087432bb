"""The pure transforms, on small hand-made DataFrames: every kind of malformed input, dedupe,
enrichment, late events and the gold measures."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_jobs import catalog, transforms

PLAYBACK = catalog.load("playback")
T0 = dt.datetime(2026, 11, 20, 10, 0)
GOOD = {"event_id": "e1", "session_id": "s1", "user_id": "u1", "content_id": "c001",
        "event_type": "start", "event_time": "2026-11-20T10:00:05Z"}


def bronze(spark, *lines, source="f1", ingest=T0, raw_bytes=None):
    rows = [(line, source, i + 1, None, None, None, None, ingest, ingest.date(), raw_bytes, None)
            for i, line in enumerate(lines)]
    return spark.createDataFrame(rows, transforms.BRONZE_SCHEMA)


def reasons(spark, *lines, pipeline=PLAYBACK, **bronze_args):
    parsed = transforms.parse(bronze(spark, *lines, **bronze_args), pipeline)
    return [r.reason for r in transforms.rejects(parsed).orderBy("position").collect()]


def with_(**changes):
    event = {**GOOD, **changes}
    return json.dumps({k: v for k, v in event.items() if v is not ...})


@pytest.mark.parametrize(("line", "reason"), [
    ('{"event_id": "e1", ', "malformed JSON"),
    ("not json at all", "malformed JSON"),
    ('["an", "array"]', "malformed JSON: not an object"),
    ("{'event_id': 'e1'}", "malformed JSON"),
    (with_() + with_(event_id="e2"), "malformed JSON: more than one JSON value on the line"),
    (with_() + " trailing junk", "malformed JSON: trailing characters after the object"),
    (with_() + ", " + with_(event_id="e2"), "malformed JSON: trailing characters after the object"),
    (with_() + "]}", "malformed JSON: trailing characters after the object"),
    (with_(event_time="2099-01-01T00:00:00Z"),
     "event_time more than 1 hour ahead of ingest time: 2099-01-01T00:00:00Z"),
    (with_(event_time="2026-11-20T11:00:01Z"),
     "event_time more than 1 hour ahead of ingest time: 2026-11-20T11:00:01Z"),
    ("", "empty line"),
    (with_(event_id=...), "missing field event_id"),
    (with_(session_id=""), "missing field session_id"),
    (with_(user_id=None), "missing field user_id"),
    (with_(content_id=...), "missing field content_id"),
    (with_(event_type=...), "missing field event_type"),
    (with_(event_time=...), "missing field event_time"),
    (with_(event_type="rewind"), "unknown event_type: rewind"),
    (with_(event_time="20/11/2026 10:00"), "bad timestamp event_time: 20/11/2026 10:00"),
    (with_(event_time="2026-11-20T10:00:00"), "bad timestamp event_time: 2026-11-20T10:00:00"),
    (with_(event_time="2026-13-45T10:00:00Z"), "bad timestamp event_time: 2026-13-45T10:00:00Z"),
    (with_(bitrate_kbps=100_001), "bitrate_kbps out of range [0..100000]: 100001"),
    (with_(bitrate_kbps=-1), "bitrate_kbps out of range [0..100000]: -1"),
    (with_(bitrate_kbps=12.5), "bitrate_kbps is not an integer: 12.5"),
    (with_(bitrate_kbps="fast"), "bitrate_kbps is not an integer: fast"),
    (with_(bitrate_kbps=True), "bitrate_kbps is not an integer: true"),
    (with_(buffer_ms=-5), "buffer_ms out of range [0..]: -5"),
    (with_(buffer_ms=99999999999999999999999), "buffer_ms out of range [0..]: 99999999999999999999999"),
    (with_(position_s="far"), "position_s is not a number: far"),
    (with_(position_s=-0.5), "position_s out of range [0..]: -0.5"),
])
def test_each_kind_of_bad_input_is_quarantined_with_its_reason(spark, line, reason):
    assert reasons(spark, line) == [reason]


def test_a_contract_changed_in_the_same_process_is_judged_by_its_new_rules(spark):
    """The parse's expressions are built once per contract and reused: an entry reloaded with
    other rules in the same process (a back-fill after a rule change) is judged by its own rules,
    and the first contract still by its own."""
    line = with_(bitrate_kbps=7000, event_time="2026-11-20T10:30:00Z")
    stricter = dataclasses.replace(PLAYBACK, max_event_time_ahead="10 minutes", fields=tuple(
        dataclasses.replace(f, maximum=5000) if f.name == "bitrate_kbps" else f
        for f in PLAYBACK.fields))
    assert reasons(spark, line) == []
    assert reasons(spark, line, pipeline=stricter) == [
        "event_time more than 10 minutes ahead of ingest time: 2026-11-20T10:30:00Z; "
        "bitrate_kbps out of range [0..5000]: 7000"]
    assert reasons(spark, line) == []


def test_a_contract_written_with_lists_is_judged_as_one_written_with_tuples(spark):
    """A catalog entry may list its fields and a field's allowed values in lists."""
    listed = dataclasses.replace(PLAYBACK, fields=[
        dataclasses.replace(f, allowed=list(f.allowed)) if f.allowed else f for f in PLAYBACK.fields])
    assert reasons(spark, with_(event_type="rewind"), with_(event_id="e2"), pipeline=listed) == [
        "unknown event_type: rewind"]


def test_whitespace_around_one_object_and_an_event_within_the_tolerance_are_valid(spark):
    assert reasons(spark, "  " + with_() + " \t", with_(event_time="2026-11-20T11:00:00Z")) == []


def test_bytes_that_are_not_utf8_are_quarantined_and_kept(spark):
    raw = b'{"event_id": "e1", "device": "\xff\xfe"}'
    parsed = transforms.parse(bronze(spark, raw.decode("utf-8", "replace"), raw_bytes=raw), PLAYBACK)
    row = transforms.rejects(parsed).collect()[0]
    assert (row.reason, bytes(row.raw_bytes)) == ("invalid UTF-8", raw)
    assert transforms.valid(parsed).count() == 0


def test_a_batch_job_keeps_the_raw_line_of_a_refused_line_only(spark):
    """A back-fill caches the day's parsed lines: a valid line's text is not what it derives,
    so it is not held (a third of the memory); a refused line's text and bytes are its
    quarantine row, and silver and quarantine come out of the narrowed lines as they do whole."""
    raw = b'{"event_id": "e3", "device": "\xff"}'
    lines = bronze(spark, with_(), with_(event_type="rewind")).unionByName(
        bronze(spark, raw.decode("utf-8", "replace"), source="f2", raw_bytes=raw))
    parsed = transforms.parse(lines, PLAYBACK)
    kept = transforms.without_kept_lines(parsed)
    assert transforms.CARRIED not in kept.columns
    rows = {(r._source, r._position): r for r in kept.collect()}
    assert (rows["f1", 1].value, rows["f1", 1]._raw_bytes) == (None, None)
    assert rows["f1", 2].value == with_(event_type="rewind")
    assert bytes(rows["f2", 1]._raw_bytes) == raw
    assertDataFrameEqual(transforms.rejects(kept), transforms.rejects(parsed))
    assertDataFrameEqual(transforms.valid(kept), transforms.valid(parsed))


def test_every_reason_of_a_record_is_given_at_once(spark):
    line = with_(event_id=..., event_type="rewind", bitrate_kbps="x")
    assert reasons(spark, line) == [
        "missing field event_id; unknown event_type: rewind; bitrate_kbps is not an integer: x"]


def test_oversized_record_is_quarantined(spark):
    line = with_(device="x" * (transforms.MAX_RECORD_CHARS + 1))
    assert reasons(spark, line) == [f"record larger than {transforms.MAX_RECORD_CHARS} characters"]


def test_the_size_bound_counts_characters_not_bytes(spark):
    """The bound's characters are counted only past as many bytes: a line of two-byte characters
    over the bound in bytes and under it in characters is not oversized, one over it in both is."""
    def with_device_of(chars: int) -> str:   # json.dumps would write each as the 6 bytes of \u00e9
        return with_(device="D").replace('"D"', '"' + "é" * chars + '"')

    under = with_device_of(transforms.MAX_RECORD_CHARS // 2 + 1000)
    over = with_device_of(transforms.MAX_RECORD_CHARS + 1)
    assert len(under.encode()) > transforms.MAX_RECORD_CHARS > len(under)
    assert reasons(spark, under) == []
    assert reasons(spark, over) == [f"record larger than {transforms.MAX_RECORD_CHARS} characters"]


def test_valid_event_is_typed_in_utc_and_extra_fields_are_ignored(spark):
    line = with_(event_time="2026-11-20T23:30:00.250+02:00", bitrate_kbps=4500, buffer_ms=0,
                 position_s=12.5, surprise={"nested": 1})
    ingest = T0 + dt.timedelta(days=1)
    parsed = transforms.parse(bronze(spark, line, ingest=ingest), PLAYBACK)
    assert reasons(spark, line, ingest=ingest) == []
    row = transforms.silver(parsed, None, PLAYBACK).collect()[0]
    assert row.event_time == dt.datetime(2026, 11, 20, 21, 30, 0, 250000)
    assert row.event_date == dt.date(2026, 11, 20)
    assert (row.bitrate_kbps, row.buffer_ms, row.position_s) == (4500, 0, 12.5)
    assert "surprise" not in parsed.columns


def test_late_events_are_valid(spark):
    line = with_(event_time="2026-11-10T08:00:00Z")
    parsed = transforms.parse(bronze(spark, line), PLAYBACK)
    assert transforms.silver(parsed, None, PLAYBACK).count() == 1


def test_dedupe_keeps_the_first_ingested_copy_whatever_the_order(spark):
    first = bronze(spark, with_(device="tv"), source="a", ingest=T0)
    later = bronze(spark, with_(device="web"), with_(device="mobile"), source="b",
                   ingest=T0 + dt.timedelta(days=2))
    for frame in (first.unionByName(later), later.unionByName(first)):
        rows = transforms.silver(transforms.parse(frame, PLAYBACK), None, PLAYBACK).collect()
        assert [(r.event_id, r.device, r._source) for r in rows] == [("e1", "tv", "a")]


def test_dedupe_breaks_a_tie_of_ingest_time_by_source_then_position(spark):
    # one batch: every line has the batch's ingest time
    b = bronze(spark, with_(device="web"), with_(device="tv"), source="b")        # positions 1, 2
    a = bronze(spark, with_(device="mobile"), source="a").withColumn("position", F.lit(9).cast("long"))
    for frame in (b.unionByName(a), a.unionByName(b)):
        rows = transforms.silver(transforms.parse(frame, PLAYBACK), None, PLAYBACK).collect()
        assert [(r.device, r._source, r._position) for r in rows] == [("mobile", "a", 9)]
    rows = transforms.silver(transforms.parse(b, PLAYBACK), None, PLAYBACK).collect()
    assert [(r.device, r._position) for r in rows] == [("web", 1)]


def test_dedupe_shuffles_once_into_the_partitions_a_batch_job_asks_for(spark):
    """A back-fill's day or a refresh's bronze is deduplicated in partitions sized by its lines:
    the window keeps that partitioning instead of shuffling again into the session's (4), which
    held a million rows each for a day of 4 M lines and ran a 1 GB driver out of memory."""
    lines = [with_(event_id=f"e{i % 7}", device=f"d{i}") for i in range(20)]
    parsed = transforms.parse(bronze(spark, *lines), PLAYBACK)
    rows = transforms.silver(parsed, None, PLAYBACK, partitions=3)
    assert rows.rdd.getNumPartitions() == 3
    assert sorted(r.device for r in rows.collect()) == sorted(f"d{i}" for i in range(7))


@pytest.mark.parametrize("job", ["stream", "back-fill"])
def test_a_jobs_dedupe_sorts_its_rows_once(spark, job):
    """Under the settings the stream's driver and a back-fill run with, the dedupe's plan sorts the
    rows once, after its shuffle: no partial first-row-per-key before it (Spark's default), which
    sorted every row of a batch a second time for the few keys seen twice. The rows kept are the
    same either way."""
    from spark_jobs.backfill import BATCH_CONF
    from spark_jobs.session import session_conf
    from spark_jobs.stream import driver_conf

    lines = [with_(event_id=f"e{i % 7}", device=f"d{i}") for i in range(20)]
    rows = transforms.silver(transforms.parse(bronze(spark, *lines), PLAYBACK), None, PLAYBACK)
    with session_conf(spark, driver_conf(PLAYBACK) if job == "stream" else BATCH_CONF):
        plan = rows._jdf.queryExecution().executedPlan().toString()
        kept = sorted(r.device for r in rows.collect())
    assert "WindowGroupLimit" not in plan and plan.count("Sort [") == 1, plan
    assert kept == sorted(r.device for r in rows.collect()) == [f"d{i}" for i in range(7)]


def test_a_batch_summary_counts_and_bounds_its_lines_in_one_hash_aggregate(spark):
    """The ingest batch's summary (`stream.BatchSummary`): each source's first and last position,
    the rejects, the valid lines and their first and last event date, from an aggregate Spark
    runs as a hash aggregate (an object hash aggregate, as a set of the dates made it, cost 3 % of a
    backlog's CPU)."""
    from spark_jobs.stream import BatchSummary

    a = bronze(spark, with_(event_time="2026-11-18T23:59:00Z"), "not json", source="a")
    b = bronze(spark, with_(event_id="e2"), with_(event_id="e3", event_time="2026-11-20T00:00:01Z"),
               source="b")
    parsed = transforms.parse(a.unionByName(b), PLAYBACK)
    summary = BatchSummary.of(parsed, PLAYBACK, ())
    assert summary.positions == {"a": (1, 2), "b": (1, 2)}
    assert (summary.rejects, summary.valid) == (1, 3)
    assert summary.dates == (dt.date(2026, 11, 18), dt.date(2026, 11, 20))
    refused = BatchSummary.of(transforms.parse(bronze(spark, "not json", source="c"), PLAYBACK), PLAYBACK, ())
    assert (refused.valid, refused.dates) == (0, None)
    plan = BatchSummary.aggregate(parsed, PLAYBACK, ())._jdf.queryExecution().executedPlan().toString()
    assert "HashAggregate" in plan and "ObjectHashAggregate" not in plan, plan


def test_enrichment_gives_nulls_for_unknown_content(spark):
    dim = spark.createDataFrame([("c001", "Paper Tide", "drama")],
                                "content_id string, title string, genre string")
    lines = [with_(event_id="e1"), with_(event_id="e2", content_id="c999")]
    rows = transforms.silver(transforms.parse(bronze(spark, *lines), PLAYBACK), dim, PLAYBACK)
    got = {r.event_id: (r.title, r.genre) for r in rows.collect()}
    assert got == {"e1": ("Paper Tide", "drama"), "e2": (None, None)}


def test_gold_measures_per_minute_content_and_cdn(spark):
    events = [
        with_(event_id="a", event_type="start", cdn="akamai", bitrate_kbps=1000),
        with_(event_id="b", event_type="buffer_end", cdn="akamai", buffer_ms=700, bitrate_kbps=3000),
        with_(event_id="c", event_type="error", cdn="akamai", session_id="s2"),
        with_(event_id="d", event_type="start", cdn=..., event_time="2026-11-20T10:00:59Z"),
        with_(event_id="e", event_type="heartbeat", cdn="akamai", event_time="2026-11-20T10:01:00Z"),
    ]
    silver = transforms.silver(transforms.parse(bronze(spark, *events), PLAYBACK), None, PLAYBACK)
    gold = transforms.aggregate(silver, PLAYBACK).drop("window_end")
    expected = spark.createDataFrame([
        (T0, "c001", "akamai", 3, 1, 1, 700, 2000.0, 2, T0.date()),
        (T0, "c001", None, 1, 1, 0, 0, None, 1, T0.date()),
        (T0 + dt.timedelta(minutes=1), "c001", "akamai", 1, 0, 0, 0, None, 1, T0.date()),
    ], gold.schema)
    assertDataFrameEqual(gold, expected, checkRowOrder=False)


def test_hashtags_pipeline_counts_over_sliding_windows(spark):
    hashtags = catalog.load("hashtags")
    posts = [json.dumps({"post_id": "p1", "user_id": "u1", "text": "go #Spark #delta",
                         "event_time": "2026-11-20T10:05:30Z"}),
             json.dumps({"post_id": "p2", "user_id": "u2", "text": "#spark rocks",
                         "event_time": "2026-11-20T10:07:00Z"})]
    silver = transforms.silver(transforms.parse(bronze(spark, *posts), hashtags), None, hashtags)
    gold = transforms.aggregate(silver, hashtags)
    spark_windows = gold.where(F.col("hashtag") == "spark")
    # each post falls into 10 sliding windows; both posts share 8 of them (10:-2..10:05 starts)
    assert spark_windows.count() == 12
    assert spark_windows.where("posts = 2").count() == 8
    assert gold.where(F.col("hashtag") == "delta").agg(F.sum("posts")).first()[0] == 10


def test_bronze_rows_of_several_dates_are_repartitioned_a_date_per_partition(spark):
    """`transforms.by_hint`: each date's lines in partitions of their own (so in files of their
    own). Each partition keeps its most frequent date's lines in place; the rest move, each date
    over a share in proportion to its lines that move, lines without a date apart; beyond
    `ByValue.MOST_GROUPS` dates, runs of neighbouring dates share. Nothing to move: no shuffle."""
    first = dt.date(2026, 11, 1)
    second, later = first + dt.timedelta(days=1), first + dt.timedelta(days=30)

    def rows(counts: dict) -> DataFrame:   # in two partitions, the dates in order
        data = [(d, f"s{i % 3}", i) for d, n in counts.items() for i in range(n)]
        return spark.createDataFrame(data, "event_date_hint date, source string, position long").coalesce(2)

    def lines(df: DataFrame) -> dict:   # as the batch's summary counts them
        by = df.groupBy(F.spark_partition_id().alias("p"), "event_date_hint").count().collect()
        return {(r.p, r.event_date_hint): r["count"] for r in by}

    def dates_by_partition(df: DataFrame) -> list[list]:
        by = df.groupBy(F.spark_partition_id().alias("p")).agg(F.collect_set("event_date_hint").alias("d"))
        return [sorted(r.d, key=str) if r.d else [None] for r in by.collect()]

    counts = {first: 50, second: 50, later: 4, None: 3}
    batch = rows(counts)
    assert {d for p, d in lines(batch) if p == 0} == {first, second}, lines(batch)  # a day straddled
    split = transforms.by_hint(batch, lines(batch), 4)
    parts = dates_by_partition(split)
    assert all(len(dates) == 1 for dates in parts), parts
    # `first` stays whole where it is; `second` partly stays, partly moves; 4 of the 10 lines that
    # move are `later`'s: 2 of the 4 partitions (its 4 lines may hash into one)
    assert (parts.count([first]), parts.count([second]), parts.count([None])) == (1, 2, 1), parts
    assert parts.count([later]) in (1, 2) and split.count() == sum(counts.values())

    apart = rows({first: 10, second: 10})    # a date per partition: nothing moves
    unmoved = transforms.by_hint(apart, lines(apart), 4)
    assert "Exchange" not in unmoved._jdf.queryExecution().executedPlan().toString()
    assert sorted(dates_by_partition(unmoved)) == [[first], [second]]

    many = {first + dt.timedelta(days=d): 2 for d in range(250)}
    parts = dates_by_partition(transforms.by_hint(rows(many), lines(rows(many)), 2))
    kept = [p for p in parts if p in ([first], [first + dt.timedelta(days=125)])]
    moved = [p for p in parts if p not in kept]    # 248 dates in runs of 3 (one over a kept date)
    assert len(kept) == 2 and len(moved) == 83, parts
    assert all(len(p) <= 3 and (max(p) - min(p)).days <= 3 for p in moved), parts
