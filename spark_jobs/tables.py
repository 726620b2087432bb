"""Delta writers, one per kind of table write. Every write is idempotent by record identity, so a
replayed micro-batch (after a crash, or after a checkpoint restore) changes nothing:

- `append_new`: append the rows whose key is not in the table yet, for tables with one writer
  (bronze, quarantine: only the pipeline's leased driver writes them);
- `insert_new`: the same as an insert-only MERGE, whose conflict detection keeps it exact beside
  concurrent writers (silver, which the back-fill rewrites while the stream runs);
- `upsert`: set the row of each key (gold windows, whose values are complete aggregates);
- `replace_partitions`: swap exactly the given partitions (back-fill).

Concurrent commits (stream + back-fill + compaction) are retried within a bound, never lost.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_ATTEMPTS = 8


CONFLICT_CLASSES = ("[DELTA_CONCURRENT_", "[DELTA_METADATA_CHANGED]", "[DELTA_PROTOCOL_CHANGED]")


def is_conflict(err: BaseException) -> bool:
    """A Delta optimistic-concurrency conflict: converted to Delta's Python class, or (when it
    reaches Python wrapped or unconverted) recognised by its error class."""
    from delta.exceptions import DeltaConcurrentModificationException

    return isinstance(err, DeltaConcurrentModificationException) or any(
        marker in str(err) for marker in CONFLICT_CLASSES)


def retry_conflicts(action: Callable[[], T], *, what: str, attempts: int = MAX_ATTEMPTS) -> T:
    """Run `action`, retrying Delta's concurrent-modification conflicts with backoff."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except Exception as err:
            if not is_conflict(err) or attempt == attempts:
                raise
            delay = min(0.2 * 2 ** attempt, 5.0)
            log.warning("%s: concurrent commit (%s), retry %d/%d in %.1fs",
                        what, type(err).__name__, attempt, attempts - 1, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def ensure_table(spark: SparkSession, path: Path, schema: StructType,
                 partition_by: Iterable[str] = ()) -> None:
    """Create the Delta table at `path` with `schema` unless it exists."""
    from delta.tables import DeltaTable

    if DeltaTable.isDeltaTable(spark, str(path)):
        return
    builder = DeltaTable.createIfNotExists(spark).location(str(path)).addColumns(schema)
    partitions = list(partition_by)
    if partitions:
        builder = builder.partitionedBy(*partitions)
    retry_conflicts(builder.execute, what=f"create {path}")


def sql_literal(value: object) -> str:
    """A Python value as a Spark SQL literal (strings, dates, integers)."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"no SQL literal for {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime.date):
        return f"DATE'{value.isoformat()}'"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def in_list(column: str, values: Iterable[object]) -> str:
    """`t.column IN (...)` as SQL, for partition pruning of the MERGE target."""
    vals = sorted(set(values), key=str)
    if not vals:
        return "false"
    return f"t.`{column}` IN ({', '.join(sql_literal(v) for v in vals)})"


def append_new(df: DataFrame, path: Path, key: Iterable[str], *, prune: str | None = None) -> None:
    """Append the rows of `df` whose key is not in the table yet. An anti-join plus a blind
    append in one job: several times cheaper than a MERGE, and exact as long as nobody else writes
    the table meanwhile (the driver's lease guarantees that for bronze and quarantine). A replay
    whose rows are all present commits an empty append."""
    from pyspark.sql import functions as F

    keys = list(key)
    existing = df.sparkSession.read.format("delta").load(str(path))
    if prune:
        existing = existing.alias("t").where(F.expr(prune))
    df.join(existing.select(*keys), on=keys, how="left_anti").write.format("delta").mode(
        "append").save(str(path))


def insert_new(df: DataFrame, path: Path, key: Iterable[str], *, prune: str | None = None) -> None:
    """Insert rows of `df` whose key is not yet in the table (`df` must be unique by key).
    `prune` is a SQL predicate on the target `t` that bounds where a key can already be."""
    from delta.tables import DeltaTable

    condition = " AND ".join([f"t.`{k}` = s.`{k}`" for k in key] + ([prune] if prune else []))

    def merge() -> None:
        (DeltaTable.forPath(df.sparkSession, str(path)).alias("t")
         .merge(df.alias("s"), condition).whenNotMatchedInsertAll().execute())

    retry_conflicts(merge, what=f"insert into {path}")


def upsert(df: DataFrame, path: Path, key: Iterable[str], *, prune: str | None = None) -> None:
    """Set the row of every key of `df` (null-safe keys), inserting the new ones."""
    from delta.tables import DeltaTable

    condition = " AND ".join([f"t.`{k}` <=> s.`{k}`" for k in key] + ([prune] if prune else []))

    def merge() -> None:
        (DeltaTable.forPath(df.sparkSession, str(path)).alias("t")
         .merge(df.alias("s"), condition)
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

    retry_conflicts(merge, what=f"upsert into {path}")


def replace_partitions(compute: Callable[[], DataFrame], path: Path, predicate: str) -> bool:
    """Replace the rows matching `predicate` with `compute()`, unless they are equal already.
    `compute` is called again on a conflict, so a retry sees what the other writer committed.
    Returns whether a commit was made."""

    def replace() -> bool:
        new = compute().persist()
        try:
            spark = new.sparkSession
            old = spark.read.format("delta").load(str(path)).where(predicate)
            if new.exceptAll(old).isEmpty() and old.exceptAll(new).isEmpty():
                return False
            (new.write.format("delta").mode("overwrite").option("replaceWhere", predicate)
             .save(str(path)))
            return True
        finally:
            new.unpersist()

    return retry_conflicts(replace, what=f"replace {predicate} in {path}")
