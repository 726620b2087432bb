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
