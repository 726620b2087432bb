"""Events per second into silver from Kafka, next to the landing-folder source, in one run.

    python -m bench.kafka_throughput [--quick] [--workdir DIR] [--out FILE]

One generated dataset (`bench.datasets`, bad and duplicate lines included) is published to a
fresh topic on a local broker (`infra/kafka`, started and stopped here, data under the work
folder) and hard-linked into the `playback` landing folder. Each source then runs the platform's
own ingest query (bronze + quarantine + silver, `availableNow`) in a fresh WEIR_HOME, on one
Spark session, in equal micro-batches: `files_per_trigger` files for the landing folder, the same
number of lines as `maxOffsetsPerTrigger` for Kafka. A warm-up of both on a small dataset comes
first (JIT, class loading); then the runs go files, Kafka, Kafka, files (ABBA), so that what
drifts during the run (JIT, the machine's load) weighs on both sources alike: one pair in a fixed
order favoured whichever ran second (Kafka / files 1.5x with files first, 0.92x with Kafka first,
on a loaded machine). `--quick` is one pair of one batch each, no warm-up.

Rates count input lines ("events", as the harness does for landing → silver): `events_per_s` is
the sustained rate (lines / span from the first batch's start to the last batch's end, query
start-up excluded; over a source's runs, all their lines / all their spans), `wall_events_per_s`
includes the start-up. Each source's layers are checked
against the input: bronze holds every line once, silver every valid event once (count ==
distinct == expected). `measure(quick=, workdir=)` is the entry point of the benchmark harness
(`python -m bench.worker kafka`): its `events_per_s` is Kafka → silver; the landing folder's rate and the
ratio Kafka / files sit beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import datasets
from spark_jobs.home import REPO_ROOT, WeirHome

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger("bench.kafka_throughput")
BROKER = REPO_ROOT / "infra" / "kafka" / "broker.py"
TOPIC = "bench-playback"
PARTITIONS = 3
MASTER = "local[2]"


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes of one measurement."""

    size: datasets.Size
    warmup: datasets.Size | None
    files_per_trigger: int


# A few thousand lines in equal batches: the per-batch cost of each source, side by side (not
# production volume: publishing 1M records and two more ingests would double `make bench`).
FULL = Plan(size=datasets.Size(files=8, sessions_per_file=40),
            warmup=datasets.Size(files=2, sessions_per_file=10), files_per_trigger=2)
QUICK = Plan(size=datasets.Size(files=2, sessions_per_file=6), warmup=None, files_per_trigger=2)
FILES, KAFKA = "landing_files", "kafka"


class Broker:
    """The local broker of `infra/kafka` under its own WEIR_HOME, driven through its CLI."""

    def __init__(self, root: Path) -> None:
        self.env = {**os.environ, "WEIR_HOME": str(root)}
        self.env.pop("WEIR_KAFKA_PORT", None)          # a free port: never someone else's broker
        self.bootstrap = ""

    def _run(self, *args: str, timeout_s: float = 300) -> str:
        done = subprocess.run([sys.executable, str(BROKER), *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"broker {args[0]} failed: {done.stderr.strip()[-500:]}")
        return done.stdout

    def start(self) -> str:
        self._run("install", timeout_s=600)
        state = json.loads(self._run("start", "--json").strip().splitlines()[-1])
        self.bootstrap = str(state["bootstrap_servers"])
        return self.bootstrap

    def stop(self) -> None:
        subprocess.run([sys.executable, str(BROKER), "stop"], env=self.env, capture_output=True,
                       timeout=120, check=False)


def publish(bootstrap: str, topic: str, dataset: datasets.Dataset) -> dict[str, Any]:
    """Publish every line of the dataset to a fresh `topic` (idempotent producer, as `weir
    produce`); the broker's end offsets must add up to the dataset's lines."""
    from confluent_kafka import Consumer, TopicPartition

    from spark_jobs import kafka

    conn = kafka.KafkaConnection(bootstrap)
    kafka.ensure_topic(conn, topic, PARTITIONS)
    started = time.monotonic()
    records = 0
    for path in sorted(Path(dataset.path).iterdir()):
        records += kafka.produce_lines(conn, topic, kafka.landing_lines(path)).messages
    seconds = time.monotonic() - started
    consumer = Consumer({**conn.client_config(), "group.id": f"weir-bench-{os.getpid()}"})
    try:
        held = sum(high - low for low, high in (
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(PARTITIONS)))
    finally:
        consumer.close()
    if records != dataset.lines or held != dataset.lines:
        raise RuntimeError(f"{topic}: {records} records delivered, {held} held, "
                           f"{dataset.lines} lines expected")
    return {"records": records, "seconds": round(seconds, 2), "records_per_s": round(records / seconds, 1)}


def kafka_pipeline(bootstrap: str, topic: str, max_offsets: int) -> Pipeline:
    from spark_jobs import catalog
    from spark_jobs.catalog import KafkaSource

    return dataclasses.replace(catalog.load("playback_kafka"), source=KafkaSource(
        topic=topic, bootstrap_servers=bootstrap, starting_offsets="earliest",
        max_offsets_per_trigger=max_offsets, partitions=PARTITIONS))


def ingest(spark: SparkSession, pipeline: Pipeline, home: WeirHome, dataset: datasets.Dataset,
           *, landing: bool) -> dict[str, Any]:
    """Run `pipeline`'s ingest query over everything available in a fresh `home`; time it and
    check its layers against the dataset."""
    from pyspark.sql import functions as F

    from bench.workloads import batches_of, span_of
    from spark_jobs.layers import ensure_tables
    from spark_jobs.stream import start_query

    shutil.rmtree(home.root, ignore_errors=True)
    home.root.mkdir(parents=True)
    tables = ensure_tables(spark, home, pipeline)
    if landing:
        datasets.link_into(dataset, home.landing(pipeline.name))
    started = time.monotonic()
    query = start_query(spark, pipeline, home, tables, "ingest", once=True)
    query.awaitTermination()
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"{pipeline.name} ingest failed: {query.exception()}")
    span = span_of(batches_of(query.recentProgress), dataset.lines)
    read = spark.read.format("delta")
    bronze = read.load(str(tables.bronze)).count()
    silver = read.load(str(tables.silver))
    silver_rows = silver.count()
    silver_distinct = silver.select(F.countDistinct("event_id")).first()[0]  # type: ignore[index]
    exact = bronze == dataset.lines and silver_rows == silver_distinct == dataset.valid_events
    log.info("%s → silver: %d lines in %.1fs sustained (%d batches), %.1fs with start-up",
             pipeline.name, dataset.lines, span.get("span_s") or seconds, span.get("batches") or 0, seconds)
    if not exact:
        raise RuntimeError(f"{pipeline.name}: bronze {bronze} (expected {dataset.lines}), silver "
                           f"{silver_rows} rows / {silver_distinct} distinct "
                           f"(expected {dataset.valid_events})")
    sustained_s = span.get("span_s") or seconds
    return {"seconds": round(seconds, 2), "sustained_s": round(sustained_s, 2),
            "batches": span.get("batches"), "bronze_rows": bronze, "silver_rows": silver_rows,
            "silver_distinct": silver_distinct, "exactly_once": exact,
            "events_per_s": round(dataset.lines / sustained_s, 1),
            "wall_events_per_s": round(dataset.lines / seconds, 1),
            "silver_rows_per_s": round(silver_rows / sustained_s, 1)}


def combined(runs: list[dict[str, Any]], lines: int) -> dict[str, Any]:
    """One source's runs as one rate: all their lines over all their sustained (and wall) time."""
    sustained = sum(r["sustained_s"] for r in runs)
    wall = sum(r["seconds"] for r in runs)
    return {"events_per_s": round(lines * len(runs) / sustained, 1),
            "wall_events_per_s": round(lines * len(runs) / wall, 1),
            "exactly_once": all(r["exactly_once"] for r in runs), "runs": runs}


def measure(*, quick: bool = False, workdir: Path) -> dict[str, Any]:
    """Kafka → silver and landing folder → silver on the same data in one Spark session; the
    Kafka rate is `events_per_s`, the landing folder's and their ratio beside it."""
    from bench.workloads import playback, session_conf
    from spark_jobs.catalog import FileSource
    from spark_jobs.session import build_session

    plan = QUICK if quick else FULL
    workdir = workdir.absolute()
    shutil.rmtree(workdir / "kafka-bench", ignore_errors=True)
    root = workdir / "kafka-bench"
    data = datasets.make(root / "data", "kafka", plan.size, seed=17)
    warm = datasets.make(root / "data", "kafka-warmup", plan.warmup, seed=5) if plan.warmup else None
    # As many lines per Kafka batch as the landing folder's batches hold, plus one per partition:
    # Spark splits the limit across partitions rounding down, which would add a tail batch.
    lines_per_batch = math.ceil(data.lines / math.ceil(data.files / plan.files_per_trigger)) + PARTITIONS
    files_pipeline = dataclasses.replace(
        playback(), source=FileSource(max_files_per_trigger=plan.files_per_trigger))
    order = [FILES, KAFKA] if quick else [FILES, KAFKA, KAFKA, FILES]
    broker = Broker(root / "broker")
    spark = None
    try:
        bootstrap = broker.start()
        produced = publish(bootstrap, TOPIC, data)
        kafka_p = kafka_pipeline(bootstrap, TOPIC, lines_per_batch)
        spark = build_session("weir-bench-kafka", master=MASTER, conf=session_conf())
        if warm is not None:
            publish(bootstrap, f"{TOPIC}-warmup", warm)
            warm_kafka = kafka_pipeline(bootstrap, f"{TOPIC}-warmup", lines_per_batch)
            ingest(spark, files_pipeline, WeirHome(root / "warmup-files"), warm, landing=True)
            ingest(spark, warm_kafka, WeirHome(root / "warmup-kafka"), warm, landing=False)
        runs: dict[str, list[dict[str, Any]]] = {FILES: [], KAFKA: []}
        for index, source in enumerate(order):
            home = WeirHome(root / f"{source}-{index}")
            runs[source].append(ingest(spark, files_pipeline, home, data, landing=True) if source == FILES
                                else ingest(spark, kafka_p, home, data, landing=False))
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    files, from_kafka = combined(runs[FILES], data.lines), combined(runs[KAFKA], data.lines)
    log.info("→ silver: Kafka %.0f events/s, landing folder %.0f events/s", from_kafka["events_per_s"],
             files["events_per_s"])
    return {
        "quick": quick,
        "events_per_s": from_kafka["events_per_s"],
        "landing_files_events_per_s": files["events_per_s"],
        "kafka_vs_files": round(from_kafka["events_per_s"] / files["events_per_s"], 3),
        "wall_kafka_vs_files": round(from_kafka["wall_events_per_s"] / files["wall_events_per_s"], 3),
        "kafka": from_kafka,
        "landing_files": files,
        "produce": produced,
        "dataset": {"lines": data.lines, "files": data.files, "valid_events": data.valid_events,
                    "mb": round(data.bytes / 1e6, 2)},
        "batching": {"files_per_trigger": plan.files_per_trigger, "max_offsets_per_trigger": lines_per_batch,
                     "partitions": PARTITIONS},
        "master": MASTER,
        "warmup": warm is not None,
        "order": order,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few hundred lines, no warm-up (a smoke)")
    parser.add_argument("--workdir", type=Path, help="where data, broker and homes go (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="also write the result as JSON to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="weir-bench-kafka-"))
    try:
        result = measure(quick=args.quick, workdir=workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    d, k, f = result["dataset"], result["kafka"], result["landing_files"]
    print(f"{d['lines']} lines ({d['valid_events']} valid events), {result['master']}, "
          f"{result['batching']['max_offsets_per_trigger']} lines per batch")
    for name, r in (("Kafka", k), ("landing folder", f)):
        print(f"{name:>14} → silver: {r['events_per_s']:>8.1f} events/s sustained, "
              f"{r['wall_events_per_s']:>8.1f} with start-up (runs: "
              + ", ".join(f"{run['events_per_s']:.1f}" for run in r["runs"]) + ")")
    print(f"Kafka / landing folder: {result['kafka_vs_files']}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
