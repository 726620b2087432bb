"""Events per second into silver from Kafka next to the landing-folder source, in one run.

    python -m bench.kafka_throughput [--files 8] [--sessions-per-file 60] [--max-offsets 0]

One generated dataset is (1) dropped into the `playback` landing folder and (2) published to a
fresh topic on the local broker (infra/kafka, started and stopped here). Each source then runs
the same ingest query (bronze + quarantine + silver, `availableNow`) on one Spark session, in a
fresh WEIR_HOME, and the wall time from query start to its end gives records/s and events/s.
Results are printed and written to `bench/results/kafka_throughput.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spark_jobs import catalog, kafka, stream
from spark_jobs.catalog import KafkaSource, Pipeline
from spark_jobs.generator import generate
from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.layers import ensure_tables

log = logging.getLogger("bench.kafka_throughput")
BROKER = REPO_ROOT / "infra" / "kafka" / "broker.py"
RESULTS = REPO_ROOT / "bench" / "results" / "kafka_throughput.json"


def ingest(spark, pipeline: Pipeline, home: WeirHome) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Run the ingest query once over everything available; time it and count what it wrote."""
    tables = ensure_tables(spark, home, pipeline)
    started = time.monotonic()
    query = stream.start_query(spark, pipeline, home, tables, "ingest", once=True)
    query.awaitTermination()
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"{pipeline.name} ingest failed: {query.exception()}")
    read = spark.read.format("delta")
    bronze = read.load(str(tables.bronze)).count()
    silver = read.load(str(tables.silver)).count()
    return {"seconds": round(seconds, 2), "records": bronze, "silver_events": silver,
            "records_per_s": round(bronze / seconds, 1), "events_per_s": round(silver / seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--sessions-per-file", type=int, default=60)
    parser.add_argument("--max-offsets", type=int, default=0,
                        help="maxOffsetsPerTrigger of the Kafka source (0: one batch for all)")
    parser.add_argument("--master", default=os.environ.get("WEIR_SPARK_MASTER", "local[2]"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    from spark_jobs.session import build_session

    work = Path(tempfile.mkdtemp(prefix="weir-bench-kafka-"))
    broker_env = {**os.environ, "WEIR_HOME": str(work / "broker")}
    try:
        feed = generate(work / "feed", files=args.files, sessions_per_file=args.sessions_per_file, seed=7)
        subprocess.run([sys.executable, str(BROKER), "install"], env=broker_env, check=True)
        started = subprocess.run([sys.executable, str(BROKER), "start", "--json"], env=broker_env,
                                 check=True, capture_output=True, text=True)
        bootstrap = json.loads(started.stdout.strip().splitlines()[-1])["bootstrap_servers"]

        files_pipeline = catalog.load("playback")
        kafka_pipeline = dataclasses.replace(
            catalog.load("playback_kafka"),
            source=KafkaSource(topic="bench", bootstrap_servers=bootstrap,
                               max_offsets_per_trigger=args.max_offsets or None, partitions=3))
        conn = kafka.connection(kafka_pipeline.source, env={})  # type: ignore[arg-type]
        kafka.ensure_topic(conn, "bench", 3)
        t0 = time.monotonic()
        produced = kafka.Produced()
        for path in feed.files:
            produced.messages += kafka.produce_lines(conn, "bench", kafka.landing_lines(path)).messages
        produce_s = time.monotonic() - t0

        files_home, kafka_home = WeirHome(work / "files"), WeirHome(work / "kafka")
        landing = files_home.landing("playback")
        landing.mkdir(parents=True)
        for path in feed.files:
            shutil.copy(path, landing / path.name)

        spark = build_session("weir-bench-kafka", master=args.master,
                              conf={"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"})
        results = {
            "dataset": {"lines": feed.lines, "files": len(feed.files), "valid_events": len(feed.event_ids),
                        "bytes": sum(f.stat().st_size for f in feed.files)},
            "master": args.master,
            "produce": {"records": produced.messages, "seconds": round(produce_s, 2),
                        "records_per_s": round(produced.messages / produce_s, 1)},
            "landing_files": ingest(spark, files_pipeline, files_home),
            "kafka": ingest(spark, kafka_pipeline, kafka_home),
            "max_offsets_per_trigger": args.max_offsets or None,
        }
        spark.stop()
    finally:
        subprocess.run([sys.executable, str(BROKER), "stop"], env=broker_env, check=False)
        shutil.rmtree(work, ignore_errors=True)

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"dataset: {feed.lines} lines ({len(feed.event_ids)} valid events) in {len(feed.files)} files, "
          f"master {args.master}")
    print(f"produce to Kafka: {results['produce']['records_per_s']:>10.1f} records/s")
    for name in ("landing_files", "kafka"):
        r = results[name]
        print(f"{name:>14} → silver: {r['records_per_s']:>8.1f} records/s, {r['events_per_s']:>8.1f} "
              f"events/s ({r['records']} records, {r['silver_events']} events in {r['seconds']}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
