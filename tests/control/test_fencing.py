"""Fencing with real drivers: a driver paused longer than its lease TTL is taken over by a second
driver; once it wakes up it commits nothing more to the pipeline's tables and exits non-zero, and
every layer ends exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from spark_jobs import stream, topology
from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from tests.control.test_claim import actions
from tests.helpers import assert_exactly_once, table
from tests.integration.pipelines import playback, write_catalog
from tests.support.pause import pausing_udf
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow
TTL_S = 6.0


def start_driver(home: WeirHome, conf_dir: Path, name: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "WEIR_HOME": str(home.root), "WEIR_CONF": str(conf_dir),
           "WEIR_LEASE_TTL_S": str(TTL_S)}
    log = open(home.root / f"{name}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "spark_jobs.stream", "playback", *args],
                            env=env, stdout=log, stderr=subprocess.STDOUT)


def versions(tables: PipelineTables) -> dict[str, int]:
    """The latest Delta version of each table of the pipeline."""
    return {layer: max((int(f.stem) for f in (path / "_delta_log").glob("*.json")), default=-1)
            for layer, path in (("bronze", tables.bronze), ("silver", tables.silver),
                                ("quarantine", tables.quarantine), ("gold", tables.gold))}


def settled(tables: PipelineTables, quiet_s: float, at_least_s: float) -> dict[str, int]:
    """Wait until no table changed for `quiet_s` and `at_least_s` passed; the versions then."""
    started = last_change = time.monotonic()
    seen = versions(tables)
    while time.monotonic() - last_change < quiet_s or time.monotonic() - started < at_least_s:
        time.sleep(0.5)
        now = versions(tables)
        if now != seen:
            seen, last_change = now, time.monotonic()
    return seen


def test_a_paused_driver_is_fenced_after_a_takeover(spark, home: WeirHome, tmp_path: Path) -> None:
    pipeline = playback(files_per_trigger=1)
    conf = write_catalog(tmp_path / "conf", files_per_trigger=1)
    written = generate(home.landing("playback"), files=5, sessions_per_file=4, seed=31)
    tables = PipelineTables.of(home, pipeline)
    commits = topology.checkpoint_location(home, pipeline, "ingest") / "commits"
    first = start_driver(home, conf, "first")
    second = None
    try:
        wait_for("the first driver's first committed batch",
                 lambda: commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir()), 600,
                 poll_s=0.2, abort=lambda: None if first.poll() is None else f"exited {first.returncode}")
        # Pause the driver's Python process (a GC or VM pause, a stopped container): what its JVM
        # was already writing finishes, nothing new can start without Python. The pause may land
        # anywhere, in the middle of a lease renewal too: no lock is held there.
        first.send_signal(signal.SIGSTOP)
        before_takeover = settled(tables, quiet_s=3, at_least_s=TTL_S + 2)

        second = start_driver(home, conf, "second", "--once")
        assert second.wait(600) == 0, (home.root / "second.log").read_text()[-3000:]
        assert "taking over the expired lease" in (home.root / "second.log").read_text()
        after_takeover = versions(tables)
        assert after_takeover["bronze"] > before_takeover["bronze"], "the new holder wrote the backlog"

        first.send_signal(signal.SIGCONT)
        code = first.wait(300)
        log = (home.root / "first.log").read_text()
        assert code == 4, log[-3000:]
        assert "LEASE LOST" in log and "FENCED" in log, log[-3000:]
        assert versions(tables) == after_takeover, "the fenced driver committed after the takeover"
    finally:
        for driver in (first, second):
            if driver is not None and driver.poll() is None:
                driver.send_signal(signal.SIGCONT)
                driver.kill()
                driver.wait(30)

    stream.run(pipeline, once=True, home=home, spark=spark)
    assert_exactly_once(table(spark, tables.silver), ("event_id",), written.event_ids, "silver")
    bronze = table(spark, tables.bronze)
    assert bronze.count() == bronze.select("source", "position").distinct().count() == written.lines


# The writes that read the table inside their own transaction: a MERGE (`upsert`), and the key
# read + append of `insert_absent` (the stream's silver and quarantine writes).
INSERTS = ("upsert", "insert_absent")


def hold_an_insert_open(spark, tmp_path: Path, pool: ThreadPoolExecutor, fencing, insert: str) -> tuple:
    """An empty table and an old holder's `insert` into it held open (its source blocks until
    `release` exists): (table path, the insert's future, release)."""
    from spark_jobs import tables
    from spark_jobs.tables import ensure_table

    path = tmp_path / "silver"
    ensure_table(spark, path, StructType([StructField("k", StringType())]), [])
    opened, release = tmp_path / "opened", tmp_path / "release"
    paused = pausing_udf(opened, release)
    in_flight = pool.submit(getattr(tables, insert), rows(spark, "old-1").select(paused("k").alias("k")),
                            path, ["k"], fencing=fencing)
    wait_for("the old holder's insert to be open", opened.exists, 120, poll_s=0.05)
    return path, in_flight, release


def rows(spark, *keys: str):
    return spark.createDataFrame([(k,) for k in keys], "k string")


@pytest.mark.parametrize("insert", INSERTS)
def test_a_commit_in_flight_when_a_newer_holder_commits_cannot_land(spark, tmp_path: Path,
                                                                   insert: str) -> None:
    """The window a lease check cannot close: a driver checks its lease, is paused, and commits
    after a newer holder took over and committed. Its insert is held open (its source blocks)
    while the newer holder appends; once released, it must not land, nor any later write of it,
    and each of them fails loudly (Delta skips a stale write without a word)."""
    from spark_jobs.tables import FencedWriteError, Fencing, insert_absent, save_fenced, upsert

    old, new = Fencing("p", 1), Fencing("p", 2)
    with ThreadPoolExecutor(1) as pool:
        path, in_flight, release = hold_an_insert_open(spark, tmp_path, pool, old, insert)
        insert_absent(rows(spark, "new-1"), path, ["k"], fencing=new)
        release.touch()
        with pytest.raises(FencedWriteError, match="did not land"):
            in_flight.result(300)
    with pytest.raises(FencedWriteError):
        save_fenced(rows(spark, "old-2").write.format("delta").mode("append"), path, old)
    with pytest.raises(FencedWriteError):
        upsert(rows(spark, "old-3"), path, ["k"], fencing=old)
    with pytest.raises(FencedWriteError):
        insert_absent(rows(spark, "old-4"), path, ["k"], fencing=old)
    assert sorted(r.k for r in table(spark, path).collect()) == ["new-1"]
    # the newer holder goes on writing; an unfenced writer (a back-fill) is not affected
    insert_absent(rows(spark, "new-2"), path, ["k"], fencing=new)
    insert_absent(rows(spark, "backfill"), path, ["k"])
    assert sorted(r.k for r in table(spark, path).collect()) == ["backfill", "new-1", "new-2"]
    assert Fencing.used_tokens("p", [path]) == 2


@pytest.mark.parametrize("insert", INSERTS)
def test_a_commit_in_flight_when_a_newer_holder_takes_the_lease_cannot_land(spark, tmp_path: Path,
                                                                           insert: str) -> None:
    """The same pause, but the newer holder has not written to the table yet: its claim at
    takeover (an empty commit carrying its token, `Fencing.claim`) is enough to fence the old
    insert, which would otherwise land between the new holder's reads and its first commit."""
    from spark_jobs.tables import FencedWriteError, Fencing

    old, new = Fencing("p", 1), Fencing("p", 2)
    with ThreadPoolExecutor(1) as pool:
        path, in_flight, release = hold_an_insert_open(spark, tmp_path, pool, old, insert)
        new.claim([path, tmp_path / "no-such-table"])
        # written by delta-rs on a table Spark created: no file, and no metadata Spark's writers
        # would see as a concurrent change
        assert actions(path, 1) == {"commitInfo", "txn"}
        release.touch()
        with pytest.raises(FencedWriteError, match="did not land"):
            in_flight.result(300)
    assert table(spark, path).count() == 0
    assert Fencing.used_tokens("p", [path]) == 2


def test_a_claim_carries_the_tables_checksum_forward(spark, tmp_path: Path) -> None:
    """delta-rs writes no checksum, so the claim writes its version's from the one before
    (`tables.carry_checksum`): Spark's next write then reads the token there and derives its own
    checksum from it, where it rebuilt the table's state twice. Delta's own check of a checksum
    against the rebuilt state passes, the token it holds fences the older holder, and a table
    whose version before has no checksum gets none."""
    from deltalake import write_deltalake

    from spark_jobs.tables import FencedWriteError, Fencing, ensure_table, insert_absent

    path = tmp_path / "silver"
    ensure_table(spark, path, StructType([StructField("k", StringType())]), [])
    insert_absent(rows(spark, "a"), path, ["k"], fencing=Fencing("p", 1))
    new = Fencing("p", 2)
    new.claim([path])
    checksum = path / "_delta_log" / f"{2:020d}.crc"
    assert checksum.exists()
    snapshot = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
        spark._jsparkSession, str(path)).startTransaction().snapshot()
    assert snapshot.version() == 2 and snapshot.checksumOpt().isDefined()
    spark.conf.set("spark.databricks.delta.checksum.mismatch.fatal", "true")
    try:
        assert snapshot.validateChecksum(getattr(snapshot, "validateChecksum$default$1")())
    finally:
        spark.conf.unset("spark.databricks.delta.checksum.mismatch.fatal")
    assert [(t["appId"], t["version"] >> 32) for t in json.loads(checksum.read_text())["setTransactions"]] \
        == [(new.app_id, 2)]
    with pytest.raises(FencedWriteError):
        insert_absent(rows(spark, "old"), path, ["k"], fencing=Fencing("p", 1))
    insert_absent(rows(spark, "b"), path, ["k"], fencing=new)
    assert (path / "_delta_log" / f"{3:020d}.crc").exists()
    assert sorted(r.k for r in table(spark, path).collect()) == ["a", "b"]

    written_by_delta_rs = tmp_path / "other"
    write_deltalake(str(written_by_delta_rs), rows(spark, "a").toArrow())
    new.claim([written_by_delta_rs])
    assert not (written_by_delta_rs / "_delta_log" / f"{1:020d}.crc").exists()
