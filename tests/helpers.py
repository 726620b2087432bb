"""Assertions shared by the exactly-once tests: count == distinct == expected, with the
differences printed both ways when they fail."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

__all__ = ["assert_exactly_once", "landing_keys", "table"]


def table(spark: SparkSession, path: Path) -> DataFrame:
    return spark.read.format("delta").load(str(path))


def landing_keys(files: Iterable[Path]) -> set[tuple[str, int]]:
    """The bronze identity of every line of landing `files`, computed here independently of the
    reader: (file URI + '#' + 12 hex of the content's blake2b-128, byte offset of the line)."""
    keys: set[tuple[str, int]] = set()
    for path in files:
        data = Path(path).read_bytes()
        source = f"{Path(path).absolute().as_uri()}#{hashlib.blake2b(data, digest_size=16).hexdigest()[:12]}"
        start = 0
        while start < len(data):
            keys.add((source, start))
            end = data.find(b"\n", start)
            start = len(data) if end < 0 else end + 1
    return keys


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


def live_files(path: Path) -> list[dict]:
    """The Delta table's live files with their statistics (`min.<column>`, `max.<column>`,
    `num_records`, `partition.<column>`), from its log (delta-rs, no JVM)."""
    import pyarrow as pa

    from spark_jobs.tables import delta_log

    return pa.table(delta_log(path, files=True).get_add_actions(flatten=True)).to_pylist()
