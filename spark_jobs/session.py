"""The one SparkSession builder: Delta extensions, UTC, cached jars, a profile-chosen master."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from spark_jobs.home import REPO_ROOT
from spark_jobs.jars import resolved_jars
from spark_jobs.settings import settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    "spark.databricks.delta.retentionDurationCheck.enabled": "true",
    "spark.sql.shuffle.partitions": "4",
    # Delta rebuilds a table's state (a Spark job) around every commit, in 50 tasks by default —
    # sized for tables of millions of files. A stream commits small batches several times a
    # micro-batch: a few tasks per core are plenty, and 50 cost each commit seconds on two cores.
    "spark.databricks.delta.snapshotPartitions": str(2 * (os.cpu_count() or 2)),
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -Dlog4j2.configurationFile="
                                     f"file:{REPO_ROOT / 'infra' / 'spark' / 'log4j2.properties'}",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
}


def build_session(app_name: str, *, master: str | None = None,
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A session for Weir jobs. The master comes from the argument, else `WEIR_SPARK_MASTER`, else
    `local[*]`; under spark-submit the submitted master wins."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master or (not os.environ.get("SPARK_ENV_LOADED") and "spark.master" not in os.environ.get(
            "PYSPARK_SUBMIT_ARGS", "")):
        builder = builder.master(master or settings().spark_master)
    spark_conf = {**BASE_CONF, **DELTA_CONF, "spark.jars": ",".join(resolved_jars())}
    spark_conf.update(conf or {})
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings().spark_log_level)
    register_functions(spark)
    return spark


def register_functions(spark: SparkSession) -> None:
    """Weir's own SQL functions (compiled from infra/jvm by `make setup`), which the shared
    transforms call by name."""
    from spark_jobs.landing import LandingDataSource
    from spark_jobs.transforms import JSON_LINE_REASON

    spark.udf.registerJavaFunction(JSON_LINE_REASON, "weir.JsonLineReason", "string")
    spark.dataSource.register(LandingDataSource)
