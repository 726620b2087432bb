"""`python -m bench.compaction [--files N] [--lines L] [--target-mb M]`: what a day of bronze
written by stream batches costs its readers before compaction, after Delta's OPTIMIZE and after
Weir's sorted compaction (`weir maintain`; docs/performance.md, "Every table compacted").

Bronze of the `playback` entry gets N one-file appends of L lines each (default 200 × 5,000 = 1 M
lines, one ingest day), as the stream writes it: each file one landing file, named at random (a
uuid), and 1 % of its lines late events of three days before. The table is copied twice; one copy
is compacted by Delta's OPTIMIZE (`spark.databricks.delta.optimize.maxFileSize` = the target),
the other by `maintenance.compact` at the same target. Then, the three taking turns, three times
each, the reads that skip files by their statistics: a back-fill's bronze of the late date and of
the day (`backfill.bronze_lines`), and a batch's dedupe lookup of a new source and of a replayed
one (`tables.key_ranges`). Printed as one JSON line per table and read: the table's files, the
files the read scanned (from the executed plan) and its median seconds. Not a timed test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

DAY = dt.date(2026, 11, 20)
LATE = DAY - dt.timedelta(days=3)


def scanned(df: Any) -> tuple[int, int]:
    """(files, rows) the scans of `df` read, from the executed plan's metrics."""
    df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    if plan.nodeName() == "AdaptiveSparkPlan":
        plan = plan.executedPlan()
    files = rows = 0
    stack = [plan]
    while stack:
        node = stack.pop()
        metrics = node.metrics()
        if "Scan" in node.nodeName() and metrics.contains("numFiles"):
            files += int(metrics.apply("numFiles").value())
            rows += int(metrics.apply("numOutputRows").value())
        children = node.children()
        stack += [children.apply(i) for i in range(children.size())]
    return files, rows


def stream_files(spark: Any, pipeline: Any, path: Path, sources: list[str], lines: int) -> None:
    """One append of `lines` lines per source, as the stream's batches write bronze."""
    from pyspark.sql import functions as F

    from spark_jobs import transforms

    late = F.col("id") % 100 == 0
    event = F.struct(
        F.concat(F.lit("e"), F.monotonically_increasing_id(), F.lit("-"), F.col("id")).alias("event_id"),
        F.lit("s").alias("session_id"), F.lit("u").alias("user_id"), F.lit("c001").alias("content_id"),
        F.lit("heartbeat").alias("event_type"),
        F.when(late, F.lit(f"{LATE}T12:00:00Z")).otherwise(F.lit(f"{DAY}T12:00:00Z")).alias("event_time"),
        F.sha2(F.col("id").cast("string"), 256).alias("payload"))
    for source in sources:
        lines_df = spark.range(lines).select(
            F.to_json(event).alias("value"), F.lit(source).alias("source"),
            (F.col("id") + 1).alias("position"),
            F.lit(None).cast("string").alias("topic"), F.lit(None).cast("long").alias("partition"),
            F.lit(None).cast("long").alias("offset"), F.lit(None).cast("timestamp").alias("kafka_timestamp"),
            F.lit(dt.datetime(2026, 11, 20, 9, tzinfo=dt.UTC)).alias("ingest_time"),
            F.lit(DAY).alias("ingest_date"), F.lit(None).cast("binary").alias("raw_bytes"))
        rows = transforms.bronze_rows(transforms.parse(lines_df, pipeline), pipeline)
        rows.coalesce(1).write.format("delta").mode("append").save(str(path))


def reads(spark: Any, path: Path, sources: list[str], lines: int) -> dict[str, Any]:
    """Name → a DataFrame of each read that skips files by their statistics."""
    from spark_jobs.backfill import bronze_lines, latest_version
    from spark_jobs.tables import key_ranges

    version = latest_version(path)
    table = spark.read.format("delta").load(str(path)).alias("t")

    def lookup(source: str) -> Any:
        within = key_ranges("source", "position", {source: (1, lines)})
        return table.where(within).select("source", "position")

    return {"back-fill of the late date": bronze_lines(spark, path, version, LATE, LATE),
            "back-fill of the day": bronze_lines(spark, path, version, DAY, DAY),
            "lookup of a new source": lookup(f"file:///landing/playback/{uuid.uuid4()}.jsonl#d"),
            "lookup of a replayed source": lookup(sources[len(sources) // 2])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compaction", description=__doc__)
    parser.add_argument("--files", type=int, default=200, help="stream batches (one file each)")
    parser.add_argument("--lines", type=int, default=5_000, help="lines a batch")
    parser.add_argument("--target-mb", type=int, default=128, help="compacted file size")
    args = parser.parse_args(argv)
    from delta.tables import DeltaTable

    from spark_jobs import catalog
    from spark_jobs.control.maintenance import compact, compaction_order
    from spark_jobs.home import WeirHome
    from spark_jobs.layers import ensure_tables
    from spark_jobs.session import build_session
    from spark_jobs.tables import delta_log

    target = args.target_mb << 20
    spark = build_session("weir-bench-compaction", master="local[2]", conf={"spark.ui.enabled": "false"})
    root = Path(tempfile.mkdtemp(prefix="weir-compaction-"))
    try:
        pipeline = catalog.load("playback")
        bronze = ensure_tables(spark, WeirHome(root), pipeline).bronze
        rng = random.Random(1)
        sources = [f"file:///landing/playback/{uuid.UUID(int=rng.getrandbits(128))}.jsonl#d"
                   for _ in range(args.files)]
        stream_files(spark, pipeline, bronze, sources, args.lines)
        tables = {"stream files": root / "as-written", "Delta OPTIMIZE": root / "optimize",
                  "weir compaction": bronze}
        for copy in ("stream files", "Delta OPTIMIZE"):
            shutil.copytree(bronze, tables[copy])
        spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(target))
        started = time.monotonic()
        DeltaTable.forPath(spark, str(tables["Delta OPTIMIZE"])).optimize().executeCompaction()
        compacted = {"Delta OPTIMIZE": round(time.monotonic() - started, 2)}
        started = time.monotonic()
        compact(spark, bronze, compaction_order(pipeline)["bronze"], target_bytes=target)
        compacted["weir compaction"] = round(time.monotonic() - started, 2)
        times: dict[tuple[str, str], list[float]] = {}
        files_read: dict[tuple[str, str], int] = {}
        for _ in range(3):
            for name, path in tables.items():
                for read, df in reads(spark, path, sources, args.lines).items():
                    started = time.monotonic()
                    files_read[name, read] = scanned(df)[0]
                    times.setdefault((name, read), []).append(time.monotonic() - started)
        for name, path in tables.items():
            files = len(delta_log(path, files=True).file_uris())
            for read in reads(spark, path, sources, args.lines):
                print(json.dumps({"table": name, "files": files, "compaction_s": compacted.get(name),
                                  "read": read, "files_read": files_read[name, read],
                                  "median_s": round(statistics.median(times[name, read]), 3),
                                  "lines": args.files * args.lines, "target_mb": args.target_mb}),
                      flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
