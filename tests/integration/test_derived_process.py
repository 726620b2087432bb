"""Gold and the sessions in the driver's second process (`spark_jobs.derived`): niced, reported in
the driver's heartbeat, failing the driver when it dies, dying with the driver, and every layer
exactly once through both kills."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from spark_jobs import stream
from spark_jobs.control import progress
from spark_jobs.control.heartbeat import read_heartbeat
from spark_jobs.control.processes import stat_fields
from spark_jobs.derived import NICENESS
from spark_jobs.generator import generate
from tests.integration.pipelines import playback, write_catalog
from tests.integration.test_exactly_once import assert_all_layers_exactly_once, exited, start_driver
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow
DERIVED = ("playback_gold", "playback_sessions")


def children(pid: int) -> dict[int, str]:
    """The live children of `pid`: their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        fields = stat_fields(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and int(fields[1]) == pid:
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
    return found


def second_process(driver: int) -> int | None:
    return next((pid for pid, command in children(driver).items() if "--derived-of" in command), None)


def derived_batches_reported(home) -> bool:
    """The driver's heartbeat carries a finished batch of each of the second process's queries."""
    queries = (read_heartbeat(home, "playback") or {}).get("queries") or {}
    return all((queries.get(name) or {}).get("last_batch_id") is not None for name in DERIVED)


def recorded_by(home) -> dict[str, set[int]] | None:
    """Query → the pids that recorded its progress rows, once every query has some."""
    found: dict[str, set[int]] = {}
    for row in progress.read(home, "playback"):
        found.setdefault(row["query"], set()).add(row["driver_pid"])
    return found if set(found) >= {"playback_ingest", *DERIVED} else None


def test_the_second_process_is_niced_watched_and_dies_with_the_driver(spark, home, tmp_path):
    pipeline = playback(files_per_trigger=1)
    conf = write_catalog(tmp_path / "conf", files_per_trigger=1, derived_in_own_process=True)
    written = generate(home.landing("playback"), files=4, sessions_per_file=6, seed=21)

    driver = start_driver(home, conf)
    try:
        second = wait_for("the second process's batches in the driver's heartbeat",
                          lambda: derived_batches_reported(home) and second_process(driver.pid),
                          600, abort=exited(driver))
        jvm = next(pid for pid, command in children(second).items() if "java" in command)
        assert [int(stat_fields(pid)[16]) for pid in (driver.pid, second, jvm)] == [0, NICENESS, NICENESS]
        # each process records its own queries' progress
        recorders = wait_for("progress rows of every query", lambda: recorded_by(home), 60)
        assert recorders == {"playback_ingest": {driver.pid}, "playback_gold": {second},
                             "playback_sessions": {second}}

        # the second process dies: the driver stops, loudly
        os.kill(second, signal.SIGKILL)
        assert driver.wait(120) != 0
        log = (home.root / "driver.log").read_text(errors="replace")
        assert f"the process of gold and the sessions (pid {second}) exited with code -9" in log, log[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)

    driver = start_driver(home, conf)
    try:
        second = wait_for("the restarted driver's second process", lambda: second_process(driver.pid),
                          600, abort=exited(driver))
        jvm = wait_for("its JVM", lambda: next((pid for pid, command in children(second).items()
                                                 if "java" in command), None), 120)
        # the driver dies alone (its process group lives on): the second process and its JVM follow
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        wait_for("the second process and its JVM gone",
                 lambda: stat_fields(second) is None and stat_fields(jvm) is None, 60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)

    stream.run(pipeline, once=True, home=home, spark=spark)
    assert_all_layers_exactly_once(spark, home, pipeline, written)
