"""The progress history is read by time: the last hour of a long history opens only the files
that can hold it, and the newest row of every query is still found when one query has been
silent for longer than that (written with the driver's own writer functions, no JVM)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from spark_jobs.control import platform_tables, progress
from spark_jobs.home import WeirHome

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)


def write(home: WeirHome, query: str, batch: int, age: dt.timedelta) -> None:
    """One commit holding one progress row of `query`, recorded `age` before NOW."""
    row = progress.progress_row("playback", {
        "name": f"playback_{query}", "batchId": batch, "timestamp": "2026-11-23T00:00:00.000Z",
        "numInputRows": 1, "durationMs": {"triggerExecution": 10}}, driver_pid=1)
    row["recorded_at"] = NOW - age
    platform_tables.append(progress.table_path(home), [row], progress.schema())


def test_since_reads_only_the_window_and_latest_widens_for_a_silent_query(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    home = WeirHome(tmp_path / "weir")
    for batch, hours in enumerate((30, 20, 3, 2)):
        write(home, "gold", batch, dt.timedelta(hours=hours))
    for batch, minutes in enumerate((50, 20, 5)):
        write(home, "ingest", batch, dt.timedelta(minutes=minutes))

    window = progress.read(home, "playback", since=NOW - dt.timedelta(hours=1))
    assert [(r["query"], r["batch_id"]) for r in window] == [
        ("playback_ingest", 0), ("playback_ingest", 1), ("playback_ingest", 2)]
    # The same moment in another zone is the same window; a value is data, never query text.
    elsewhere = (NOW - dt.timedelta(hours=1)).astimezone(dt.timezone(dt.timedelta(hours=-5)))
    assert progress.read(home, "playback", since=elsewhere) == window
    assert progress.read(home, "o'brien") == []
    assert progress.read(home, "x' OR 'a'='a") == []
    table = DeltaTable(str(progress.table_path(home)))
    kept = table.file_uris(file_pruning_predicate=[("recorded_at", ">=", NOW - dt.timedelta(hours=1))])
    assert len(kept) == 3 and len(table.file_uris()) == 7

    latest = progress.latest_by_query(home, "playback", expected=("playback_ingest", "playback_gold"),
                                      now=NOW)
    assert {q: r["batch_id"] for q, r in latest.items()} == {"playback_ingest": 2, "playback_gold": 3}
    only_ingest = progress.latest_by_query(home, "playback", expected=("playback_ingest",), now=NOW)
    assert set(only_ingest) == {"playback_ingest"}    # answered from the last hour alone


def test_latest_of_a_long_stopped_pipeline_is_found_from_the_hour_before_it_stopped(tmp_path: Path) -> None:
    home = WeirHome(tmp_path / "weir")
    write(home, "gold", 0, dt.timedelta(hours=3))
    write(home, "ingest", 0, dt.timedelta(hours=2))
    write(home, "ingest", 1, dt.timedelta(minutes=30))
    other = progress.progress_row("hashtags", {"name": "hashtags_ingest", "batchId": 9,
                                               "durationMs": {}}, driver_pid=2)
    other["recorded_at"] = NOW + dt.timedelta(days=1)
    platform_tables.append(progress.table_path(home), [other], progress.schema())

    # The statistics of the other pipeline's file do not count for this one.
    assert platform_tables.newest(progress.table_path(home), "recorded_at",
                                  equals={"pipeline": "playback"}) == NOW - dt.timedelta(minutes=30)
    later = NOW + dt.timedelta(days=2)
    latest = progress.latest_by_query(home, "playback", expected=("playback_ingest", "playback_gold"),
                                      now=later)
    assert {q: r["batch_id"] for q, r in latest.items()} == {"playback_ingest": 1, "playback_gold": 0}
    assert set(progress.latest_by_query(home, "hashtags", now=later)) == {"hashtags_ingest"}
