"""The JIT of the Spark driver JVMs the tests start: C1 only for the short-lived ones, C2 kept for
the long-lived session.

A driver a test starts (`weir run`, a spark-submit from Airflow, a supervisor's relaunch) lives
seconds to a minute on a few hundred lines, so HotSpot's C2 compiles code the driver never runs long
enough to gain from: the JIT's compiler threads took about half of such a driver's CPU (per-thread
counts of its JVM). With C1 alone (`-XX:TieredStopAtLevel=1`) a `weir run playback --once` over 105
lines took 43-49 CPU-s on this machine instead of 69-75, and
`tests/integration/test_exactly_once.py` 232 instead of 276. The session-scoped SparkSession
(`tests/conftest.py`) runs for the whole test run and got slower with C1 alone (352 → 440 CPU-s over
`test_backfill.py` and `test_transforms.py`): it keeps C2.

The JIT changes how fast the code runs, never what it computes; production drivers keep the
JVM's default (`spark_jobs.session.JVM_OPTIONS`)."""

from __future__ import annotations

import os

SHORT_LIVED = "-XX:TieredStopAtLevel=1"
LONG_LIVED = "-XX:TieredStopAtLevel=4"


def submit_options(*options: str) -> str:
    """`SPARK_SUBMIT_OPTS` for a short-lived driver: `options`, then C1 only. Spark's launcher puts
    it before a session's `spark.driver.extraJavaOptions`, so a session that sets `LONG_LIVED`
    there gets C2 back (a later -XX wins).

    The JVMs a cluster manager starts for the application do not inherit `SPARK_SUBMIT_OPTS`: the
    driver in a YARN application master (cluster mode), and the executors on YARN or a standalone
    cluster. They get C1 through their `extraJavaOptions`, given here as spark-submit's system
    properties, which Spark takes as defaults: a submit's own `--conf` still wins. In
    `test_celery_postgres.py` the masters' CPU went 208 → 137 s and the executors' 148 → 88 s."""
    return " ".join((*options, SHORT_LIVED, *(f"-Dspark.{jvm}.extraJavaOptions={SHORT_LIVED}"
                                              for jvm in ("driver", "executor"))))


def for_started_drivers() -> None:
    """Every driver a test process starts inherits C1 only (set before any is started)."""
    existing = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if SHORT_LIVED not in existing.split():
        os.environ["SPARK_SUBMIT_OPTS"] = submit_options(*existing.split())
