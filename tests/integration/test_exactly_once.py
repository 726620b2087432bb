"""Exactly once through crashes: kill -9 of the driver mid-batch, again and again, then a
restart; and a graceful SIGTERM stop at a batch boundary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from spark_jobs import stream, topology, transforms
from spark_jobs.control import progress
from spark_jobs.generator import generate
from spark_jobs.layers import PipelineTables
from tests.helpers import assert_exactly_once, landing_keys, table
from tests.integration.pipelines import playback, write_catalog
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


def start_driver(home, conf_dir: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "WEIR_HOME": str(home.root), "WEIR_CONF": str(conf_dir)}
    log = open(home.root / "driver.log", "ab")
    # a process group of its own, as a service manager starts it: the driver and its JVM
    return subprocess.Popen([sys.executable, "-m", "spark_jobs.stream", "playback", *args],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def batch_files(home, pipeline, kind: str) -> set[int]:
    folder = topology.checkpoint_location(home, pipeline, "ingest") / kind
    if not folder.is_dir():
        return set()
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}


def exited(driver: subprocess.Popen):
    """An `abort` for `wait_for`: why waiting on this driver is pointless (it exited), or None."""
    return lambda: None if driver.poll() is None else f"driver exited ({driver.returncode})"


def assert_all_layers_exactly_once(spark, home, pipeline, written) -> None:
    tables = PipelineTables.of(home, pipeline)
    bronze = table(spark, tables.bronze)
    assert_exactly_once(bronze, ("source", "position"), landing_keys(written.files), "bronze")
    assert_exactly_once(table(spark, tables.silver), ("event_id",), written.event_ids, "silver")
    quarantine = table(spark, tables.quarantine)
    keys = quarantine.select("source", "position").distinct().count()
    assert quarantine.count() == keys == written.bad_lines
    gold = table(spark, tables.gold)
    key = transforms.gold_key(pipeline)
    assert gold.count() == gold.select(*key).distinct().count()
    assert gold.agg(F.sum("events")).first()[0] == len(written.event_ids)
    recomputed = transforms.aggregate(table(spark, tables.silver), pipeline)
    assert gold.exceptAll(recomputed).isEmpty() and recomputed.exceptAll(gold).isEmpty(), \
        "gold written by the stream differs from gold recomputed from silver"


def test_kill_9_mid_batch_repeatedly_then_restart_is_exactly_once(spark, home, tmp_path):
    pipeline = playback(files_per_trigger=2)
    conf = write_catalog(tmp_path / "conf", files_per_trigger=2)
    written = generate(home.landing("playback"), files=8, sessions_per_file=8, seed=11)
    for kill in range(2):
        driver = start_driver(home, conf)
        try:
            committed = batch_files(home, pipeline, "commits")
            # a batch is planned (offsets/N written) but not committed: kill in the middle of it
            wait_for(f"a batch to start (kill {kill + 1})",
                     lambda done=committed: batch_files(home, pipeline, "offsets")
                     - batch_files(home, pipeline, "commits") - done,
                     600, poll_s=0.1, abort=exited(driver))
            if kill:
                time.sleep(1.5)     # further into the batch than the first kill
        finally:
            driver.send_signal(signal.SIGKILL)
            driver.wait(30)
        assert driver.returncode == -signal.SIGKILL
    planned = batch_files(home, pipeline, "offsets")
    assert planned - batch_files(home, pipeline, "commits"), "the kills must leave a batch uncommitted"
    stream.run(pipeline, once=True, home=home, spark=spark)
    assert_all_layers_exactly_once(spark, home, pipeline, written)
    # the restart's batches are in the progress history, with the row-rule counts of each
    ingest = [r for r in progress.read(home, "playback")
              if r["query"] == "playback_ingest" and r["num_input_rows"]]
    assert ingest, "the restarted driver's ingest batches are in platform.stream_progress"
    assert all(set(json.loads(r["row_rule_counts"])) == {"dq_buffer_end_has_duration", "dq_error_has_code"}
               for r in ingest), [r["row_rule_counts"] for r in ingest]


def test_sigterm_during_a_backlog_stops_after_the_batch_in_flight(spark, home, tmp_path):
    """A stop does not wait for the backlog to drain: the driver finishes the batch in flight,
    plans no other, and the restart takes the rest, exactly once. The SIGTERM goes to the driver's
    whole process group, as `timeout`, `kill -- -PGID` and systemd's default KillMode send it: the
    driver's JVM gets it too, and must leave the stop to the driver."""
    pipeline = playback(files_per_trigger=1)
    conf = write_catalog(tmp_path / "conf", files_per_trigger=1)
    written = generate(home.landing("playback"), files=10, sessions_per_file=3, seed=12)
    driver = start_driver(home, conf)
    try:
        wait_for("a first committed batch", lambda: batch_files(home, pipeline, "commits"), 600,
                 poll_s=0.1, abort=exited(driver))
        os.killpg(driver.pid, signal.SIGTERM)
        assert driver.wait(120) == 0, (home.root / "driver.log").read_text(errors="replace")[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
    committed = batch_files(home, pipeline, "commits")
    assert batch_files(home, pipeline, "offsets") == committed, \
        "a graceful stop leaves no planned-but-uncommitted batch"
    # the batch committed when the stop came, the one in flight, and at most one planned meanwhile
    assert len(committed) <= 3, f"the stop waited for the backlog: batches {sorted(committed)} of 10"
    assert "stopped (at a batch boundary)" in (home.root / "driver.log").read_text(errors="replace")
    stream.run(pipeline, once=True, home=home, spark=spark)
    assert_all_layers_exactly_once(spark, home, pipeline, written)


def test_a_crash_while_planning_the_first_gold_batch_does_not_block_the_restart(spark, home):
    """A driver killed while Spark wrote gold's first offsets file leaves `.0.<uuid>.tmp` there
    (seen when YARN killed a driver); Spark 4.2 then refuses to start the stateful query on a
    non-empty offsets folder before batch 0, on every restart. The restarted driver clears it."""
    pipeline = playback(files_per_trigger=None)
    written = generate(home.landing("playback"), files=2, sessions_per_file=4, seed=17)
    half_written = topology.checkpoint_location(home, pipeline, "gold") / "offsets" / \
        ".0.c765be90-7bb9-4fa0-ac59-0be5d20b7bc8.tmp"
    half_written.parent.mkdir(parents=True)
    half_written.touch()
    stream.run(pipeline, once=True, home=home, spark=spark)
    assert not half_written.exists()
    assert_all_layers_exactly_once(spark, home, pipeline, written)
