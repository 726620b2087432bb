"""`weir refresh`: a full refresh as one action on a real `playback` stream. After it every layer
holds each record exactly once (and still does after the stream goes on); a dry run and a refused
request change no table version and no checkpoint file; a source that lost lines is refused."""

from __future__ import annotations

import hashlib

import pytest

from spark_jobs import cli
from spark_jobs.checkpoints import backups, generations
from spark_jobs.checkpoints.actions import PipelineRunningError
from spark_jobs.checkpoints.refresh import SourceNoLongerHoldsError, refresh
from spark_jobs.control import eventlog, lease
from spark_jobs.tables import delta_log
from spark_jobs.topology import checkpoint_location
from spark_jobs.transforms import GENERATION_EXPRESSION, KEY_HASH, key_hash_expression
from tests.helpers import table


def snapshot(playback) -> tuple[dict, dict]:
    """Every table's version and every checkpoint file's content digest."""
    root = playback.home.checkpoints("playback")
    files = {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
             for f in sorted(root.rglob("*")) if f.is_file()}
    return backups.table_versions(playback.home, playback.pipeline), files


def refreshes(playback) -> list[dict]:
    return [e for e in eventlog.read(playback.home, "playback") if e["action"] == "refresh"]


def test_refresh_from_bronze_rebuilds_damaged_layers_exactly_once(playback, spark) -> None:
    from delta.tables import DeltaTable

    playback.land("a", hour=0)
    playback.run()
    playback.land("b", hour=1)
    playback.run()
    tables, home = playback.tables, playback.home
    generation_before = generations.current_generation(home, "playback")
    # Damage the derived layers as a bad deploy would: silver and quarantine lose rows, gold too.
    DeltaTable.forPath(spark, str(tables.silver)).delete("event_type = 'heartbeat'")
    DeltaTable.forPath(spark, str(tables.gold)).delete("true")
    DeltaTable.forPath(spark, str(tables.quarantine)).delete("true")
    before_versions, _ = snapshot(playback)
    ingest_last = _last_committed(playback, "ingest")

    result = refresh("playback", origin="bronze", confirm=True, actor="oncall", reason="INC-12",
                     spark=spark)

    playback.assert_exactly_once()
    assert table(spark, tables.quarantine).count() > 0, "the rejects are back in quarantine"
    # the overwrite keeps silver's key hash a column Delta generates (the stream's dedupe reads it)
    [hashed] = [f for f in delta_log(tables.silver).schema().fields if f.name == KEY_HASH]
    assert hashed.metadata == {GENERATION_EXPRESSION: key_hash_expression(["event_id"])}
    assert result["generation"] == int(generation_before.get("generation", 0)) + 1
    assert _last_committed(playback, "ingest") == ingest_last, "ingest keeps its position"
    assert not checkpoint_location(home, playback.pipeline, "gold").exists(), "gold starts fresh"
    safety = backups.find_backup(home, "playback", result["safety_backup"])[0]
    assert safety.kind == "before refresh" and safety.table_versions == before_versions
    [event] = refreshes(playback)
    assert (event["outcome"], event["actor"], event["reason"]) == ("ok", "oncall", "INC-12")
    assert event["details"]["plan"]["origin"] == "bronze"

    playback.land("c", hour=2)          # the stream goes on from the refreshed state
    playback.run()
    playback.assert_exactly_once()


def test_dry_run_and_a_missing_yes_change_nothing_and_a_running_driver_refuses(playback, capsys) -> None:
    playback.land("a", hour=0)
    playback.run()
    before = snapshot(playback)

    assert cli.main(["refresh", "playback", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "DRY RUN, nothing changed: refresh playback from bronze" in out
    assert "checkpoint gold:" in out and "table silver: version" in out and "backup first:" in out
    assert cli.main(["refresh", "playback", "--from-source", "--dry-run", "--json"]) == 0
    plan = __import__("json").loads(capsys.readouterr().out)["plan"]
    assert plan["source"]["bronze_files_still_held"] == len(playback.files)
    assert plan["tables"]["bronze"]["version"] == before[0]["bronze"]
    assert plan["checkpoint"]["ingest"]["removed_files"], plan["checkpoint"]
    assert snapshot(playback) == before

    assert cli.main(["refresh", "playback"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--yes" in err and "--dry-run" in err
    assert snapshot(playback) == before

    held = lease.acquire(playback.home, "playback")     # a live driver holds the pipeline
    try:
        with pytest.raises(PipelineRunningError, match="while it runs"):
            refresh("playback", confirm=True, spark=playback.spark)
    finally:
        held.release()
    assert snapshot(playback) == before
    assert [e["outcome"] for e in refreshes(playback)] == ["dry run", "dry run"]


def test_refresh_from_source_rereads_bronze_exactly_once_and_refuses_a_source_that_lost_lines(
        playback, spark) -> None:
    playback.land("a", hour=0)
    playback.run()
    playback.land("b", hour=1)
    playback.run()

    result = refresh("playback", origin="source", confirm=True, actor="oncall", reason="new schema",
                     spark=spark)
    playback.assert_exactly_once()
    assert result["plan"]["tables"]["bronze"]["after"].startswith("overwritten")
    playback.land("c", hour=2)
    playback.run()
    playback.assert_exactly_once()

    playback.files[0].unlink()          # landing retention removed a file bronze has
    before = snapshot(playback)
    with pytest.raises(SourceNoLongerHoldsError, match="would lose data"):
        refresh("playback", origin="source", confirm=True, spark=spark)
    assert snapshot(playback) == before
    assert [e["outcome"] for e in refreshes(playback)] == ["ok", "failed"]


def _last_committed(playback, query: str) -> int | None:
    from spark_jobs.checkpoints import layout

    return layout.last_committed(checkpoint_location(playback.home, playback.pipeline, query))
