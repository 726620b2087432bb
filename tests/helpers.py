"""Assertions shared by the exactly-once tests: count == distinct == expected, with the
differences printed both ways when they fail."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

__all__ = ["assert_exactly_once", "table"]


def table(spark: SparkSession, path: Path) -> DataFrame:
    return spark.read.format("delta").load(str(path))


def assert_exactly_once(df: DataFrame, key: Iterable[str], expected: set, what: str) -> None:
    """Every expected key once, nothing else: counts lost and doubled records separately."""
    cols = list(key)
    rows = [tuple(r) if len(cols) > 1 else r[0] for r in df.select(*cols).collect()]
    got = set(rows)
    doubled = len(rows) - len(got)
    lost = expected - got
    extra = got - expected
    assert not (doubled or lost or extra), (
        f"{what}: count={len(rows)} distinct={len(got)} expected={len(expected)}; "
        f"doubled={doubled} lost={sorted(lost)[:10]} extra={sorted(extra)[:10]}")
