"""Guard rails of the checkpoint actions, on checkpoint files laid out as Spark writes them (no
JVM needed): path escapes are refused, a backup of a running stream is cut at a batch boundary,
prune keeps the newest N."""

from __future__ import annotations

import pytest

from spark_jobs import catalog
from spark_jobs.checkpoints import run_action
from spark_jobs.errors import UserError
from spark_jobs.home import PathEscapeError
from spark_jobs.topology import checkpoint_location as query_dir
from tests.checkpoints.conftest import write_checkpoint


def test_backup_of_a_running_stream_is_cut_at_the_last_committed_batch(home):
    write_checkpoint(home, planned=3, committed=2)
    result = run_action("playback", "backup", actor="test")
    copy = home.backups("playback") / result["id"] / "checkpoints" / "gold"
    offsets = sorted(p.name for p in (copy / "offsets").iterdir() if not p.name.startswith("."))
    assert offsets == ["0", "1", "2"]
    assert sorted(p.name for p in (copy / "commits").iterdir()) == ["0", "1", "2"]
    assert sorted(p.name for p in (copy / "state" / "0" / "0").iterdir()) == [
        "1.changelog", "2.changelog", "3.changelog"]
    assert result["backup"]["queries"]["gold"]["batch"] == 2
    listed = run_action("playback", "backups")["backups"]
    assert [b["id"] for b in listed] == [result["id"]]
    # the backup is a consistent checkpoint: validating a copy of it finds nothing wrong
    from spark_jobs.checkpoints.validation import validate_query

    assert [p for p in validate_query(copy, "gold", home.root) if p.severity == "error"] == []


def test_path_escapes_are_refused(home, tmp_path):
    write_checkpoint(home)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    backups = home.backups("playback")
    backups.parent.mkdir(parents=True, exist_ok=True)
    backups.symlink_to(outside, target_is_directory=True)          # backups/playback -> outside
    with pytest.raises(PathEscapeError):
        run_action("playback", "backup", actor="test")
    with pytest.raises(PathEscapeError):
        run_action("playback", "prune", keep=1, confirm=True)
    backups.unlink()

    gold = query_dir(home, catalog.load("playback"), "gold")
    moved = tmp_path / "gold-elsewhere"
    gold.rename(moved)
    gold.symlink_to(moved, target_is_directory=True)               # a query folder -> outside
    with pytest.raises(PathEscapeError):
        run_action("playback", "reset", reset_from="earliest", confirm=True)
    assert (moved / "commits" / "2").exists() and gold.is_symlink()
    gold.unlink()
    moved.rename(gold)

    for bad_id in ("../../outside", "../playback/x", "/etc"):
        with pytest.raises(UserError, match="not a backup id"):
            run_action("playback", "restore", backup_id=bad_id, confirm=True)
    with pytest.raises(catalog.UnknownPipelineError):
        run_action("../outside", "validate")
    assert (outside / "precious").read_text() == "keep me"
    assert sorted(p.name for p in outside.iterdir()) == ["precious"]


def test_prune_keeps_the_newest_backups_and_needs_confirmation(home):
    write_checkpoint(home)
    ids = [run_action("playback", "backup", actor="test")["id"] for _ in range(3)]
    with pytest.raises(UserError, match="destructive"):
        run_action("playback", "prune", keep=1)
    assert run_action("playback", "prune", keep=1, dry_run=True)["removed"] == ids[:2]
    assert len(run_action("playback", "backups")["backups"]) == 3
    result = run_action("playback", "prune", keep=1, confirm=True, actor="test", reason="retention")
    assert result["removed"] == ids[:2] and result["kept"] == ids[2:]
    assert [b["id"] for b in run_action("playback", "backups")["backups"]] == ids[2:]
