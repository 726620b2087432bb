"""`tables.reconcile` — what back-fills and rebuilds use to make a table's scope equal its
re-derived rows — finds every row that differs and nothing else: rows equal as the table types
them are left alone, a value moved between two nullable columns is a change, null key parts
match themselves."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from spark_jobs.tables import reconcile

SCHEMA = T.StructType([
    T.StructField("k", T.StringType()), T.StructField("g", T.StringType()),
    T.StructField("a", T.StringType()), T.StructField("b", T.StringType()),
    T.StructField("n", T.LongType()), T.StructField("x", T.DoubleType()),
    T.StructField("day", T.StringType()),
])
ROWS = [
    ("k1", "g", "v", None, 1, 0.5, "d1"),
    ("k2", None, "w", "w", 2, None, "d1"),      # a null key part
    ("k3", "g", None, None, 3, 1.5, "d2"),
    ("k4", "g", "z", "z", 4, 2.5, "d2"),
]


def test_reconcile_changes_exactly_the_rows_that_differ(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    spark.createDataFrame(ROWS, SCHEMA).write.format("delta").partitionBy("day").save(str(path))
    version = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count()

    def reconciled(rows: list[tuple], n_type: T.DataType | None = None) -> bool:
        fields = [T.StructField("n", n_type) if n_type and f.name == "n" else f for f in SCHEMA.fields]
        new = spark.createDataFrame(rows, T.StructType(fields))
        return reconcile(new, path, ("k", "g"), scope="day IS NOT NULL", partition="day")

    # The same rows, with `n` typed int where the table has bigint: nothing to do, no commit.
    assert not reconciled(ROWS, T.IntegerType())
    assert spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count() == version

    changed = [
        ("k1", "g", None, "v", 1, 0.5, "d1"),   # the value moved from a to b
        ("k2", None, "w", "w", 2, 7.0, "d1"),   # a change under a null key part
        ("k3", "g", None, None, 3, 1.5, "d2"),  # unchanged
        ("k5", "g", "new", None, 5, None, "d2"),  # new; k4 is gone
    ]
    assert reconciled(changed)
    assertDataFrameEqual(spark.read.format("delta").load(str(path)), spark.createDataFrame(changed, SCHEMA),
                         checkRowOrder=False)
    assert not reconciled(changed)

    # Damage: k3 stands twice. It is rewritten once; a key the new rows lack goes, however often.
    spark.createDataFrame([changed[2], ("k9", "g", "x", None, 9, None, "d2"),
                           ("k9", "g", "x", None, 9, None, "d2")], SCHEMA) \
        .write.format("delta").mode("append").save(str(path))
    assert reconciled(changed)
    assertDataFrameEqual(spark.read.format("delta").load(str(path)), spark.createDataFrame(changed, SCHEMA),
                         checkRowOrder=False)
    assert not reconciled(changed)


def test_a_table_with_a_map_column_is_reconciled_by_its_values(spark, tmp_path: Path) -> None:
    """Spark hashes no map, and compares none in a set operation: a map column is compared by its
    JSON."""
    path = tmp_path / "m"
    schema = T.StructType([T.StructField("k", T.StringType()),
                           T.StructField("tags", T.MapType(T.StringType(), T.LongType())),
                           T.StructField("day", T.StringType())])
    rows = [("k1", {"a": 1, "b": 2}, "d1"), ("k2", None, "d1")]
    spark.createDataFrame(rows, schema).write.format("delta").partitionBy("day").save(str(path))

    def reconciled(rows: list[tuple]) -> bool:
        return reconcile(spark.createDataFrame(rows, schema), path, ("k",), scope="day = 'd1'",
                         partition="day")

    assert not reconciled(rows)
    changed = [("k1", {"a": 1, "b": 3}, "d1"), ("k2", {}, "d1")]
    assert reconciled(changed)
    got = {r["k"]: r["tags"] for r in spark.read.format("delta").load(str(path)).collect()}
    assert got == {"k1": {"a": 1, "b": 3}, "k2": {}}
    assert not reconciled(changed)
