"""The event log: appended without a JVM, safe under concurrent writers, readable by Spark."""

from __future__ import annotations

import subprocess
import sys

from spark_jobs.control import eventlog
from spark_jobs.home import WeirHome

WRITER = """
import sys
from spark_jobs.control import eventlog
for i in range(5):
    eventlog.record("playback", f"w{sys.argv[1]}", "ok", actor="tester", details={"i": i})
"""


def test_concurrent_writers_lose_nothing_and_spark_reads_it(home: WeirHome, spark) -> None:
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(n)]) for n in range(6)]
    assert [w.wait(timeout=120) for w in writers] == [0] * 6
    eventlog.record("hashtags", "stop", "graceful", reason="maintenance window", home=home)

    rows = eventlog.read(home, "playback")
    assert len(rows) == 30
    assert {(r["action"], r["details"]["i"]) for r in rows} == {
        (f"w{n}", i) for n in range(6) for i in range(5)}
    assert all(r["event_time"].tzinfo is not None and r["actor"] == "tester" for r in rows)
    [stop] = eventlog.read(home, "hashtags")
    assert stop["reason"] == "maintenance window" and stop["actor"]

    df = spark.read.format("delta").load(str(eventlog.table_path(home)))
    assert df.count() == 31
    assert dict(df.dtypes)["event_time"] == "timestamp"
    assert df.where("reason = 'maintenance window'").count() == 1
