"""`python -m bench.compaction [--files N] [--lines L] [--target-mb M] [--batch-writes K]`: what a
day of bronze written by stream batches costs its readers and its next writes, before compaction,
after Delta's OPTIMIZE and after Weir's sorted compaction (`weir maintain`; docs/performance.md,
"Every table compacted").

Bronze of the `playback` entry gets N files of L lines each (default 200 × 5,000 = 1 M lines, one
ingest day), one per landing file as the stream's batches write them: each file's source named at
random (a uuid), 1 % of its lines late events of three days before; written in one commit, which
leaves the same files as N batches would. The table is copied twice; one copy is compacted by
Delta's OPTIMIZE (`spark.databricks.delta.optimize.maxFileSize` = the target), the other by
`maintenance.compact` at the same target. Then, the three taking turns, three times each, the reads
that skip files by their statistics: a back-fill's bronze of the late date and of the day
(`backfill.bronze_lines`), and a batch's dedupe lookup of a new source and of a replayed one
(`tables.key_ranges`). Printed as one JSON line per table and read: the table's files, the files
the read scanned (from the executed plan) and its median seconds. Last, K rounds (after two not
counted) of the stream's bronze write of a 300-line batch of a new source (`insert_absent` with
its prune) into the uncompacted table and into Weir's compacted one, taking turns: one JSON line
each, median and most seconds. Not a timed test.
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


def lines(spark: Any, pipeline: Any, n: int, source: Any, position: Any) -> Any:
    """`n` bronze rows of the day's events from `source` at `position` (columns over `id`)."""
    from pyspark.sql import functions as F

    from spark_jobs import transforms

    late = F.col("id") % 100 == 0
    event = F.struct(
        F.concat(F.lit(f"e{uuid.uuid4().hex[:8]}-"), F.col("id")).alias("event_id"),
        F.lit("s").alias("session_id"), F.lit("u").alias("user_id"), F.lit("c001").alias("content_id"),
        F.lit("heartbeat").alias("event_type"),
        F.when(late, F.lit(f"{LATE}T12:00:00Z")).otherwise(F.lit(f"{DAY}T12:00:00Z")).alias("event_time"),
        F.sha2(F.col("id").cast("string"), 256).alias("payload"))
    rows = spark.range(n).select(
        F.to_json(event).alias("value"), source.alias("source"), position.alias("position"),
        F.lit(None).cast("string").alias("topic"), F.lit(None).cast("long").alias("partition"),
        F.lit(None).cast("long").alias("offset"), F.lit(None).cast("timestamp").alias("kafka_timestamp"),
        F.lit(dt.datetime(2026, 11, 20, 9, tzinfo=dt.UTC)).alias("ingest_time"),
        F.lit(DAY).alias("ingest_date"), F.lit(None).cast("binary").alias("raw_bytes"))
    return transforms.bronze_rows(transforms.parse(rows, pipeline), pipeline)


def stream_files(spark: Any, pipeline: Any, path: Path, sources: list[str], per_file: int) -> None:
    """`per_file` lines of each source, one file per source, as the stream's batches write bronze."""
    from pyspark.sql import functions as F

    names = F.element_at(F.array(*map(F.lit, sources)), (F.col("id") / per_file).cast("int") + 1)
    day = lines(spark, pipeline, len(sources) * per_file, names, F.col("id") % per_file + 1)
    day.repartitionByRange(len(sources), "source").write.format("delta").mode("append").save(str(path))


def batch_writes(spark: Any, pipeline: Any, tables: dict[str, Path], rounds: int) -> dict[str, list[float]]:
    """Seconds of the stream's bronze write of a 300-line batch of a new source into each table,
    the tables taking turns, `rounds` times after two not counted."""
    from pyspark.sql import functions as F

    from spark_jobs import transforms
    from spark_jobs.tables import insert_absent, key_ranges

    times: dict[str, list[float]] = {name: [] for name in tables}
    for round_ in range(rounds + 2):
        for name, path in tables.items() if round_ % 2 == 0 else reversed(tables.items()):
            source = f"file:///landing/playback/{uuid.uuid4()}.jsonl#d"
            batch = lines(spark, pipeline, 300, F.lit(source), F.col("id") + 1).persist()
            batch.count()
            started = time.monotonic()
            insert_absent(batch, path, transforms.BRONZE_KEY,
                          prune=key_ranges("source", "position", {source: (1, 300)}))
            if round_ >= 2:
                times[name].append(time.monotonic() - started)
            batch.unpersist()
    return times


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
    parser.add_argument("--batch-writes", type=int, default=8, help="rounds of a batch's bronze write")
    args = parser.parse_args(argv)
    from delta.tables import DeltaTable

    from spark_jobs import catalog
    from spark_jobs.control.maintenance import compact
    from spark_jobs.home import WeirHome
    from spark_jobs.layers import ensure_tables, one_value_per_file, skipping_order
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
        started = time.monotonic()
        stream_files(spark, pipeline, bronze, sources, args.lines)
        written_s = round(time.monotonic() - started, 1)
        tables = {"stream files": root / "as-written", "Delta OPTIMIZE": root / "optimize",
                  "weir compaction": bronze}
        for copy in ("stream files", "Delta OPTIMIZE"):
            shutil.copytree(bronze, tables[copy])
        spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(target))
        started = time.monotonic()
        DeltaTable.forPath(spark, str(tables["Delta OPTIMIZE"])).optimize().executeCompaction()
        compacted = {"Delta OPTIMIZE": round(time.monotonic() - started, 2)}
        started = time.monotonic()
        compact(spark, bronze, skipping_order(pipeline)["bronze"], target_bytes=target,
                cut=one_value_per_file()["bronze"])
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
            for (table, read), seconds in times.items():
                if table != name:
                    continue
                print(json.dumps({"table": name, "files": files, "compaction_s": compacted.get(name),
                                  "read": read, "files_read": files_read[name, read],
                                  "median_s": round(statistics.median(seconds), 3),
                                  "lines": args.files * args.lines, "target_mb": args.target_mb,
                                  "written_s": written_s}), flush=True)
        writes = {name: tables[name] for name in ("stream files", "weir compaction")}
        for name, seconds in batch_writes(spark, pipeline, writes, args.batch_writes).items():
            print(json.dumps({"table": name, "write": "a 300-line batch into bronze",
                              "median_s": round(statistics.median(seconds), 3),
                              "most_s": round(max(seconds), 3), "seconds": [round(t, 3) for t in seconds]}),
                  flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
