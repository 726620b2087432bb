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

C1 alone also shrinks the JVM's default code cache from 240 MB to 48 MB, because HotSpot sizes it
for a JVM without tiered compilation. A driver that streams for minutes fills 48 MB with the code
Spark generates per query and dies: "Out of space in CodeCache for method handle intrinsic" (CI, in
`test_broker_restart_while_streaming_recovers_losing_and_doubling_nothing`). So C1 comes with the
code cache C2's JVM would have had.

The JIT changes how fast the code runs, never what it computes; production drivers keep the
JVM's default (`spark_jobs.session.JVM_OPTIONS`)."""

from __future__ import annotations

import os
import shlex

SHORT_LIVED = ("-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m")
LONG_LIVED = "-XX:TieredStopAtLevel=4"


def submit_options(*options: str) -> str:
    """`SPARK_SUBMIT_OPTS` for a short-lived driver: `options`, then `SHORT_LIVED`. Spark's
    launcher puts it before a session's `spark.driver.extraJavaOptions`, so a session that sets
    `LONG_LIVED` there gets C2 back (a later -XX wins).

    The JVMs a cluster manager starts for the application do not inherit `SPARK_SUBMIT_OPTS`: the
    driver in a YARN application master (cluster mode), and the executors on YARN or a standalone
    cluster. They get `SHORT_LIVED` through their `extraJavaOptions`, given here as spark-submit's
    system properties, which Spark takes as defaults: a submit's own `--conf` still wins. In
    `test_celery_postgres.py` the masters' CPU went 208 → 137 s and the executors' 148 → 88 s.
    Spark's launcher splits `SPARK_SUBMIT_OPTS` as a shell would: each option is quoted as a shell
    word, so a value of several options stays one."""
    conf = (f"-Dspark.{jvm}.extraJavaOptions={' '.join(SHORT_LIVED)}" for jvm in ("driver", "executor"))
    return shlex.join((*options, *SHORT_LIVED, *conf))


def for_started_drivers() -> None:
    """Every driver a test process starts inherits `SHORT_LIVED` (set before any is started)."""
    existing = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if not set(SHORT_LIVED) <= set(shlex.split(existing)):
        os.environ["SPARK_SUBMIT_OPTS"] = submit_options(*shlex.split(existing))
