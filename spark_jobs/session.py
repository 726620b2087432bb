"""The one SparkSession builder: Delta extensions, UTC, cached jars, a profile-chosen master."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.home import REPO_ROOT
from spark_jobs.jars import class_archive, resolved_jars
from spark_jobs.settings import settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Weir's extensions first: their optimizer rules run before Delta's (`weir.LiveScan` prepares the
# reads of Delta tables that Delta's `PrepareDeltaScan` would otherwise, infra/jvm/weir).
DELTA_CONF = {
    "spark.sql.extensions": "weir.Extensions,io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
# Every Weir JVM (driver and executors): UTC, the throughput collector, and C2 inlining less deeply.
# A driver over a backlog is a fresh JVM, and HotSpot's C2 compiler used as much CPU as the tasks
# while the ingest ran (docs/performance.md, "fourth run"), so both settings cut what it costs:
# - G1, the default collector, trades CPU for short pauses (concurrent marking, refinement, and
#   write barriers that C2 compiles into the hot code); Weir's JVMs run batches, where a young
#   collection's pause is nothing next to a batch. 1 M lines, ingest alone: 37.2/37.6 → 33.0/34.0 s,
#   71.4/72.3 → 62.8/64.5 CPU-s; C2's compile time 41.7 → 37.7 s.
# - Inlining only smaller methods (InlineSmallCode 2500 → 1000 bytes of compiled code, hot
#   methods of 325 → 150 bytes of bytecode): C2's compile time 37.7 → 24.7 s, the same ingest
#   34.1/35.8 → 29.9/30.1/30.9 s, and a running stream's batches shorter too (latency run at
#   15,351 lines/s: p50 5.05 → 4.34 s, p99 8.13 → 7.60 s).
JVM_OPTIONS = "-Duser.timezone=UTC -XX:+UseParallelGC -XX:InlineSmallCode=1000 -XX:FreqInlineSize=150"
BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    "spark.databricks.delta.retentionDurationCheck.enabled": "true",
    "spark.sql.shuffle.partitions": "4",
    # HotSpot does not JIT-compile a method of more than 8000 bytes of bytecode: a fused stage
    # larger than that (the contract's checks of a wide event are) would run interpreted, several
    # times slower than the same expressions evaluated stage by stage. Spark's documented setting
    # for HotSpot.
    "spark.sql.codegen.hugeMethodLimit": "8000",
    # Spark keeps 100 compiled classes (generated code) by default. A micro-batch of the ingest
    # runs more distinct plans than that (the parse, each write, Delta's statistics, log replays
    # and commits), so every batch evicted and recompiled them, and HotSpot's C2 compiler
    # JIT-compiled each new class again: as much CPU as the tasks themselves, batch after batch
    # (docs/performance.md). With room for them, a stream's code is compiled once.
    "spark.sql.codegen.cache.maxEntries": "2000",
    # Delta rebuilds a table's state (two Spark jobs: its files, tombstones and application
    # transactions) for every new version it writes to, in 50 tasks by default — sized for tables
    # of millions of files. A micro-batch writes bronze, quarantine and silver side by side, each
    # a fenced write that reads its table's transactions (Delta 4.4 takes them from that state,
    # not from the checksum file), so three states are rebuilt at once per batch. One task per two
    # cores for each. Eight batches of one 440-line file, three runs each, alternating: with 4 tasks
    # the batches after the first took a median 2.4–2.6 s and the run 41.8–43.7 s; with 1 task,
    # 2.0–2.2 s and 38.2–38.9 s (docs/performance.md, "Delta's state rebuild").
    "spark.databricks.delta.snapshotPartitions": str(max(1, (os.cpu_count() or 2) // 2)),
    # Delta keeps the first 32 characters of a string's min/max in a file's statistics. A line's
    # source (a landing file's URI and digest, or a Kafka partition with its topic id) is longer,
    # so every bronze file looked as if it might hold any source, and the dedupe of each batch
    # read the whole of bronze. Whole identities make those statistics skip the files of other
    # sources (`tables.key_ranges`).
    "spark.databricks.io.skipping.stringPrefixLength": "1024",
    # Spark lists a set of paths in up to 10,000 tasks by default, sized for clusters of thousands
    # of cores, and Delta's VACUUM lists a table that way, level by level: 170,099 tasks in 83
    # stages for a table of 3 partitions (tests/integration/test_maintenance.py), each compiling
    # its code. `weir maintain` (the daily maintenance DAG) took 2 min 38 s of two busy cores on a
    # home of a few files with nothing to delete; 27 s with 8 tasks (two waves of the 4 shuffle
    # partitions above). A SQL setting: a session may set it per job.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
    # Local tables and checkpoints (`file:`): a Delta commit's put-if-absent rename that stays
    # atomic across JVMs, and starts no `readlink` process (infra/jvm/weir/LocalFs.java).
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "weir.LocalFs",
}
LOG_CONFIGURATION = REPO_ROOT / "infra" / "spark" / "log4j2.properties"


def submitted() -> bool:
    """Whether this Python runs under spark-submit, whose master must win: spark-submit's
    environment on this host, or a JVM that launched this Python and waits for it on a gateway
    (Spark's PythonRunner: also the driver of cluster deploy mode, started by a YARN container
    where no spark-submit script ran)."""
    return bool(os.environ.get("SPARK_ENV_LOADED") or os.environ.get("PYSPARK_GATEWAY_PORT")
                or "spark.master" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""))


def pyspark_jars() -> Path:
    """The jars of the installed pyspark (found without importing it)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def yarn_conf(python: str) -> dict[str, str]:
    """spark-submit settings for a driver in cluster deploy mode on YARN. Spark's and Weir's jars
    are `local:` (already on every node: nothing uploaded per submit); the driver and executors
    run `python`; one application attempt, because restarting a driver is the supervisor's
    decision (with its lease and restart budget), not YARN's behind its back; one small executor
    by default (a submit's `spark_conf` overrides). The JVMs' options are `jvm_conf`'s, as on
    every master."""
    return {
        "spark.yarn.jars": f"local:{pyspark_jars()}/*",
        "spark.yarn.maxAppAttempts": "1",
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.executor.instances": "1",
        "spark.executor.memory": "1g",
    }


def driver_java_options() -> str:
    """A driver JVM's options: `JVM_OPTIONS`, Weir's quiet log configuration, and the class archive
    `make setup` made (`spark_jobs.class_archive`) when there is one.

    The archive holds the classes a Weir driver loads, parsed and verified once; a driver maps it
    instead of loading them from the jars, about 3 s off each start on two cores (a restart with
    nothing new to read: 14.5 → 10.6 s, medians of three). A JVM that cannot use it (another JDK,
    other jars, another class path, as on a cluster's node) starts without it, and without the
    warning it would print at every start (`-Xlog:cds*=off`)."""
    options = f"{JVM_OPTIONS} -Dlog4j2.configurationFile=file:{LOG_CONFIGURATION}"
    archive = class_archive()
    if archive.is_file():
        options += f" -XX:SharedArchiveFile={archive} -Xlog:cds*=off"
    return options


def jvm_conf() -> dict[str, str]:
    """The JVMs' options, for a session builder and a spark-submit (whose driver JVM starts, in
    client mode on this host or in cluster mode in a container, before any session builder runs).
    They are Spark's options for a platform's defaults: Spark puts a JVM's `extraJavaOptions` after
    them, so a pipeline's own options add to Weir's (a later -XX or -D wins) and replace none."""
    return {"spark.driver.defaultJavaOptions": driver_java_options(),
            "spark.executor.defaultJavaOptions": JVM_OPTIONS}


def build_session(app_name: str, *, master: str | None = None,
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A session for Weir jobs. The master comes from the argument, else `WEIR_SPARK_MASTER`, else
    `local[*]`; under spark-submit the submitted master wins."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master or not submitted():
        master = master or settings().spark_master
        builder = builder.master(master)
        if master.startswith("local"):
            # Python workers on this host run this Python, with its packages, not whatever
            # `python3` the PATH finds: `weir` run from a shell without the venv activated works
            # as it does under make.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark_conf = {**BASE_CONF, **jvm_conf(), **DELTA_CONF, "spark.jars": ",".join(resolved_jars())}
    spark_conf.update(conf or {})
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    with jvm_leaves_sigterm_to_python():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings().spark_log_level)
    return spark


@contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """`conf` set on `spark` for the block, and the session's own values back after it (a value
    the session never had is unset again). The settings are the session's, not the thread's:
    work on other threads of the same session (a test's stream beside its back-fill) runs with
    them too while the block lasts. A deployed driver, back-fill or refresh has a JVM of its own."""
    before = {key: spark.conf.get(key, None) for key in conf}
    try:
        for key, value in conf.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def jvm_leaves_sigterm_to_python() -> Iterator[None]:
    """The JVM a session launches from this process starts with SIGTERM ignored.

    A SIGTERM sent to the driver's whole process group (`timeout`, `kill -- -PGID`, systemd's
    default `KillMode=control-group`) reaches its JVM as well as the driver. The JVM's shutdown
    hook then stopped the SparkContext while the driver was stopping its queries at a batch
    boundary, and the stop ended in `Cannot call methods on a stopped SparkContext`. A JVM that
    finds SIGTERM ignored at its start installs no handler for it (PySpark does the same for
    SIGINT, which a terminal's Ctrl-C sends to the group). The driver stops, its JVM's stdin
    closes, and the JVM exits then, as it does when the driver is killed.

    Set in the child between fork and exec, so this process never ignores SIGTERM. A session
    under spark-submit, or one already running, launches no JVM and is untouched."""
    from pyspark import java_gateway

    launch = java_gateway.Popen

    def popen(*args, preexec_fn=None, **kwargs):
        def in_the_child() -> None:
            if preexec_fn is not None:
                preexec_fn()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

        return launch(*args, preexec_fn=in_the_child, **kwargs)

    java_gateway.Popen = popen
    try:
        yield
    finally:
        java_gateway.Popen = launch
