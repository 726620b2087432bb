"""Table maintenance at Weir's session settings: a VACUUM lists a table in a handful of tasks, and
a compaction keeps each file narrow for the reads that skip files by their statistics.

Spark's default lists paths in up to 10,000 tasks a stage, and Delta's VACUUM uses it: `weir
maintain` ran 170,099 tasks for a table of 3 partitions and took minutes on a home of a few files
(`spark_jobs.session.BASE_CONF`). The session here is built by `build_session` with those settings
(`tests/conftest.py` adds none that touch listing)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
from pathlib import Path

from bench.compaction import scanned
from spark_jobs import transforms
from spark_jobs.backfill import bronze_lines, latest_version
from spark_jobs.control.maintenance import compact
from spark_jobs.layers import ensure_tables, skipping_order
from spark_jobs.tables import delta_identifier, insert_absent
from tests.helpers import assert_exactly_once, live_files, table
from tests.integration.pipelines import playback


def test_a_vacuum_lists_a_table_in_a_handful_of_tasks_not_ten_thousand(spark, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    path = str(tmp_path / "events")
    for day in range(3):   # three partitions, a few files each
        rows = [(i, dt.date(2026, 11, 1 + day)) for i in range(20)]
        spark.createDataFrame(rows, "id long, event_date date").repartition(2).write.format("delta") \
            .mode("append").partitionBy("event_date").save(path)

    context = spark.sparkContext
    group = f"vacuum-{tmp_path.name}"
    context.setJobGroup(group, "a VACUUM whose tasks are counted")
    try:
        DeltaTable.forPath(spark, path).vacuum(168.0)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    tracker = context.statusTracker()
    # a job or stage the status store no longer holds was dropped among the oldest, in a session
    # that has run many; a stage it never held ran no task (skipped: its output was reused)
    jobs = [info for info in map(tracker.getJobInfo, tracker.getJobIdsForGroup(group)) if info is not None]
    stages = [tracker.getStageInfo(stage) for job in jobs for stage in job.stageIds]
    tasks = [info.numTasks for info in stages if info is not None]
    # Delta lists a table level by level, each listing a stage of its own: many small stages
    assert tasks and max(tasks) <= 16, f"{sum(tasks)} tasks in {len(tasks)} stages, at most {max(tasks)}"
    assert spark.read.format("delta").load(path).count() == 60


DAY = dt.date(2026, 11, 20)
BATCHES = 8            # stream batches a day
LINES = 40             # lines a batch
SOURCES = [f"file:///landing/playback/{name}.jsonl#d" for name in ("q", "c", "x", "a", "m", "t")]


def line(event_id: str, day: dt.date, payload: str) -> str:
    return json.dumps({"event_id": event_id, "session_id": "s", "user_id": "u", "content_id": "c001",
                       "event_type": "heartbeat", "event_time": f"{day.isoformat()}T12:00:00Z",
                       "payload": payload})


def stream_batches(spark, path: Path) -> int:
    """Two ingest days of `BATCHES` one-file appends, as the stream writes bronze: each batch holds
    lines of several sources in no order, and every batch of the second day brings two late
    events of the day before the first. Random payloads keep a file's size its data's. Lines."""
    rng = random.Random(7)
    pipeline = playback()
    total = 0
    for d in range(2):
        ingest = dt.datetime.combine(DAY + dt.timedelta(days=d), dt.time(9), tzinfo=dt.UTC)
        for b in range(BATCHES):
            rows = []
            for i in range(LINES):
                late = d == 1 and i < 2
                day = DAY - dt.timedelta(days=1) if late else ingest.date()
                payload = "".join(rng.choices("0123456789abcdef", k=300))
                rows.append((line(f"e{d}-{b}-{i}", day, payload), rng.choice(SOURCES),
                             1000 * d + 100 * b + i, None, None, None, None, ingest, ingest.date(),
                             None, None))
            parsed = transforms.parse(spark.createDataFrame(rows, transforms.BRONZE_SCHEMA), pipeline)
            insert_absent(transforms.bronze_rows(parsed, pipeline).coalesce(1), path, transforms.BRONZE_KEY)
            total += len(rows)
    return total


def test_compaction_sorts_a_tables_small_files_by_what_its_reads_skip_files_by(spark, home) -> None:
    """Bronze's small files are rewritten sorted by (event_date_hint, source, position), into
    files of about the target size: each covers a narrow range of sources, apart from the others
    of its day, and a back-fill of the late events' date reads one file of the day they came with.
    Rows, deletion vectors and files already large are kept; the commit changes no data, and a
    second compaction finds nothing to do."""
    from pyspark.testing import assertDataFrameEqual

    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    spark.sql(f"ALTER TABLE {delta_identifier(tables.bronze)} "
              "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    lines = stream_batches(spark, tables.bronze)
    day_bytes = max(sum(f["size_bytes"] for f in live_files(tables.bronze) if f["partition.ingest_date"] == d)
                    for d in (DAY, DAY + dt.timedelta(days=1)))
    # a deletion vector in a file of the first day; a large file in the second, kept as it is
    spark.sql(f"DELETE FROM {delta_identifier(tables.bronze)} WHERE position = 3")
    rng = random.Random(8)
    payloads = ["".join(rng.choices("0123456789abcdef", k=300)) for _ in range(4 * LINES)]
    large = transforms.bronze_rows(transforms.parse(spark.createDataFrame(
        [(line(f"big-{i}", DAY, payload), SOURCES[0], 5000 + i, None, None, None, None,
          dt.datetime(2026, 11, 21, 10, tzinfo=dt.UTC), DAY + dt.timedelta(days=1), None, None)
         for i, payload in enumerate(payloads)], transforms.BRONZE_SCHEMA), pipeline), pipeline)
    insert_absent(large.coalesce(1), tables.bronze, transforms.BRONZE_KEY)
    kept = {f["path"] for f in live_files(tables.bronze) if f["num_records"] == 4 * LINES}
    before = table(spark, tables.bronze).collect()
    assert len(before) == lines - 1 + 4 * LINES
    version = latest_version(tables.bronze)
    late_files, _ = scanned(bronze_lines(spark, tables.bronze, version, DAY - dt.timedelta(days=1),
                                         DAY - dt.timedelta(days=1)))
    assert late_files == BATCHES    # every batch of the second day holds late events

    # a day's batches into two files: a batch is an eighth of a day, small under half a target
    order = skipping_order(pipeline)["bronze"]
    target = day_bytes // 2 + 1
    done = compact(spark, tables.bronze, order, target_bytes=target, small_bytes=target // 2)
    assert (done.files_removed, done.partitions, done.rows) == (2 * BATCHES, 2, lines - 1), done

    assertDataFrameEqual(table(spark, tables.bronze), before, checkRowOrder=False)
    assert_exactly_once(table(spark, tables.bronze), ["source", "position"],
                        {(r.source, r.position) for r in before}, "bronze")
    files = live_files(tables.bronze)
    assert kept <= {f["path"] for f in files} and len(files) == done.files_added + len(kept) <= 5
    for ingest_date in (DAY, DAY + dt.timedelta(days=1)):
        written = [f for f in files if f["partition.ingest_date"] == ingest_date and f["path"] not in kept]
        assert len(written) == 2, written
        # the files of one date: sources in disjoint ranges (a stream batch's lookup reads one)
        one_date = sorted((f for f in written if f["min.event_date_hint"] == f["max.event_date_hint"]),
                          key=lambda f: (f["min.event_date_hint"], f["min.source"]))
        assert len(one_date) == (2 if ingest_date == DAY else 1), written
        for first, second in itertools.pairwise(one_date):
            assert first["max.source"] <= second["min.source"], (first, second)
    late = DAY - dt.timedelta(days=1)
    assert sum(1 for f in files if f["min.event_date_hint"] <= late <= f["max.event_date_hint"]) == 1
    assert scanned(bronze_lines(spark, tables.bronze, latest_version(tables.bronze), late, late))[0] == 1

    compacted_at = range(version + 1, latest_version(tables.bronze) + 1)
    assert len(compacted_at) == done.partitions, compacted_at    # one commit a partition
    committed = [json.loads(action) for v in compacted_at
                 for action in (tables.bronze / "_delta_log" / f"{v:020d}.json").read_text().splitlines()]
    assert {a["commitInfo"]["operation"] for a in committed if "commitInfo" in a} == {"OPTIMIZE"}
    changes = [a.get("add") or a.get("remove") for a in committed if "add" in a or "remove" in a]
    assert len(changes) == done.files_added + done.files_removed
    assert not any(change["dataChange"] for change in changes)
    again = compact(spark, tables.bronze, order, target_bytes=target, small_bytes=target // 2)
    assert again.files_removed == 0, again


def test_compaction_cut_at_the_date_keeps_each_dates_bronze_in_files_of_its_own(spark, home) -> None:
    """Compacted with bronze's cut (`layers.one_value_per_file`), no file holds two dates: the
    batches that mix a day's lines with late events of another are split by date, so a back-fill
    of the late date reads its lines only. A file already of one date is compacted only with
    other files of that date, and then only when there are two."""
    from pyspark.testing import assertDataFrameEqual

    from spark_jobs.layers import one_value_per_file

    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    lines = stream_batches(spark, tables.bronze)
    before = table(spark, tables.bronze).collect()
    order, cut = skipping_order(pipeline)["bronze"], one_value_per_file()["bronze"]
    late = DAY - dt.timedelta(days=1)

    done = compact(spark, tables.bronze, order, cut=cut)
    assert (done.files_removed, done.partitions, done.rows) == (2 * BATCHES, 2, lines), done
    assertDataFrameEqual(table(spark, tables.bronze), before, checkRowOrder=False)
    files = live_files(tables.bronze)
    assert all(f["min.event_date_hint"] == f["max.event_date_hint"] for f in files), files
    dates = sorted((f["partition.ingest_date"], f["min.event_date_hint"]) for f in files)
    assert dates == [(DAY, DAY), (DAY + dt.timedelta(days=1), late),
                     (DAY + dt.timedelta(days=1), DAY + dt.timedelta(days=1))], dates
    read, rows = scanned(bronze_lines(spark, tables.bronze, latest_version(tables.bronze), late, late))
    assert (read, rows) == (1, 2 * BATCHES), (read, rows)
    assert compact(spark, tables.bronze, order, cut=cut).files_removed == 0

    # one more batch of the second day's own date: compacted with that date's file, no other
    more_rows = [(line(f"more-{i}", DAY + dt.timedelta(days=1), "x"), SOURCES[0], 9000 + i, None,
                      None, None, None, dt.datetime.combine(DAY + dt.timedelta(days=1), dt.time(10),
                                                            tzinfo=dt.UTC),
                      DAY + dt.timedelta(days=1), None, None) for i in range(LINES)]
    parsed = transforms.parse(spark.createDataFrame(more_rows, transforms.BRONZE_SCHEMA), pipeline)
    insert_absent(transforms.bronze_rows(parsed, pipeline).coalesce(1), tables.bronze, transforms.BRONZE_KEY)
    untouched = {f["path"] for f in files if f["min.event_date_hint"] != DAY + dt.timedelta(days=1)}
    again = compact(spark, tables.bronze, order, cut=cut)
    second_day = BATCHES * (LINES - 2) + LINES
    assert (again.files_removed, again.files_added, again.rows) == (2, 1, second_day), again
    assert untouched <= {f["path"] for f in live_files(tables.bronze)}
    more = {(SOURCES[0], 9000 + i) for i in range(LINES)}
    assert_exactly_once(table(spark, tables.bronze), ["source", "position"],
                        {(r.source, r.position) for r in before} | more, "bronze")
