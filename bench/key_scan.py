"""`python -m bench.key_scan [--rows N ...] [--batch K ...]`: what silver's dedupe scan costs
per batch, reading the key column against reading a 64-bit hash of it (docs/performance.md, "One
micro-batch as silver grows").

For each N (default 1 M and 10 M rows), a Delta table of N keys of 33 characters and their
`xxhash64` is written in a fresh folder, with files of about 250 k rows; for each K (default 50 k
and 500 k), a batch of K new keys is cached, and the broadcast semi-join of the batch against the
table's key column, then against its hash column, is timed three times. Printed per (N, K,
column), as one JSON line: the three times in seconds and their median. Not a timed test: the
cost of the scan in `InsertAbsent`, and of the cheaper one a hash column would allow.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def keys(spark: Any, n: int, tag: str, files: int) -> Any:
    """N distinct keys `tag-<28 hex>` and their `xxhash64`, in `files` partitions."""
    from pyspark.sql import functions as F

    key = F.concat(F.lit(f"{tag}-"), F.substring(F.sha2(F.col("id").cast("string"), 256), 1, 28))
    return spark.range(n).repartition(files).select(key.alias("k"), F.xxhash64(key).alias("h"))


COLUMNS = {"key": "k", "xxhash64": "h"}   # what is scanned → its column


def scan_times(table: Any, batch: Any, column: str, runs: int = 3) -> list[float]:
    """Seconds of each of `runs` broadcast semi-joins of `batch` against `table` on `column`."""
    from pyspark.sql import functions as F

    times = []
    for _ in range(runs):
        started = time.monotonic()
        table.select(column).join(F.broadcast(batch.select(column)), column, "left_semi").count()
        times.append(round(time.monotonic() - started, 3))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.key_scan", description=__doc__)
    parser.add_argument("--rows", type=int, action="append", help="table rows (repeatable)")
    parser.add_argument("--batch", type=int, action="append", help="batch keys (repeatable)")
    args = parser.parse_args(argv)
    from spark_jobs.session import build_session

    spark = build_session("weir-bench-key-scan", master="local[2]", conf={"spark.ui.enabled": "false"})
    root = Path(tempfile.mkdtemp(prefix="weir-key-scan-"))
    try:
        for rows in args.rows or [1_000_000, 10_000_000]:
            path = root / f"t{rows}"
            keys(spark, rows, "base", max(1, rows // 250_000)).write.format("delta").save(str(path))
            table = spark.read.format("delta").load(str(path))
            for size in args.batch or [50_000, 500_000]:
                batch = keys(spark, size, f"b{size}", 2).persist()
                batch.count()
                for scanned, column in COLUMNS.items():
                    times = scan_times(table, batch, column)
                    print(json.dumps({"rows": rows, "batch": size, "column": scanned,
                                      "seconds": times, "median_s": statistics.median(times)}),
                          flush=True)
                batch.unpersist()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
