"""Table maintenance of a pipeline: compaction of the small files micro-batches write, and VACUUM
with a safe retention, for every table the pipeline writes (bronze, quarantine, silver, gold and
its session table). Both commit like any writer, so they may run beside the stream: a compaction
conflicts only with a commit that removed one of the files it rewrote, and is then retried.

Each table is compacted sorted by the columns its readers skip files by
(`layers.skipping_order`). Delta's own OPTIMIZE packs files in order of size, which leaves
each compacted file's statistics spanning everything it replaced (`infra/jvm/weir/Compact.java`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables, one_value_per_file, skipping_order
from spark_jobs.tables import checkpoint_after_commits, delta_version, java_strings, retry_conflicts

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger(__name__)
# VACUUM never deletes files younger than this: Delta's safe default (7 days), so readers and
# streams still reading older table versions are not broken.
SAFE_RETENTION_HOURS = 168
# A compacted file's size; files under a quarter of it are small, and compacted again with others
# (a partition's remainder is one such file, which stays until another small file joins it).
TARGET_FILE_BYTES = 128 << 20


@dataclass(frozen=True)
class Compacted:
    """What `compact` did to a table: its files removed and added, in how many partitions (one
    commit each), and the rows the new files hold."""

    files_removed: int
    files_added: int
    partitions: int
    rows: int


def compact(spark: SparkSession, path: Path, order: tuple[str, ...], *,
            target_bytes: int = TARGET_FILE_BYTES, small_bytes: int | None = None,
            cut: str | None = None) -> Compacted:
    """Compact the table at `path`: in each partition, its small files (under `small_bytes`, a
    quarter of `target_bytes` by default) and files with deletion vectors are rewritten sorted by
    `order` into files of about `target_bytes`, in an OPTIMIZE commit per partition whose files
    change no data. With `cut`, no file is written holding two values of that column
    (`layers.one_value_per_file`): a file of one value is compacted only with others of its value,
    and files that mix values are split by value."""
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    columns = java_strings(gateway, order)

    def run() -> Compacted:
        removed, added, partitions, rows = gateway.jvm.weir.Compact.compact(
            spark._jsparkSession, str(path), columns, target_bytes,  # type: ignore[attr-defined]
            target_bytes // 4 if small_bytes is None else small_bytes, cut)
        return Compacted(int(removed), int(added), int(partitions), int(rows))

    return retry_conflicts(run, what=f"compact {path}")


def maintain(spark: SparkSession, pipeline: Pipeline, home: WeirHome, *,
             retain_hours: int = SAFE_RETENTION_HOURS) -> dict[str, dict[str, Any]]:
    from delta.tables import DeltaTable

    tables = PipelineTables.of(home, pipeline).outputs()
    result: dict[str, dict[str, Any]] = {}
    for layer, order in skipping_order(pipeline).items():
        path = tables[layer]
        if delta_version(path) is None:
            continue
        done = compact(spark, path, order, cut=one_value_per_file().get(layer))
        DeltaTable.forPath(spark, str(path)).vacuum(float(retain_hours))
        checkpoint_after_commits(path)   # written after commits, not in one (`tables`)
        result[layer] = {"files_added": done.files_added, "files_removed": done.files_removed,
                         "sorted_by": list(order), "retain_hours": retain_hours}
        log.info("%s %s maintained: %s", pipeline.name, layer, result[layer])
    return result
