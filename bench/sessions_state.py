"""`python -m bench.sessions_state [--active N ...] [--touched K] [--history-days D]`: what the
sessions query's keyed state costs, at N active sessions (default 1k and 100k).

For each N, in a fresh WEIR_HOME: silver gets N sessions (a start and a first heartbeat each,
none closed), the sessions query loads them into its state (one batch), then K new events of K
of those sessions arrive through the ingest query's own foreachBatch (bronze → silver) and the
sessions query takes them in one more batch. With D history days, the session table already holds
N closed sessions under each of the D days before (what a long-running table holds, out of the
state), so the steady batch shows whether its cost grows with the table's history. Printed per
N, as one JSON line: the state's rows and bytes on disk (RocksDB checkpoint files), the load
batch's time, the steady batch's time with N sessions in state, the ingest batch's time for the
same K events, the share of the ingest cost the sessions query adds (steady sessions batch /
ingest batch), and then, twice each, the seconds of the batch's lookup of where its K sessions
stand: by key hashes, as the batch runs it, and as a scan of the whole table. Not a timed test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spark_jobs.home import WeirHome

log = logging.getLogger("bench.sessions_state")
START = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC)


def _silver_sessions(spark: Any, silver_schema: Any, pipeline: Any, n: int) -> Any:
    """N sessions as silver rows: `start` at START + i ms, `heartbeat` 2 s later."""
    from pyspark.sql import functions as F

    from spark_jobs.transforms import KEY_HASH, key_hash

    ids = spark.range(n).withColumn("session_id", F.format_string("b-s%09d", "id"))
    kinds = F.explode(F.array(F.struct(F.lit("start").alias("k"), F.lit(0).alias("d")),
                              F.struct(F.lit("heartbeat").alias("k"), F.lit(2000).alias("d"))))
    rows = ids.select("id", "session_id", kinds.alias("e")).select(
        F.concat("session_id", F.lit("-"), F.col("e.k")).alias("event_id"), "session_id",
        F.lit("u00001").alias("user_id"), F.lit("c001").alias("content_id"),
        F.col("e.k").alias("event_type"),
        F.timestamp_millis(F.lit(int(START.timestamp() * 1000)) + F.col("id") % 60_000 + F.col("e.d"))
        .alias("event_time"),
        F.lit(3000).cast("bigint").alias("bitrate_kbps"), F.lit(0.0).alias("position_s"),
        F.lit("bench").alias("_source"), F.col("id").alias("_position"),
        F.current_timestamp().alias("_ingest_time"))
    rows = rows.withColumn("event_date", F.to_date("event_time"))
    rows = rows.select(*[(F.col(f.name) if f.name in rows.columns else F.lit(None)).cast(f.dataType)
                         .alias(f.name) for f in silver_schema.fields if f.name != KEY_HASH])
    return rows.select("*", key_hash((pipeline.key,)))


def _touch_lines(n: int, k: int) -> list[str]:
    """K heartbeats of K distinct sessions among the N, within the watermark."""
    step = max(n // k, 1)
    at = START + dt.timedelta(minutes=5)
    return [json.dumps({"event_id": f"b-s{i:09d}-hb2", "session_id": f"b-s{i:09d}", "user_id": "u00001",
                        "content_id": "c001", "cdn": "a", "event_type": "heartbeat",
                        "event_time": at.isoformat().replace("+00:00", "Z"), "bitrate_kbps": 4500,
                        "position_s": 300}) for i in range(0, step * k, step)][:k]


def _run_sessions(spark: Any, pipeline: Any, home: WeirHome, tables: Any) -> dict[str, Any]:
    from spark_jobs import stream

    query = stream.start_query(spark, pipeline, home, tables, "sessions", once=True)
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    progress = batches[-1]
    state = progress["stateOperators"][0] if progress["stateOperators"] else {}
    return {"batch_ms": progress["durationMs"].get("triggerExecution"),
            "add_batch_ms": progress["durationMs"].get("addBatch"),
            "state_update_ms": state.get("allUpdatesTimeMs"), "state_commit_ms": state.get("commitTimeMs"),
            "state_rows": state.get("numRowsTotal"), "state_memory_bytes": state.get("memoryUsedBytes")}


def _history(spark: Any, tables: Any, n: int, days: int) -> None:
    """N ended sessions under each of the `days` dates before START, in the session table."""
    from pyspark.sql import functions as F

    if days == 0:
        return
    schema = spark.read.format("delta").load(str(tables.sessions)).schema
    start_ms = int(START.timestamp() * 1000)
    rows = (spark.range(n * days)
            .withColumn("day", (F.col("id") / n).cast("int") + 1)
            .withColumn("session_id", F.format_string("h-%02d-%09d", "day", "id"))
            .withColumn("first_event_time", F.timestamp_millis(
                F.lit(start_ms) - F.col("day").cast("long") * 86_400_000 + F.col("id") % 60_000))
            .withColumn("last_event_time", F.col("first_event_time") + F.expr("INTERVAL 20 MINUTES"))
            .withColumn("end_time", F.col("last_event_time"))
            .withColumn("state", F.lit("ended")).withColumn("events", F.lit(40).cast("bigint"))
            .withColumn("event_date", F.to_date("first_event_time")))
    rows.select(*[(F.col(f.name) if f.name in rows.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                  for f in schema.fields]).write.format("delta").mode("append").save(str(tables.sessions))


def _lookups(spark: Any, tables: Any, keys: list[str]) -> dict[str, list[float]]:
    """Seconds of two calls each of the sessions batch's lookup of where `keys` stand: as it runs
    (`tables.holding` by key hashes) and as a scan of the whole table (no hash given)."""
    from spark_jobs.tables import partitions_holding
    from spark_jobs.transforms import key_hash_expression

    batch = spark.createDataFrame([(key,) for key in keys], "session_id string")
    out: dict[str, list[float]] = {"lookup_scan_s": [], "lookup_hashes_s": []}
    hashed = key_hash_expression(("session_id",))
    for name, key_hash in [("lookup_scan_s", None), ("lookup_hashes_s", hashed)] * 2:
        started = time.monotonic()
        partitions_holding(batch, tables.sessions, ("session_id",), "event_date", key_hash=key_hash)
        out[name].append(round(time.monotonic() - started, 2))
    return out


def measure(spark: Any, n: int, k: int, root: Path, history_days: int = 0) -> dict[str, Any]:
    from spark_jobs import catalog, stream, transforms
    from spark_jobs.checkpoints import layout
    from spark_jobs.layers import ensure_tables
    from spark_jobs.topology import checkpoint_location

    home = WeirHome(root / f"n{n}")
    shutil.rmtree(home.root, ignore_errors=True)
    home.root.mkdir(parents=True)
    pipeline = catalog.load("playback")
    tables = ensure_tables(spark, home, pipeline)
    silver_schema = spark.read.format("delta").load(str(tables.silver)).schema
    (_silver_sessions(spark, silver_schema, pipeline, n)
     .write.format("delta").mode("append").save(str(tables.silver)))
    _history(spark, tables, n, history_days)
    started = time.monotonic()
    load = _run_sessions(spark, pipeline, home, tables)
    load_s = time.monotonic() - started

    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    # the bronze-shaped micro-batch the landing reader would make of these lines
    batch = spark.createDataFrame(
        [(line, "file:///bench/touch.jsonl", i + 1, None, None, None, None, now, now.date(), None, None)
         for i, line in enumerate(_touch_lines(n, k))], transforms.BRONZE_SCHEMA)
    started = time.monotonic()
    stream.IngestBatch(pipeline, tables)(batch, 0)
    ingest_s = time.monotonic() - started
    started = time.monotonic()
    steady = _run_sessions(spark, pipeline, home, tables)
    steady_s = time.monotonic() - started
    files, size = layout.folder_size(checkpoint_location(home, pipeline, "sessions") / "state")
    return {"active_sessions": n, "touched": k, "history_days": history_days,
            "state_rows": steady["state_rows"],
            "state_files": files, "state_bytes_on_disk": size,
            "state_memory_bytes": steady["state_memory_bytes"],
            "load_batch_ms": load["batch_ms"], "load_wall_s": round(load_s, 1),
            "steady_batch_ms": steady["batch_ms"], "steady_wall_s": round(steady_s, 1),
            **{f"steady_{part}_ms": steady[f"{part}_ms"]
               for part in ("add_batch", "state_update", "state_commit")},
            "ingest_batch_wall_s": round(ingest_s, 1),
            **_lookups(spark, tables, [json.loads(line)["session_id"] for line in _touch_lines(n, k)]),
            "sessions_share_of_ingest": round(steady_s / ingest_s, 2) if ingest_s else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sessions_state", description=__doc__)
    parser.add_argument("--active", type=int, action="append", help="active sessions (repeatable)")
    parser.add_argument("--touched", type=int, default=1000, help="events of the steady batch")
    parser.add_argument("--history-days", type=int, default=0,
                        help="days of ended sessions (N each) the session table holds before")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from bench.workloads import MASTER, session_conf
    from spark_jobs.session import build_session

    spark = build_session("weir-bench-sessions", master=MASTER, conf=session_conf())
    root = args.workdir or Path(tempfile.mkdtemp(prefix="weir-bench-sessions-"))
    try:
        for n in args.active or [1_000, 100_000]:
            print(json.dumps(measure(spark, n, min(args.touched, n), root, args.history_days)), flush=True)
    finally:
        spark.stop()
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
