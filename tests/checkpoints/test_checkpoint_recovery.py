"""Checkpoint operations on a real `playback` stream (Spark, Delta, RocksDB state): damage is
named file by file, and every restore, rewind and reset ends with exactly-once tables."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time

import pytest
from pyspark.sql import functions as F

from spark_jobs import cli, transforms
from spark_jobs.checkpoints import run_action
from spark_jobs.checkpoints.actions import ConfirmationRequiredError, PipelineRunningError
from spark_jobs.checkpoints.compat import compat
from spark_jobs.control import eventlog, lease
from spark_jobs.topology import checkpoint_location as query_dir
from tests.helpers import table
from tests.integration.batches import differs


def problems_by_file(result: dict) -> dict[str, str]:
    return {p["file"]: p["problem"] for p in result["problems"] if p["severity"] == "error"}


def test_validate_names_each_damage_and_a_backup_restores_exactly_once(playback, capsys):
    p, home = playback.pipeline, playback.home
    playback.land("a", hour=0)
    playback.run()
    backup = run_action("playback", "backup", actor="test", reason="before more data")
    assert backup["backup"]["queries"]["ingest"]["batch"] == 0
    playback.land("b", hour=1)
    playback.run()
    assert run_action("playback", "validate")["healthy"]

    ingest, gold = query_dir(home, p, "ingest"), query_dir(home, p, "gold")
    last_offsets = max(int(f.name) for f in (ingest / "offsets").iterdir() if f.name.isdigit())
    (ingest / "offsets" / str(last_offsets)).write_bytes(b"")                 # truncated to 0 bytes
    gold_commits = sorted(int(f.name) for f in (gold / "commits").iterdir() if f.name.isdigit())
    (gold / "commits" / str(gold_commits[-2])).unlink()                         # a commit deleted
    (gold / "metadata").unlink()                                                # metadata removed
    (ingest / "commits" / f".{last_offsets + 1}.5f3e0c.tmp").write_text("v1\n")  # a temporary left
    state_file = gold / "state" / "0" / "0" / f"{gold_commits[-1] + 1}.changelog"
    state_file.unlink()                                                         # state of the last batch
    held = lease.acquire(home, "playback")                                      # two live leases
    stray = home.control("playback") / "lease.stray.json"
    stray.write_text(json.dumps(dataclasses.asdict(held.record)))

    result = run_action("playback", "validate")
    found = problems_by_file(result)
    root = "checkpoints/playback"
    assert not result["healthy"]
    assert "empty file" in found[f"{root}/ingest/offsets/{last_offsets}"]
    assert "missing between" in found[f"{root}/gold/commits/{gold_commits[-2]}"]
    assert "missing metadata" in found[f"{root}/gold/metadata"]
    assert "temporary" in found[f"{root}/ingest/commits/.{last_offsets + 1}.5f3e0c.tmp"]
    assert f"missing for committed batch {gold_commits[-1]}" in found[f"{root}/gold/state/0/0"]
    assert "more than one live lease" in found["control/playback/lease.stray.json"]
    assert cli.main(["checkpoint", "validate", "playback"]) == 1
    assert "NOT healthy" in capsys.readouterr().out

    with pytest.raises(PipelineRunningError, match="while it runs"):
        run_action("playback", "restore", backup_id=backup["id"], confirm=True)
    stray.unlink()
    held.release()
    with pytest.raises(ConfirmationRequiredError):
        run_action("playback", "restore", backup_id=backup["id"])
    preview = run_action("playback", "restore", backup_id=backup["id"], dry_run=True)
    assert preview["plan"]["batches"]["ingest"] == 0 and (gold / "metadata").exists() is False

    restored = run_action("playback", "restore", backup_id=backup["id"], confirm=True, actor="test",
                          reason="damaged checkpoint")
    assert restored["safety_backup"] and restored["generation"] == 1
    assert run_action("playback", "validate")["healthy"]
    playback.land("c", hour=2)
    playback.run()                         # replays b (already in the tables) and processes c
    playback.assert_exactly_once()
    actions = [(e["action"], e["outcome"]) for e in eventlog.read(home, "playback")]
    assert ("checkpoint restore", "ok") in actions and ("checkpoint backup", "ok") in actions


def test_rewind_after_a_bad_deploy_leaves_tables_as_if_it_never_ran(playback, monkeypatch):
    playback.land("a", hour=0)
    playback.run()
    good = run_action("playback", "backup", actor="test", reason="before deploy")
    playback.land("b", hour=1)
    good_derive = transforms.derive

    def bad_derive(events, pipeline):                     # the bad deploy: every CDN is wrong
        return good_derive(events, pipeline).withColumn("cdn", F.lit("bad-cdn"))

    monkeypatch.setattr(transforms, "derive", bad_derive)
    playback.run()
    silver, gold = playback.tables.silver, playback.tables.gold
    assert table(playback.spark, silver).where("cdn = 'bad-cdn'").count() > 0
    assert table(playback.spark, gold).where("cdn = 'bad-cdn'").count() > 0

    monkeypatch.setattr(transforms, "derive", good_derive)   # the fix
    plan = run_action("playback", "rewind", backup_id=good["id"], dry_run=True)["plan"]
    assert set(plan["restore_tables"]) == {"bronze", "quarantine", "silver", "gold", "sessions"}
    rewound = run_action("playback", "rewind", backup_id=good["id"], confirm=True, actor="test",
                         reason="bad deploy", spark=playback.spark)
    assert rewound["safety_backup"]
    sessions_then = (playback.spark.read.format("delta")
                     .option("versionAsOf", good["backup"]["table_versions"]["sessions"])
                     .load(str(playback.tables.sessions)))
    assert differs(table(playback.spark, playback.tables.sessions), sessions_then) == "", \
        "the session table is back to the backup's version"
    playback.run()
    assert table(playback.spark, silver).where("cdn = 'bad-cdn'").count() == 0
    assert table(playback.spark, gold).where("cdn = 'bad-cdn'").count() == 0
    playback.assert_exactly_once()

    # compat: the running code fits; a changed measure needs a state reset, a new column a refresh.
    p = playback.pipeline
    assert compat(playback.spark, playback.home, p)["verdict"] == "compatible"
    measures = {**p.aggregation.measures, "events": "sum(1)"}
    changed = dataclasses.replace(p, aggregation=dataclasses.replace(p.aggregation, measures=measures))
    result = compat(playback.spark, playback.home, changed)
    assert result["verdict"] == "needs state reset"
    assert any("state value" in r["reason"] for r in result["reasons"])
    regrouped = dataclasses.replace(p, aggregation=dataclasses.replace(
        p.aggregation, group_by=(*p.aggregation.group_by, "country")))
    result = compat(playback.spark, playback.home, regrouped)
    assert result["verdict"] == "needs full refresh"
    assert any("state key" in r["reason"] for r in result["reasons"])
    assert any(r["query"] == "gold" and "schema" in r["reason"] for r in result["reasons"])


def test_reset_from_a_timestamp_processes_only_files_after_it(playback):
    now = time.time()
    first = playback.land("x", hour=0, mtime=now - 7200)
    playback.run()
    skipped = playback.land("s", hour=1, mtime=now - 3600)     # landed before the reset point
    kept_files = list(playback.files)
    later = playback.land("n", hour=2)                          # landed after it
    new_files = [f for f in playback.files if f not in kept_files]
    cut = dt.datetime.fromtimestamp(now - 1800, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    preview = run_action("playback", "reset", reset_from=cut, dry_run=True)
    assert preview["plan"]["files_to_process"] == len(new_files)
    reset = run_action("playback", "reset", reset_from=cut, confirm=True, actor="test", reason="test")
    old = reset["old_generation_backup"]
    assert old in [b["id"] for b in run_action("playback", "backups")["backups"]]
    assert run_action("playback", "inspect", spark=playback.spark)["generation"]["generation"] == 1
    playback.run()
    x_files = [f for f in kept_files if f.name.startswith("x")]
    playback.assert_exactly_once(files=x_files + new_files, event_ids=first | later)
    assert not (skipped & {r.event_id for r in table(playback.spark, playback.tables.silver).collect()})


def test_inspect_reports_batches_sources_state_and_pinned_settings(playback):
    playback.land("a", hour=0)
    playback.run()
    result = run_action("playback", "inspect", spark=playback.spark)
    ingest, gold = result["queries"]["ingest"], result["queries"]["gold"]
    assert ingest["last_committed_batch"] == 0 and ingest["planned_uncommitted_batch"] is None
    assert ingest["sources"][0] == {**ingest["sources"][0], "kind": "files", "files_seen": 2}
    assert gold["sources"][0]["kind"] == "delta"
    # the pipeline's own setting, whatever the session had (`stream.run` applies it)
    pinned = gold["pinned_settings"]["spark.sql.shuffle.partitions"]
    assert pinned == str(playback.pipeline.shuffle_partitions)
    [operator] = gold["state_operators"]
    # Update mode evicts the windows that closed (end <= watermark): the rest is the state.
    watermark = dt.datetime.fromtimestamp(gold["watermark_ms"] / 1000, dt.UTC).replace(tzinfo=None)
    open_windows = table(playback.spark, playback.tables.gold).where(F.col("window_end") > watermark).count()
    assert operator["name"] == "stateStoreSave" and operator["rows"] == open_windows > 0
    assert operator["bytes"] > 0 and operator["partitions"] == playback.pipeline.shuffle_partitions
    assert ingest["files"] > 0 and gold["bytes"] > 0
