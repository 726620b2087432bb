"""Checkpoint tools that rewrite a checkpoint hold the pipeline for their whole duration (a driver
started meanwhile is refused by the lease), prune keeps the newest backup that validates, and a
restore refuses another pipeline's backup and re-runs the deploy gate on what it installed."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest

from spark_jobs import catalog
from spark_jobs.checkpoints import run_action
from spark_jobs.control import eventlog, lease
from spark_jobs.control.deploy_gate import IncompatibleCodeError, admit, admitted, code_fingerprint
from spark_jobs.errors import UserError
from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.topology import checkpoint_location
from tests.checkpoints.conftest import write_checkpoint

TAKE_LEASE = ("import sys\nfrom spark_jobs.control import lease\nfrom spark_jobs.home import WeirHome\n"
              "try:\n    lease.acquire(WeirHome.from_env(), 'playback').release()\n"
              "except lease.LeaseHeldError as err:\n    print(err)\n    sys.exit(3)\n")


def from_another_process(home: WeirHome, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `python args...` as a separate process on `home` (what a supervisor's relaunch is)."""
    env = {**os.environ, "WEIR_HOME": str(home.root), "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)


def test_restore_holds_the_pipeline_so_no_driver_starts_in_the_middle(playback):
    home = playback.home
    playback.land("a", hour=0)
    playback.run()
    backup = run_action("playback", "backup", actor="test")["id"]
    attempts: list[subprocess.CompletedProcess[str]] = []

    def mid_restore(done: int, total: int) -> None:
        # Called while the restore copies the live checkpoint (its safety backup): a driver start
        # and a bare lease request from other processes, as a supervisor relaunch would make.
        if not attempts:
            attempts.append(from_another_process(home, "-c", TAKE_LEASE))
            attempts.append(from_another_process(home, "-m", "spark_jobs.stream", "playback", "--once"))

    restored = run_action("playback", "restore", backup_id=backup, confirm=True, actor="test",
                          reason="test", spark=playback.spark, progress=mid_restore)
    taken, driver = attempts
    assert taken.returncode == 3 and "already running" in taken.stdout, (taken.stdout, taken.stderr)
    assert driver.returncode == 3 and "refusing to start" in driver.stderr, driver.stderr[-2000:]
    assert lease.read(home, "playback") is None, "the lease is given back when the restore ends"
    assert from_another_process(home, "-c", TAKE_LEASE).returncode == 0
    # The gate ran on the restored checkpoint: the current code fits and is admitted for it.
    assert restored["deploy_gate"] == {"compatible": True, "verdict": "compatible"}, restored
    assert admitted(home, "playback")["fingerprint"] == code_fingerprint()


def test_a_running_driver_still_refuses_the_holding_actions(home):
    write_checkpoint(home)
    held = lease.acquire(home, "playback")
    try:
        for action, extra in (("reset", {"reset_from": "earliest"}), ("restore", {"backup_id": "latest"})):
            with pytest.raises(UserError, match="while it runs"):
                run_action("playback", action, confirm=True, **extra)
    finally:
        held.release()


def test_a_restored_checkpoint_that_does_not_fit_the_code_is_refused_at_the_next_start(playback):
    p, home = playback.pipeline, playback.home
    playback.land("a", hour=0)
    other = dataclasses.replace(p, shuffle_partitions=p.shuffle_partitions + 1)
    playback.run(other)                       # the checkpoint pins other shuffle partitions
    admit(home, other, actor="test", fingerprint="other", spark=playback.spark)
    backup = run_action("playback", "backup", actor="test")["id"]

    restored = run_action("playback", "restore", backup_id=backup, confirm=True, actor="test",
                          reason="test", spark=playback.spark)
    gate = restored["deploy_gate"]
    assert gate["compatible"] is False and "needs state reset" in gate["refused"], gate
    assert admitted(home, "playback") is None, "the old admission must not let it start"
    with pytest.raises(IncompatibleCodeError, match="shuffle partitions"):
        admit(home, p, actor="supervisor", spark=playback.spark)
    logged = [(e["action"], e["outcome"]) for e in eventlog.read(home, "playback")]
    assert ("checkpoint restore", "ok") in logged and ("deploy", "refused") in logged, logged


def test_prune_never_removes_the_newest_backup_that_validates(home):
    write_checkpoint(home)
    ids = [run_action("playback", "backup", actor="test")["id"] for _ in range(3)]
    newest = home.backups("playback") / ids[-1] / "checkpoints" / "gold" / "offsets" / "0"
    newest.write_bytes(b"")                                       # the newest backup is damaged

    result = run_action("playback", "prune", keep=1, confirm=True, actor="test")
    assert result["newest_valid"] == ids[1], result
    assert result["removed"] == ids[:1] and result["kept"] == ids[1:], result
    assert sorted(p.name for p in home.backups("playback").iterdir()) == ids[1:]
    restored = run_action("playback", "restore", backup_id=ids[1], dry_run=True)
    assert restored["plan"]["backup"] == ids[1]


def test_restore_refuses_a_backup_of_another_pipeline(home):
    write_checkpoint(home)
    write_checkpoint(home, pipeline="playback_kafka", planned=5, committed=4)
    foreign = run_action("playback_kafka", "backup", actor="test")["id"]
    shutil.copytree(home.backups("playback_kafka") / foreign, home.backups("playback") / foreign)
    gold = checkpoint_location(home, catalog.load("playback"), "gold")
    before = sorted(str(f.relative_to(gold)) for f in gold.rglob("*"))

    for action in ("restore", "rewind"):
        with pytest.raises(UserError, match="backup of pipeline playback_kafka, not of playback") as err:
            run_action("playback", action, backup_id=foreign, confirm=True, actor="test")
        assert "\n" not in str(err.value)
    assert sorted(str(f.relative_to(gold)) for f in gold.rglob("*")) == before
    assert lease.read(home, "playback") is None


def test_weir_stop_refuses_to_kill_a_checkpoint_action_holding_the_pipeline(home) -> None:
    from spark_jobs.control import stop
    from spark_jobs.errors import UserError

    with lease.acquire(home, "playback", holder="checkpoint restore") as held:
        with pytest.raises(UserError, match="held by checkpoint restore"):
            stop.stop_driver(home, "playback", actor="on-call", reason="test")
        assert lease.read(home, "playback").token == held.record.token
