"""The Spark measurements, run inside a fresh worker process (`python -m bench.workloads SPEC OUT`),
so JVM state never leaks from one baseline into the next.

Each workload is first run on a small warm-up dataset in a throw-away WEIR_HOME (JIT, class
loading, Delta log caches), then measured on the real dataset in a fresh WEIR_HOME, `repeats`
times where that is cheap. Input rates count input lines ("events"), bad and duplicate lines
included: that is what every baseline has to read and parse.

- `ceiling`: batch read of the same files + the same `from_json` parse, into the `noop` sink;
- `ceiling_transforms`: batch read + the platform's own parse and silver transforms, into `noop`
  (what the platform's transforms cost without any Delta write: separates CPU from I/O);
- `bare`: a hand-written Structured Streaming job: text files → `from_json` → Delta append;
- `platform_silver`: the platform's ingest query (landing → bronze + quarantine + silver);
- `platform_gold`: the platform's `run(once=True)` (landing → ... → gold);
- `latency`: the ingest query with a 1-second trigger while a writer feeds the landing folder at
  a fixed rate; latency = commit of the silver version holding the row minus the rename of its file;
- `backfill`: bronze of one day ingested (not timed), silver and gold emptied, then the timed
  `backfill` of that day re-derives them (and a second, no-op run is timed too).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import itertools
import json
import logging
import os
import random
import resource
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import delta_log
from bench.datasets import Dataset, link_into
from spark_jobs import catalog
from spark_jobs.catalog import FileSource, Pipeline
from spark_jobs.home import WeirHome

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)
PIPELINE = "playback"
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.sql.streaming.numRecentProgressUpdates": "1000",
}
Result = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Spec:
    """One measurement: which workload, on which data, where, and how often."""

    workload: str
    label: str
    dataset: Dataset
    workdir: str
    warmup: Dataset | None = None
    repeats: int = 1
    files_per_trigger: int | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Spec:
        data = dict(data)
        data["dataset"] = Dataset.from_dict(data["dataset"])
        if data.get("warmup"):
            data["warmup"] = Dataset.from_dict(data["warmup"])
        return cls(**data)


def playback(files_per_trigger: int | None, trigger: str | None = None) -> Pipeline:
    """The catalog's playback entry with the benchmark's batching (and trigger) applied."""
    p = catalog.load(PIPELINE)
    p = dataclasses.replace(p, source=FileSource(max_files_per_trigger=files_per_trigger))
    return dataclasses.replace(p, trigger_interval=trigger) if trigger else p


def fresh_home(spec: Spec, name: str) -> WeirHome:
    root = Path(spec.workdir) / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return WeirHome(root)


def bare_schema(pipeline: Pipeline) -> StructType:
    """The playback contract as a typed schema, the way a hand-written job would declare it."""
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType, TimestampType

    types = {"string": StringType(), "integer": LongType(), "number": DoubleType(),
             "timestamp": TimestampType()}
    return StructType([StructField(f.name, types[f.type]) for f in pipeline.fields])


def progress_span(query: StreamingQuery) -> dict[str, Any]:
    """Batches of a finished query: how many, and the span from the first batch's start to the
    last batch's end (query start-up excluded: that is the sustained part)."""
    batches = []
    for p in query.recentProgress:
        if int(p["numInputRows"]) == 0:
            continue
        started = dt.datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00")).timestamp()
        batches.append((started, started + int(p["durationMs"].get("triggerExecution", 0)) / 1000.0))
    if not batches:
        return {"batches": 0, "span_s": None}
    return {"batches": len(batches), "span_s": max(b[1] for b in batches) - min(b[0] for b in batches),
            "batch_s": [round(b[1] - b[0], 3) for b in batches]}


def timeline(table: Path, since: float) -> list[list[float]]:
    """(seconds since `since`, rows committed so far) per commit of `table`: throughput over time."""
    total, points = 0, []
    for c in delta_log.commits(table):
        if c.rows_added and c.visible_at >= since:
            total += c.rows_added
            points.append([round(c.visible_at - since, 3), total])
    return points


def run_stream(query: StreamingQuery) -> None:
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{query.name} failed: {query.exception()}")


# --- the workloads: each (spark, spec, dataset, home_name) -> metrics of one run ---------------

def ceiling_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    from pyspark.sql import functions as F

    schema = bare_schema(playback(None))
    started = time.monotonic()
    (spark.read.text(data.path).select(F.from_json("value", schema).alias("e")).select("e.*")
     .write.format("noop").mode("overwrite").save())
    return {"seconds": time.monotonic() - started}


def ceiling_transforms_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    from pyspark.sql import functions as F

    from spark_jobs import transforms
    from spark_jobs.layers import ensure_tables, read_dimension
    from spark_jobs.sources import bronze_columns

    p = playback(None)
    home = fresh_home(spec, name)
    tables = ensure_tables(spark, home, p)
    dimension = read_dimension(spark, tables)
    started = time.monotonic()
    lines = spark.read.text(data.path)
    bronze = bronze_columns(lines, value=F.col("value"), source=F.col("_metadata.file_path"),
                            position=F.monotonically_increasing_id())
    parsed = transforms.parse(bronze, p)
    transforms.silver(parsed, dimension, p).write.format("noop").mode("overwrite").save()
    transforms.rejects(parsed).write.format("noop").mode("overwrite").save()
    return {"seconds": time.monotonic() - started}


def bare_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    from pyspark.sql import functions as F

    home = fresh_home(spec, name)
    landing, table = home.landing(PIPELINE), home.root / "bare" / "events"
    link_into(data, landing)
    reader = spark.readStream.format("text")
    if spec.files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", spec.files_per_trigger)
    parsed = (reader.load(str(landing))
              .select(F.from_json("value", bare_schema(playback(None))).alias("e")).select("e.*"))
    started_wall = time.time()
    started = time.monotonic()
    query = (parsed.writeStream.format("delta").outputMode("append").trigger(availableNow=True)
             .option("checkpointLocation", str(home.root / "bare" / "checkpoint"))
             .queryName("bare").start(str(table)))
    run_stream(query)
    return {"seconds": time.monotonic() - started, **progress_span(query),
            "timeline": timeline(table, started_wall)}


def platform_silver_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    from spark_jobs.layers import ensure_tables
    from spark_jobs.stream import start_query

    p = playback(spec.files_per_trigger)
    home = fresh_home(spec, name)
    tables = ensure_tables(spark, home, p)
    link_into(data, home.landing(PIPELINE))
    started_wall = time.time()
    started = time.monotonic()
    query = start_query(spark, p, home, tables, "ingest", once=True)
    run_stream(query)
    return {"seconds": time.monotonic() - started, **progress_span(query),
            "timeline": timeline(tables.bronze, started_wall)}


def platform_gold_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    from spark_jobs.layers import ensure_tables
    from spark_jobs.stream import run

    p = playback(spec.files_per_trigger)
    home = fresh_home(spec, name)
    ensure_tables(spark, home, p)
    link_into(data, home.landing(PIPELINE))
    started = time.monotonic()
    run(p, once=True, home=home, spark=spark)
    return {"seconds": time.monotonic() - started}


def backfill_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    from delta.tables import DeltaTable

    from spark_jobs.backfill import backfill
    from spark_jobs.layers import ensure_tables
    from spark_jobs.stream import start_query

    p = playback(None)
    home = fresh_home(spec, name)
    tables = ensure_tables(spark, home, p)
    link_into(data, home.landing(PIPELINE))
    run_stream(start_query(spark, p, home, tables, "ingest", once=True))
    for path in (tables.silver, tables.gold):       # as if silver and gold had to be re-derived
        DeltaTable.forPath(spark, str(path)).delete()
    day = dt.date.fromisoformat(data.day)
    started = time.monotonic()
    backfill(spark, p, day, day, home)
    seconds = time.monotonic() - started
    started = time.monotonic()
    again = backfill(spark, p, day, day, home)
    return {"seconds": seconds, "rerun_seconds": time.monotonic() - started,
            "rerun_changed": again.silver_replaced or again.gold_replaced}


def ingest_profile_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    """Where an ingest micro-batch spends its time: the steps of `stream.IngestBatch` timed one by
    one on one bronze-shaped batch (they run partly side by side in the stream; here in a row, to
    attribute the time), then the whole `IngestBatch` on fresh tables as the stream runs it, next
    to an idempotent Delta append (txnAppId/txnVersion) of the same rows: the cheapest write
    there is, which a restored or reset checkpoint would defeat (see docs/performance.md)."""
    from pyspark.sql import functions as F

    from spark_jobs import transforms
    from spark_jobs.layers import ensure_tables, read_dimension
    from spark_jobs.quality import rules as row_rules
    from spark_jobs.sources import bronze_columns
    from spark_jobs.stream import BatchSummary, IngestBatch
    from spark_jobs.tables import append_new, in_list, insert_new

    p = playback(None)
    steps: dict[str, float] = {}

    def timed(step: str, action: Callable[[], Any]) -> Any:
        started = time.monotonic()
        value = action()
        steps[step] = round(steps.get(step, 0.0) + time.monotonic() - started, 3)
        return value

    lines = spark.read.text(data.path)
    batch = bronze_columns(lines, value=F.col("value"), source=F.col("_metadata.file_path"),
                           position=F.monotonically_increasing_id()).persist()
    rules = row_rules.of(p.name)
    t = ensure_tables(spark, fresh_home(spec, f"{name}-steps"), p)
    parsed = timed("1 parse + row rules (cached)",
                   lambda: row_rules.with_rules(transforms.parse(batch, p), rules).persist())
    timed("1 parse + row rules (cached)", parsed.count)
    summary = timed("2 batch summary (one aggregate)", lambda: BatchSummary.of(parsed, p, rules))
    by_source = in_list("source", summary.sources)
    timed("3 bronze: anti-join + append", lambda: append_new(batch, t.bronze, transforms.BRONZE_KEY,
                                                             prune=by_source))
    timed("4 quarantine: anti-join + append", lambda: append_new(
        transforms.rejects(parsed), t.quarantine, transforms.BRONZE_KEY, prune=by_source))
    rows = timed("5 silver rows (local checkpoint)", lambda: transforms.silver(
        parsed, read_dimension(spark, t), p).localCheckpoint())
    timed("6 silver insert-only MERGE", lambda: insert_new(
        rows, t.silver, (p.key,), prune=in_list("event_date", summary.dates)))
    parsed.unpersist()
    whole = ensure_tables(spark, fresh_home(spec, f"{name}-whole"), p)
    timed("whole IngestBatch (as the stream runs it)", lambda: IngestBatch(p, whole)(batch, 0))
    timed("whole IngestBatch replayed (writes nothing new)", lambda: IngestBatch(p, whole)(batch, 0))
    alternative = fresh_home(spec, f"{name}-alt").root / "bronze_append"
    timed("alt: bronze idempotent append (txnAppId/txnVersion)",
          lambda: batch.write.format("delta").mode("append").partitionBy("ingest_date")
          .option("txnAppId", "bench-bronze").option("txnVersion", 0).save(str(alternative)))
    timed("alt: the same append replayed (skipped by Delta)",
          lambda: batch.write.format("delta").mode("append").partitionBy("ingest_date")
          .option("txnAppId", "bench-bronze").option("txnVersion", 0).save(str(alternative)))
    replayed_rows = spark.read.format("delta").load(str(alternative)).count()
    whole_rows = {layer: spark.read.format("delta").load(str(path)).count()
                  for layer, path in (("bronze", whole.bronze), ("silver", whole.silver))}
    batch.unpersist()
    return {"steps_s": steps, "lines": data.lines, "alt_rows_after_replay": replayed_rows,
            "whole_rows_after_replay": whole_rows}


class LandingWriter(threading.Thread):
    """Writes playback events into a landing folder at a fixed rate, one small file every
    `interval_s`, and remembers when each event became visible there (the rename)."""

    def __init__(self, landing: Path, rate: float, interval_s: float = 0.25, seed: int = 7) -> None:
        super().__init__(name="landing-writer", daemon=True)
        self.landing, self.rate, self.interval_s = landing, rate, interval_s
        self.rng = random.Random(seed)
        self.written_at: dict[str, float] = {}
        self.stop_event = threading.Event()

    def events(self) -> Any:
        from spark_jobs.generator import session_events

        while True:
            now = dt.datetime.now(dt.UTC)
            yield from session_events(self.rng, now, 40, "lat")

    def run(self) -> None:
        from spark_jobs.generator import write_lines

        events, index, owed = self.events(), 0, 0.0
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            owed += self.rate * self.interval_s
            batch = [next(events) for _ in range(int(owed))]
            owed -= len(batch)
            if batch:
                write_lines(self.landing, f"lat-{index:06d}.jsonl",
                            [json.dumps(e, separators=(",", ":")) for e in batch])
                visible = time.time()
                for e in batch:
                    self.written_at[str(e["event_id"])] = visible
                index += 1
            next_at += self.interval_s
            self.stop_event.wait(max(0.0, next_at - time.monotonic()))


def latency_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    from spark_jobs.layers import ensure_tables
    from spark_jobs.stream import start_query

    rate = float(spec.params["rate"])
    duration_s, settle_s = float(spec.params["duration_s"]), float(spec.params["settle_s"])
    p = playback(None, trigger=spec.params.get("trigger", "1 second"))
    home = fresh_home(spec, name)
    tables = ensure_tables(spark, home, p)
    writer = LandingWriter(home.landing(PIPELINE), rate)
    query = start_query(spark, p, home, tables, "ingest", once=False)
    try:
        # Steady state only: the query's first batch (code generation, first MERGEs) is not latency.
        from spark_jobs.generator import write_lines

        first = list(itertools.islice(writer.events(), 10))
        write_lines(home.landing(PIPELINE), "lat-warmup.jsonl", [json.dumps(e) for e in first])
        query.processAllAvailable()
        writer.start()
        measured_from = time.time() + settle_s
        time.sleep(settle_s + duration_s)
        writer.stop_event.set()
        writer.join()
        query.processAllAvailable()
    finally:
        query.stop()
    visible_by_file = delta_log.visible_at_by_file(tables.silver)
    rows = (spark.read.format("delta").load(str(tables.silver))
            .select("event_id", "_metadata.file_path").collect())
    latencies = sorted(
        visible_by_file[Path(r[1]).name] - writer.written_at[r[0]]
        for r in rows
        if r[0] in writer.written_at and writer.written_at[r[0]] >= measured_from
        and Path(r[1]).name in visible_by_file)
    written = sum(1 for t in writer.written_at.values() if t >= measured_from)
    span = progress_span(query)
    return {"rate": rate, "events_measured": len(latencies), "events_written": written,
            "p50_s": quantile(latencies, 0.50), "p90_s": quantile(latencies, 0.90),
            "p99_s": quantile(latencies, 0.99), "max_s": latencies[-1] if latencies else None,
            "latencies_s": [round(x, 3) for x in latencies],
            "batches": span["batches"], "batch_s": span.get("batch_s", [])}


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile of sorted `values` (nearest rank), or None when there are none."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, round(q * len(values) + 0.5) - 1))]


WORKLOADS: dict[str, Callable[[SparkSession, Spec, Dataset, str], Result]] = {
    "ceiling": ceiling_once,
    "ceiling_transforms": ceiling_transforms_once,
    "bare": bare_once,
    "platform_silver": platform_silver_once,
    "platform_gold": platform_gold_once,
    "latency": latency_once,
    "backfill": backfill_once,
    "ingest_profile": ingest_profile_once,
}


def measure(spark: SparkSession, spec: Spec) -> Result:
    """Warm up, then run the workload `repeats` times; the headline is the median run."""
    workload = WORKLOADS[spec.workload]
    if spec.warmup is not None:
        started = time.monotonic()
        workload(spark, spec, spec.warmup, f"{spec.label}-warmup")
        log.info("%s: warm-up done in %.1fs", spec.label, time.monotonic() - started)
    runs = []
    for attempt in range(spec.repeats):
        started = time.monotonic()
        runs.append(workload(spark, spec, spec.dataset, f"{spec.label}-{attempt}"))
        log.info("%s: run %d/%d in %.1fs", spec.label, attempt + 1, spec.repeats,
                 time.monotonic() - started)
    out: Result = {"label": spec.label, "workload": spec.workload, "dataset": spec.dataset.name,
                   "lines": spec.dataset.lines, "files_per_trigger": spec.files_per_trigger,
                   "runs": runs}
    if "seconds" in runs[0]:
        seconds = statistics.median(r["seconds"] for r in runs)
        out["seconds"] = seconds
        out["events_per_s"] = spec.dataset.lines / seconds
        spans = [r["span_s"] for r in runs if r.get("span_s")]
        if spans:
            out["sustained_events_per_s"] = spec.dataset.lines / statistics.median(spans)
    else:
        out.update({k: v for k, v in runs[0].items() if k != "latencies_s"})
    return out


def memory(spark: SparkSession) -> Result:
    """Peak driver memory so far: the JVM's peak RSS (the driver is the executor in local mode),
    the sum of its heap pools' peaks (an upper bound of the peak heap), and Python's peak RSS."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    peak_rss_kb = None
    status = Path(f"/proc/{pid}/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak_rss_kb = int(line.split()[1])
    heap_peak = 0
    management = jvm.java.lang.management.ManagementFactory
    for pool in management.getMemoryPoolMXBeans():
        if str(pool.getType().toString()) == "Heap memory":
            heap_peak += int(pool.getPeakUsage().getUsed())
    heap_max = int(management.getMemoryMXBean().getHeapMemoryUsage().getMax())
    return {"jvm_peak_rss_mb": round(peak_rss_kb / 1024, 1) if peak_rss_kb else None,
            "jvm_heap_pools_peak_mb": round(heap_peak / 2**20, 1),
            "jvm_heap_max_mb": round(heap_max / 2**20, 1),
            "python_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workloads", description=__doc__)
    parser.add_argument("specs", type=Path, help="JSON: {master, specs: [Spec, ...]}")
    parser.add_argument("out", type=Path, help="where to write the results (JSON)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from spark_jobs.session import build_session

    request = json.loads(args.specs.read_text())
    master = request["master"]
    conf = {**SESSION_CONF, "spark.sql.shuffle.partitions": str(playback(None).shuffle_partitions)}
    started = time.monotonic()
    spark = build_session(f"weir-bench-{os.getpid()}", master=master, conf=conf)
    startup_s = time.monotonic() - started
    results: list[Result] = []
    try:
        for raw in request["specs"]:
            spec = Spec.from_dict(raw)
            try:
                result = measure(spark, spec)
            except Exception as err:  # one failed workload must not hide the others' numbers
                log.exception("%s failed", spec.label)
                result = {"label": spec.label, "workload": spec.workload,
                          "error": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
            result.update(master=master, jvm_startup_s=startup_s, memory=memory(spark))
            results.append(result)
            args.out.write_text(json.dumps(results))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
