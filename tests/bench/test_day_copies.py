"""`bench.workloads.DayCopies`: the days of history the growth and back-fill runs grow silver and
bronze by. A copy must be what its own lines derive to, or a back-fill of its date would time a
repair instead of a re-derivation; and its events and sessions must be its own, or the session
table would stay the day's size however much history there is."""

from __future__ import annotations

import datetime as dt

from bench.workloads import DayCopies
from spark_jobs import backfill
from spark_jobs.generator import generate
from spark_jobs.layers import ensure_tables
from spark_jobs.tables import delta_version
from tests.helpers import table
from tests.integration.batches import ingest
from tests.integration.pipelines import playback

DAY = dt.date(2026, 11, 19)


def test_a_copy_is_what_its_bronze_lines_derive_to_with_events_and_sessions_of_its_own(spark, home):
    pipeline = playback()
    tables = ensure_tables(spark, home, pipeline)
    day = generate(home.landing("playback"), files=2, sessions_per_file=8, seed=91,
                   start=dt.datetime(2026, 11, 19, 9, 0, tzinfo=dt.UTC))
    # ingested weeks later, at an hour before the day's events began
    ingest(spark, pipeline, tables, day.files, dt.datetime(2026, 12, 3, 1, 0, tzinfo=dt.UTC), 0)
    versions = {layer: delta_version(getattr(tables, layer)) for layer in ("silver", "bronze", "quarantine")}
    silver_day = table(spark, tables.silver)
    day_rows, day_sessions = silver_day.count(), silver_day.select("session_id").distinct().count()

    copies = DayCopies(spark, pipeline, DAY, tables.silver, versions["silver"],
                       bronze=(tables.bronze, versions["bronze"]),
                       quarantine=(tables.quarantine, versions["quarantine"]))
    copies.to_days(3)
    silver = table(spark, tables.silver)
    assert silver.count() == silver.select("event_id").distinct().count() == 3 * day_rows
    assert silver.select("session_id").distinct().count() == 3 * day_sessions
    assert {r[0] for r in silver.select("event_date").distinct().collect()} == {
        DAY - dt.timedelta(days=k) for k in range(3)}

    # the copy between the day and another copy: its own lines derive to what it holds
    copy_day = DAY - dt.timedelta(days=1)
    result = backfill.backfill(spark, pipeline, copy_day, copy_day, home)
    assert result.lines_read > day_rows, result
    assert not result.silver_replaced and not result.quarantine_replaced, result
