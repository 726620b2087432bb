"""Table maintenance of a pipeline: OPTIMIZE (bin-packing small files written by micro-batches)
and VACUUM with a safe retention, for silver and gold. Both commit like any writer, so they may
run beside the stream (conflicts are retried by the shared writer's policy)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.tables import retry_conflicts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger(__name__)
# VACUUM never deletes files younger than this: Delta's safe default (7 days), so readers and
# streams still reading older table versions are not broken.
SAFE_RETENTION_HOURS = 168


def maintain(spark: SparkSession, pipeline: Pipeline, home: WeirHome, *,
             retain_hours: int = SAFE_RETENTION_HOURS) -> dict[str, dict[str, Any]]:
    from delta.tables import DeltaTable


    tables = PipelineTables.of(home, pipeline)
    result: dict[str, dict[str, Any]] = {}
    for layer, path in (("silver", tables.silver), ("gold", tables.gold)):
        if not DeltaTable.isDeltaTable(spark, str(path)):
            continue
        table = DeltaTable.forPath(spark, str(path))
        metrics = retry_conflicts(lambda t=table: t.optimize().executeCompaction().collect(),
                                  what=f"{pipeline.name} {layer} OPTIMIZE")
        row = metrics[0].asDict(recursive=True)["metrics"] if metrics else {}
        table.vacuum(float(retain_hours))
        result[layer] = {"files_added": row.get("numFilesAdded", 0),
                         "files_removed": row.get("numFilesRemoved", 0), "retain_hours": retain_hours}
        log.info("%s %s maintained: %s", pipeline.name, layer, result[layer])
    return result
