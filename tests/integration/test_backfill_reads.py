"""A back-fill reads only the bronze its dates need (issue 11, requirement 4): bronze rows carry
`event_date_hint`, and Delta's per-file statistics on it skip the files of other dates, whatever
day the lines were ingested."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

import spark_jobs.backfill
from bench.compaction import scanned
from spark_jobs import transforms
from spark_jobs.backfill import backfill, bronze_lines, latest_version
from spark_jobs.control import eventlog
from spark_jobs.layers import PipelineTables, ensure_tables
from spark_jobs.tables import insert_absent
from tests.helpers import assert_exactly_once, table
from tests.integration.batches import ingest
from tests.integration.pipelines import playback

pytestmark = pytest.mark.slow
FIRST = dt.date(2026, 11, 1)
DAYS = 10
PER_DAY = 20
LATE_DAY = FIRST + dt.timedelta(days=4)   # its events also arrive, late, with the next ingest day


def event(event_id: str, day: dt.date) -> str:
    return json.dumps({"event_id": event_id, "session_id": "s", "user_id": "u", "content_id": "c001",
                       "event_type": "heartbeat", "event_time": f"{day.isoformat()}T12:00:00Z"})


def bronze_of_days(spark: SparkSession) -> tuple[DataFrame, set[str]]:
    """`DAYS` ingest days of lines of their own day; the day after `LATE_DAY` also brings late
    events of `LATE_DAY`, and every day a malformed line (no event time: filed by ingest day)."""
    rows, late_day_ids = [], set()
    for d in range(DAYS):
        day = FIRST + dt.timedelta(days=d)
        ingest = dt.datetime.combine(day, dt.time(23, 0), tzinfo=dt.UTC)
        lines = [event(f"e{d}-{i}", day) for i in range(PER_DAY)] + ['{"event_id": "broken", ']
        if day == LATE_DAY + dt.timedelta(days=1):
            lines += [event(f"late-{i}", LATE_DAY) for i in range(3)]
            late_day_ids |= {f"late-{i}" for i in range(3)}
        if day == LATE_DAY:
            late_day_ids |= {f"e{d}-{i}" for i in range(PER_DAY)}
        rows += [(line, f"file:///landing/day{d}.jsonl", i + 1, None, None, None, None, ingest, day, None,
                  None) for i, line in enumerate(lines)]
    bronze = spark.createDataFrame(rows, transforms.BRONZE_SCHEMA)
    return transforms.bronze_rows(transforms.parse(bronze, playback()), playback()), late_day_ids


def test_backfill_of_one_date_reads_only_the_bronze_files_of_that_date(spark, home, monkeypatch):
    """It also parses them in partitions of bounded lines, however few files hold them."""
    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    bronze, late_day_ids = bronze_of_days(spark)
    # one file per ingest day, as a day of stream batches compacted would be
    insert_absent(bronze.repartition(1, "ingest_date"), tables.bronze, transforms.BRONZE_KEY)
    version = latest_version(tables.bronze)
    all_files, all_rows = scanned(table(spark, tables.bronze))
    assert all_files == DAYS and all_rows == DAYS * (PER_DAY + 1) + 3

    files, rows = scanned(bronze_lines(spark, tables.bronze, version, LATE_DAY, LATE_DAY))
    # LATE_DAY's own ingest file, and the next day's, which holds its late events
    assert (files, rows) == (2, 2 * (PER_DAY + 1) + 3), (files, rows, all_files, all_rows)

    spread: list[DataFrame] = []

    def in_partitions_of(rows: DataFrame, most: int) -> tuple[DataFrame, int]:
        spread.append(bounded_by(rows, most))
        return spread[-1]

    bounded_by = spark_jobs.backfill.in_partitions_of
    monkeypatch.setattr(spark_jobs.backfill, "PARTITION_LINES", 10)
    monkeypatch.setattr(spark_jobs.backfill, "in_partitions_of", in_partitions_of)
    result = backfill(spark, pipeline, LATE_DAY, LATE_DAY, home=home)
    assert result.silver_replaced and result.quarantine_replaced
    assert_exactly_once(table(spark, tables.silver), ("event_id",), late_day_ids, "silver")
    # the day's 20 events, its 3 late ones and its malformed line (no hint) of the two files'
    # 45 rows, parsed in partitions of at most 10 lines (Spark reads both files as one)
    lines, partitions = spread[0]
    per_partition = [r[1] for r in lines.groupBy(F.spark_partition_id()).count().collect()]
    assert result.lines_read == sum(per_partition) == PER_DAY + 3 + 1, per_partition
    assert len(per_partition) == partitions == 3 and max(per_partition) <= 10, per_partition
    # the malformed line of LATE_DAY's ingest day is re-derived with it; other days' are not
    quarantine = table(spark, tables.quarantine)
    assert [r.ingest_date for r in quarantine.collect()] == [LATE_DAY]
    # recorded once, at the library entry point every caller (CLI, DAG, runbooks) goes through
    logged = [(e["outcome"], e["details"]["from"], e["details"]["to"])
              for e in eventlog.read(home, "playback") if e["action"] == "backfill"]
    assert logged == [("ok", LATE_DAY.isoformat(), LATE_DAY.isoformat())]


def test_a_batch_spanning_several_days_writes_each_days_bronze_in_files_of_its_own(spark, home,
                                                                                   tmp_path):
    """A backlog of several days ingested in one micro-batch, each landing file holding lines of
    every day interleaved, one day's few: a back-fill of one day reads that day's bronze lines
    and no other, where the batch's files each spanned every day."""
    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    days = [FIRST + dt.timedelta(days=d) for d in range(3)]
    per_file = {days[0]: 12, days[1]: 2, days[2]: 30}
    files, lines_of = [], {d: 0 for d in days}
    for f in range(2):
        lines = [event(f"e{f}-{d}-{i}", d) for d, n in per_file.items() for i in range(n)]
        lines = lines[::2] + lines[1::2] + ['{"event_id": "broken", ']   # days interleaved
        files.append(tmp_path / f"backlog-{f}.jsonl")
        files[-1].write_text("\n".join(lines) + "\n")
        for d, n in per_file.items():
            lines_of[d] += n
    ingest_time = dt.datetime.combine(days[-1], dt.time(23, 0), tzinfo=dt.UTC)
    lines_of[days[-1]] += 2   # the malformed lines, filed under their ingest date
    ingest(spark, pipeline, tables, files, ingest_time, batch_id=0)

    everything = table(spark, tables.bronze)
    assert_exactly_once(everything, transforms.BRONZE_KEY,
                        {(f"file://{f}", i + 1) for f in files for i in range(sum(per_file.values()) + 1)},
                        "bronze")
    version = latest_version(tables.bronze)
    all_files, _ = scanned(everything)
    for day in days:
        read, rows = scanned(bronze_lines(spark, tables.bronze, version, day, day))
        assert rows == lines_of[day] and read < all_files, (day, read, rows, all_files, lines_of)
    result = backfill(spark, pipeline, days[1], days[1], home=home)
    assert result.lines_read == lines_of[days[1]], result


def test_event_date_hint_is_the_event_date_silver_gets(spark):
    """The hint and silver's `event_date` come from one parse: a back-fill finds every line of a
    date. Lines without a usable event time are filed under their ingest date."""
    pipeline = playback()
    ingest = dt.datetime(2026, 11, 20, 1, 0, tzinfo=dt.UTC)
    lines = [event("a", dt.date(2026, 11, 19)),
             event("b", dt.date(2026, 11, 19)).replace("T12:00:00Z", "T23:59:59.999+00:00"),
             event("c", dt.date(2026, 11, 19)).replace("T12:00:00Z", "T23:30:00-02:00"),
             event("d", dt.date(2026, 11, 19)).replace("2026-11-19T12:00:00Z", "19/11/2026"),
             '{"event_id": "broken", ', "[1, 2]", ""]
    bronze = transforms.bronze_rows(transforms.parse(spark.createDataFrame(
        [(line, "f", i, None, None, None, None, ingest, ingest.date(), None, None)
         for i, line in enumerate(lines)],
        transforms.BRONZE_SCHEMA), pipeline), pipeline)
    parsed = transforms.parse(bronze, pipeline).withColumn("event_date", transforms.event_date(pipeline))
    got = {r._position: (r.event_date, r.hint) for r in parsed.join(
        bronze.select(F.col("position").alias("_position"), F.col(transforms.EVENT_DATE_HINT).alias("hint")),
        "_position").collect()}
    assert got == {0: (dt.date(2026, 11, 19),) * 2, 1: (dt.date(2026, 11, 19),) * 2,
                   2: (dt.date(2026, 11, 20),) * 2, 3: (None, ingest.date()),
                   4: (None, ingest.date()), 5: (None, ingest.date()), 6: (None, ingest.date())}


def test_a_batch_dedupe_reads_only_the_bronze_files_its_lines_could_already_be_in(spark, home):
    """The stream's dedupe of a batch against bronze (a replay must not append its lines twice)
    reads the files that may hold the batch's (source, position) keys, not all of bronze: landing
    files whose URIs are longer than Delta's default 32-character statistics prefix, and one Kafka
    partition whose offsets grow batch after batch (issue 11: a batch's cost must not grow with
    history). A replayed batch still finds every line it already wrote."""
    from spark_jobs.stream import BatchSummary
    from spark_jobs.tables import key_ranges

    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    ingest = dt.datetime(2026, 11, 20, 1, 0, tzinfo=dt.UTC)
    landing = f"file://{home.landing(pipeline.name)}"
    kafka = "kafka://playback/0@3f9c2a1e-5b7d-4c8e-9a0f-1d2e3b4c5a6f"

    def batch(source: str, first: int, lines: int) -> DataFrame:
        rows = [(event(f"{source}-{first + i}", FIRST), source, first + i, None, None, None, None,
                 ingest, ingest.date(), None, None) for i in range(lines)]
        return transforms.parse(spark.createDataFrame(rows, transforms.BRONZE_SCHEMA), pipeline)

    batches = [batch(f"{landing}/2026-11-20T01-{n:02d}.jsonl#a1b2c3d4e5f6", 0, 5) for n in range(4)]
    batches += [batch(kafka, 100 * n, 100) for n in range(4)]
    for parsed in batches:      # one bronze file per micro-batch
        insert_absent(transforms.bronze_rows(parsed, pipeline).coalesce(1), tables.bronze,
                      transforms.BRONZE_KEY)
    assert scanned(table(spark, tables.bronze))[0] == len(batches)

    for replayed in (batches[2], batches[6]):
        summary = BatchSummary.of(replayed, pipeline, ())
        prune = key_ranges("source", "position", summary.positions)
        existing = table(spark, tables.bronze).alias("t").where(F.expr(prune))
        assert scanned(existing) == (1, replayed.count()), prune
        # the stream's bronze write reads the keys of that one file, and finds every line there
        inserted = insert_absent(transforms.bronze_rows(replayed, pipeline), tables.bronze,
                                 transforms.BRONZE_KEY, prune=prune)
        assert (inserted.rows, inserted.files_read) == (0, 1), inserted
    written = {tuple(r) for b in batches for r in b.select("_source", "_position").collect()}
    assert_exactly_once(table(spark, tables.bronze), transforms.BRONZE_KEY, written, "bronze")


def test_the_dates_a_table_holds_a_batchs_keys_under_are_found_without_shuffling_it(spark, home):
    """Where a table already holds a batch's keys (the session table: a session moved by a late
    event keeps its first date) is looked up each batch. The batch's keys are broadcast and the
    table's key column is scanned in place, even with broadcasts by estimate off: a shuffled join
    moved every key of the table in every batch, a cost growing with the table."""
    from spark_jobs.tables import holding, partitions_holding

    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    silver = spark.createDataFrame(
        [(f"e{d}-{i}", FIRST + dt.timedelta(days=d)) for d in range(DAYS) for i in range(PER_DAY)],
        "event_id string, event_date date")
    silver.write.format("delta").partitionBy("event_date").save(str(home.root / "keys"))
    batch = spark.createDataFrame([("e3-0",), ("e7-5",), ("new-1",)], "event_id string")
    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        plan = holding(batch, home.root / "keys", ("event_id",), "event_date")
        assert sorted(r[0] for r in plan.collect()) == [FIRST + dt.timedelta(days=3),
                                                         FIRST + dt.timedelta(days=7)]
        executed = plan._jdf.queryExecution().executedPlan().toString()
        assert "BroadcastHashJoin" in executed and "SortMergeJoin" not in executed, executed
        assert partitions_holding(batch, tables.silver, ("event_id",), "event_date") == []
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)


def test_with_key_hashes_only_the_files_holding_a_batchs_keys_are_read(spark, home):
    """The session table's lookup each batch: with the key's hash, the files whose hashes (computed
    from the key, the table has no hash column) miss the batch's are not read at all, so the cost
    does not grow with the table's dates. A file written after the first lookup is read too."""
    from spark_jobs.tables import holding

    path = home.root / "sessions"
    day = [FIRST + dt.timedelta(days=d) for d in range(DAYS)]
    for d in range(DAYS):   # one file per date
        (spark.createDataFrame([(f"s{d}-{i}", day[d]) for i in range(PER_DAY)],
                               "session_id string, event_date date")
         .coalesce(1).write.format("delta").mode("append").partitionBy("event_date").save(str(path)))
    batch = spark.createDataFrame([("s3-0",), ("s7-5",), ("new-1",)], "session_id string")
    key_hash = transforms.key_hash_expression(("session_id",))

    def lookup() -> tuple[list[dt.date], set[str]]:
        plan = holding(batch, path, ("session_id",), "event_date", key_hash=key_hash)
        folders = {f.rsplit("/", 2)[-2] for f in plan.inputFiles()}
        return sorted(r[0] for r in plan.collect()), folders

    assert lookup() == ([day[3], day[7]], {f"event_date={day[3]}", f"event_date={day[7]}"})
    # a late event moved s3-0's session: its new row stands under another date, in a new file
    (spark.createDataFrame([("s3-0", day[9])], "session_id string, event_date date")
     .write.format("delta").mode("append").partitionBy("event_date").save(str(path)))
    dates, folders = lookup()
    assert dates == [day[3], day[7], day[9]]
    assert folders == {f"event_date={day[3]}", f"event_date={day[7]}", f"event_date={day[9]}"}
    # without the hash every file is read, as before
    plain = holding(batch, path, ("session_id",), "event_date")
    assert len({f.rsplit("/", 2)[-2] for f in plain.inputFiles()}) == DAYS


def test_a_backfill_looks_at_silvers_history_by_key_hash_without_shuffling_it(spark, home):
    """A back-fill keeps an event silver holds under a date outside its range (resent with another
    event time) out of the range. Every date may hold one, so all of silver's history is looked
    at: by key hash, against the range's hashes broadcast where silver is read, even with
    broadcasts by estimate off. Joined on the key, every key of the history was shuffled: a day's
    back-fill's silver step took 16-20 s longer among 30 days than among one (issue 11: one day
    out of 30 must cost about one day's work)."""
    from spark_jobs.backfill import _first_copies, date_range
    from spark_jobs.session import session_conf

    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    bronze, _ = bronze_of_days(spark)
    history = transforms.silver(transforms.parse(bronze, pipeline), None, pipeline)
    history.where(F.col("event_date") != LATE_DAY).write.format("delta").mode("append").save(
        str(tables.silver))
    resent = event("e7-5", LATE_DAY)          # e7-5 stands under day 7 already
    day = [(event(f"e4-{i}", LATE_DAY), "f", i, None, None, None, None,
            dt.datetime.combine(LATE_DAY, dt.time(23, 0), tzinfo=dt.UTC), LATE_DAY, None, None)
           for i in range(3)]
    day.append((resent, "g", 0, *day[0][3:]))
    derived = transforms.silver(transforms.parse(spark.createDataFrame(day, transforms.BRONZE_SCHEMA),
                                                 pipeline), None, pipeline)
    settings = {"spark.sql.autoBroadcastJoinThreshold": "-1", "spark.sql.adaptive.enabled": "false"}
    with session_conf(spark, settings):
        first = _first_copies(derived, tables, pipeline, date_range("event_date", LATE_DAY, LATE_DAY),
                              lines=len(day))
        assert sorted(r.event_id for r in first.collect()) == ["e4-0", "e4-1", "e4-2"]
        paths = between_scan_and_join(first._jdf.queryExecution().executedPlan())
        assert paths, "silver is not read"
        for path in paths:
            assert path[0].startswith("BroadcastHashJoin") and "LeftSemi" in path[0], path
            assert "_key_hash" in path[0] and not any(n.startswith("Exchange") for n in path), path


def between_scan_and_join(plan) -> list[list[str]]:
    """For each file scan in the physical `plan` (the derived rows here come from memory: each is
    silver's): the nodes from the nearest join above it down to the scan (each node's first line)."""
    found: list[list[str]] = []
    stack = [(plan, [])]
    while stack:
        node, above = stack.pop()
        line = node.toString().splitlines()[0].strip()
        if node.getClass().getSimpleName() == "FileSourceScanExec":
            joins = [i for i, n in enumerate(above) if "Join" in n.split(" ")[0]]
            found.append(above[joins[-1]:] if joins else above)
        children = node.children()
        stack += [(children.apply(i), [*above, line]) for i in range(children.size())]
    return found


def test_a_bronze_created_before_the_hint_gets_the_column_at_the_next_start(spark, home):
    """A bronze written by an older Weir lacks `event_date_hint` and `line_bytes`: `ensure_tables`
    (every driver start) adds them, and the old rows read them as null, so a back-fill reads them
    whatever its dates, and parses them as lines kept whole."""
    pipeline = playback()
    path = PipelineTables.of(home, pipeline).bronze
    added = (transforms.EVENT_DATE_HINT, "line_bytes")
    old_schema = StructType([f for f in transforms.BRONZE_TABLE_SCHEMA.fields if f.name not in added])
    row = {f.name: None for f in old_schema.fields} | {
        "source": "old.jsonl", "position": 0, "value": event("old-1", FIRST),
        "ingest_time": dt.datetime(2026, 11, 1, 23, 0, tzinfo=dt.UTC), "ingest_date": FIRST}
    spark.createDataFrame([row], old_schema).write.format("delta").partitionBy("ingest_date").save(str(path))

    ensure_tables(spark, home, pipeline)
    bronze = table(spark, path)
    assert [(r[transforms.EVENT_DATE_HINT], r["line_bytes"]) for r in bronze.collect()] == [(None, None)]
    lines = bronze_lines(spark, path, latest_version(path), LATE_DAY, LATE_DAY)
    assert [r[transforms.REASON] for r in transforms.parse(lines, pipeline).collect()] == [None]


def test_the_sessions_horizon_reads_only_the_newest_dates_event_times(spark, home):
    """A back-fill's sessions take the stream's watermark once it has read all of silver: the
    newest event time less the watermark delay. It stands under the newest date, and only that
    date's files are read: an older date's file gone from disk fails nothing (it did, when every
    event time was read). Every row of the newest date deleted, the next date's newest counts."""
    import os

    from spark_jobs import sessions
    from spark_jobs.catalog import interval_ms

    pipeline = playback()
    path = home.root / "silver"
    days = [FIRST + dt.timedelta(days=d) for d in range(3)]
    rows = [(f"e{d}-{i}", dt.datetime.combine(day, dt.time(10 + i)), day)
            for d, day in enumerate(days) for i in range(3)]
    (spark.createDataFrame(rows, "event_id string, event_time timestamp, event_date date")
     .repartition(1).write.format("delta").partitionBy("event_date")
     .option("delta.enableDeletionVectors", "true").save(str(path)))
    delay = interval_ms(pipeline.sessions.watermark)

    def horizon() -> int | None:
        return sessions.watermark_horizon(spark.read.format("delta").load(str(path)), pipeline)

    def millis(at: dt.datetime) -> int:
        return int(at.replace(tzinfo=dt.UTC).timestamp() * 1000)

    [old] = (path / f"event_date={days[0]}").glob("*.parquet")
    os.remove(old)
    assert horizon() == millis(dt.datetime.combine(days[2], dt.time(12))) - delay
    spark.sql(f"DELETE FROM delta.`{path}` WHERE event_id LIKE 'e2-%'")     # by rows: deletion vectors
    assert horizon() == millis(dt.datetime.combine(days[1], dt.time(12))) - delay
