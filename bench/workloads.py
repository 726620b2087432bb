"""The measured runs. Each runs inside one worker process (`python -m bench.worker`), so JVM state
never leaks from one run into the next; rates count input lines ("events"), bad and duplicate
lines included: that is what every job has to read and parse.

- `ceiling`: batch read of the files + `from_json` with the playback schema, into `noop`;
- `ceiling_transforms`: batch read + the platform's own parse and silver transforms, into `noop`;
- `bare`: a hand-written Structured Streaming job, `readStream.text → from_json → Delta append`,
  with the platform driver's session settings (`availableNow` over a backlog);
- `floor`: the least a job with Weir's two layers does, hand-written: the bare job plus bronze (each
  line and its file), in micro-batches of the platform's byte bound; `ladder`: the steps from it to
  the platform's micro-batch, one feature at a time (`LADDER`);
- `bare_steady`: the same job on a processing-time trigger while the files arrive one by one;
- `platform`: `weir run playback --once` (its own driver process, the catalog's settings) on a
  backlog: landing → bronze/quarantine/silver, then gold; rates from its `stream_progress`;
- `platform_steady`: `weir run playback` while the files arrive one by one, stopped (SIGTERM)
  once silver holds every valid event;
- `latency`: `weir run playback` (every query) on a 1 s trigger while small files arrive at a
  fixed rate; each line's time from landing to silver (`DeployedDriver`);
- `backfill`, `ingest_profile`, `silver_growth`: the platform's back-fill and micro-batch
  in-process;
- `bare_latency`: the bare job's latency at the same rate and trigger as `latency`.

Streaming rates are sustained: lines over the span from the first micro-batch's start to the
end of the last one that wrote the target table (driver start-up excluded; its wall time is
reported beside). Every streaming run checks its output: count == distinct == expected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import logging
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import delta_log, jvm_profile
from bench.datasets import Dataset, link_into
from bench.report import LATENCY_SAMPLE
from spark_jobs import catalog
from spark_jobs.catalog import FileSource, Pipeline
from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.tables import delta_version
from spark_jobs.topology import query_name

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)
PIPELINE = "playback"
KAFKA_PIPELINE = "playback_kafka"      # the same contract and transforms, reading a Kafka topic
MASTER = "local[2]"
# The latency run keeps this many of its measured latencies, at evenly spaced ranks (the plots'
# input): a run at volume measures about half a million.
LATENCY_SAMPLE_SIZE = 2001
Result = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Spec:
    """One measured run: which workload, on which data, where, how often, with what parameters
    (the JSON argument of `python -m bench.worker`)."""

    workload: str
    label: str
    dataset: Dataset
    workdir: str
    repeats: int = 1
    timeout_s: float = 1800.0
    params: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Spec:
        data = json.loads(text)
        return cls(**{**data, "dataset": Dataset.from_dict(data["dataset"])})


def playback(trigger: str | None = None) -> Pipeline:
    """The catalog's playback entry as a deployed driver runs it (and a trigger, when given)."""
    p = catalog.load(PIPELINE)
    return dataclasses.replace(p, trigger_interval=trigger) if trigger else p


def session_conf() -> dict[str, str]:
    """What `stream.run` adds to `build_session`'s settings: the in-process runs use exactly the
    settings of a `weir run` driver, so the bare job and the platform differ only in their code."""
    from spark_jobs.stream import driver_conf

    return {**driver_conf(playback()),
            # Only how many progress entries the query keeps for us to read: no effect on speed.
            "spark.sql.streaming.numRecentProgressUpdates": "1000"}


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


@dataclasses.dataclass(frozen=True)
class Batch:
    """One micro-batch of a query as its progress reports it (wall-clock seconds)."""

    started: float
    ended: float
    rows: int
    durations_ms: dict[str, int]


def batches_of(progress: list[dict[str, Any]]) -> list[Batch]:
    """The batches with input of a query, from `StreamingQuery.recentProgress` entries."""
    out = []
    for p in progress:
        if int(p["numInputRows"]) == 0:
            continue
        started = dt.datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00")).timestamp()
        durations = {k: int(v) for k, v in (p.get("durationMs") or {}).items()}
        out.append(Batch(started, started + durations.get("triggerExecution", 0) / 1000.0,
                         int(p["numInputRows"]), durations))
    return out


def span_of(batches: list[Batch], lines: int) -> Result:
    """Sustained rate of a run: `lines` over the first batch's start → the last batch's end."""
    if not batches:
        return {"batches": 0, "span_s": None, "events_per_s": None}
    first, last = min(b.started for b in batches), max(b.ended for b in batches)
    span = last - first
    # the span's ends as epoch seconds: the harness's CPU timeline is cut to them (`report.cpu_in_span`)
    return {"batches": len(batches), "span_s": round(span, 3), "events_per_s": lines / span,
            "batch_s": [round(b.ended - b.started, 3) for b in batches],
            "span_from_epoch": round(first, 3), "span_to_epoch": round(last, 3)}


def time_split(batches: list[Batch]) -> dict[str, int]:
    """Where the batches' time went, summed over batches (Spark's durationMs keys)."""
    out: dict[str, int] = {}
    for b in batches:
        for key, ms in b.durations_ms.items():
            out[key] = out.get(key, 0) + ms
    return out


def timeline(table: Path, since: float) -> list[list[float]]:
    """(seconds since `since`, rows committed so far) per commit of `table`: throughput over time."""
    total, points = 0, []
    for c in delta_log.commits(table):
        if c.rows_added and c.visible_at >= since:
            total += c.rows_added
            points.append([round(c.visible_at - since, 3), total])
    return points


def rows_committed(table: Path) -> int:
    """Rows added to `table` over its commits (the bench's tables only ever append)."""
    return sum(c.rows_added for c in delta_log.commits(table))


def exactly_once(table: Path, key: str | None, expected: int) -> Result:
    """count, distinct `key` and the expected count of `table`, read with delta-rs (no JVM)."""
    from spark_jobs.control.platform_tables import identifier, query

    distinct_of = f"count(DISTINCT {identifier(key)})" if key is not None else "count(*)"
    counted = query(table, f'SELECT count(*) AS "count", {distinct_of} AS "distinct" FROM t')
    count, distinct = (counted[0]["count"], counted[0]["distinct"]) if counted else (0, 0)
    return {"count": count, "distinct": distinct, "expected": expected,
            "exactly_once": count == distinct == expected}


def run_stream(query: StreamingQuery) -> None:
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{query.name} failed: {query.exception()}")


class FileFeeder(threading.Thread):
    """Timed arrival: hard-links `files` into a landing folder one by one, every `interval_s` (a
    hard link appears complete at once, as a rename does), remembering when each arrived."""

    def __init__(self, files: list[Path], landing: Path, interval_s: float) -> None:
        super().__init__(name="file-feeder", daemon=True)
        self.files = files
        self.landing, self.interval_s = landing, interval_s
        self.arrived: list[float] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        self.landing.mkdir(parents=True, exist_ok=True)
        next_at = time.monotonic()
        for source in self.files:
            if self.stop_event.wait(max(0.0, next_at - time.monotonic())):
                return
            os.link(source, self.landing / source.name)
            self.arrived.append(time.time())
            next_at += self.interval_s

    @classmethod
    def of(cls, data: Dataset, landing: Path, interval_s: float) -> FileFeeder:
        """Steady arrival of the dataset's files."""
        return cls(sorted(Path(data.path).iterdir()), landing, interval_s)


def wait_until(what: str, done: Callable[[], bool], timeout_s: float, alive: Callable[[], bool]) -> None:
    """Poll `done` every second until it holds; fail when `alive` stops holding or on timeout."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if not alive():
            raise RuntimeError(f"the job ended before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not reached within {timeout_s:.0f}s")
        time.sleep(1.0)


def steady_result(feeder: FileFeeder, table: Path, lines: int, batches: list[Batch]) -> Result:
    """Steady-arrival numbers: the feed rate, and how the job kept up with it (its commits)."""
    commits = [c.visible_at for c in delta_log.commits(table) if c.rows_added]
    first, last = feeder.arrived[0], feeder.arrived[-1]
    feed_s = max(last - first, 1e-9)
    return {"feed_events_per_s": lines / feed_s if len(feeder.arrived) > 1 else None,
            "files": len(feeder.arrived), "interval_s": feeder.interval_s,
            "events_per_s": lines / (commits[-1] - first),
            "lag_after_last_file_s": round(commits[-1] - last, 3),
            "batches": len(batches), "batch_s": [round(b.ended - b.started, 3) for b in batches],
            "time_split_ms": time_split(batches), "timeline": timeline(table, first)}


# --- in-process Spark runs: (spark, spec, data, home name) -> metrics of one run -------------------

def ceiling_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    from pyspark.sql import functions as F

    schema = bare_schema(playback())
    started = time.monotonic()
    (spark.read.text(data.path).select(F.from_json("value", schema).alias("e")).select("e.*")
     .write.format("noop").mode("overwrite").save())
    return {"seconds": time.monotonic() - started}


def ceiling_transforms_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    from pyspark.sql import functions as F

    from spark_jobs import transforms
    from spark_jobs.layers import ensure_tables, read_dimension
    from spark_jobs.sources import bronze_columns

    p = playback()
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


def bare_query(spark: SparkSession, landing: Path, root: Path, *, trigger: str | None) -> StreamingQuery:
    """The hand-written job: text files → `from_json` → Delta append, `availableNow` over what is
    there, or a processing-time `trigger`."""
    from pyspark.sql import functions as F

    parsed = (spark.readStream.format("text").load(str(landing))
              .select(F.from_json("value", bare_schema(playback())).alias("e")).select("e.*"))
    writer = (parsed.writeStream.format("delta").outputMode("append")
              .option("checkpointLocation", str(root / "checkpoint")).queryName("bare"))
    writer = writer.trigger(processingTime=trigger) if trigger else writer.trigger(availableNow=True)
    return writer.start(str(root / "events"))


def bare_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    home = fresh_home(spec, name)
    landing, root = home.landing(PIPELINE), home.root / "bare"
    link_into(data, landing)
    return bare_backlog(lambda: bare_query(spark, landing, root, trigger=None), root / "events", data)


def bare_backlog(start: Callable[[], StreamingQuery], table: Path, data: Dataset, *,
                 every_line: bool = True) -> Result:
    """Run a hand-written `availableNow` query (started by `start`, writing `table`) over a backlog
    of the dataset's lines: its rates, batches and time split, and with `every_line` its output
    checked (a row per input line)."""
    started_wall, started = time.time(), time.monotonic()
    query = start()
    run_stream(query)
    batches = batches_of(query.recentProgress)
    result = {"seconds": time.monotonic() - started, "wall_events_per_s":
              data.lines / (time.monotonic() - started), **span_of(batches, data.lines),
              "time_split_ms": time_split(batches), "timeline": timeline(table, started_wall)}
    return {**result, "rows": exactly_once(table, None, data.lines)} if every_line else result


# The steps from the two-layer floor to the platform's micro-batch, one feature at a time
# (`--only floor` is step 0, `--only ladder` the rest): each a hand-written `foreachBatch` over
# Spark's text source in micro-batches of the platform's byte bound, in a process of its own.
# Between the bare job and step 0 is the price of a second table and bounded batches; each step
# after it adds what its line says, and what is left between the last step and `platform` is the
# landing reader (lines with their positions) and the driver around the query.
LADDER = (
    "floor: bronze (line, file) + silver by the bare job's from_json",
    "+ the contract's parse (typed fields, every reason) for silver",
    "+ the parsed batch cached, its summary first, the writes side by side",
    "+ quarantine",
    "+ silver deduped and enriched",
    "+ each write exactly once and fenced: the platform's IngestBatch",
)


def ladder_query(spark: SparkSession, landing: Path, home: WeirHome, step: int) -> StreamingQuery:
    """Step `step` of `LADDER` as a streaming query over `landing`, writing under `home`."""
    from pyspark.sql import functions as F

    from spark_jobs import transforms
    from spark_jobs.concurrently import run_concurrently
    from spark_jobs.layers import ensure_tables, read_dimension
    from spark_jobs.quality import rules
    from spark_jobs.sources import bronze_columns
    from spark_jobs.stream import BatchSummary, IngestBatch

    p, root = playback(), home.root / "ladder"
    tables = ensure_tables(spark, home, p) if step >= 4 else None
    schema = bare_schema(p)

    def append(df: DataFrame, table: str) -> None:
        df.write.format("delta").mode("append").save(str(root / table))

    def write(batch: DataFrame, batch_id: int) -> None:
        if step == 0:
            append(batch.select("value", "source", F.current_timestamp().alias("ingest_time")), "bronze")
            append(batch.select(F.from_json("value", schema).alias("e")).select("e.*"), "events")
            return
        lines = bronze_columns(batch, value=F.col("value"), source=F.col("source"),
                               position=F.monotonically_increasing_id())
        if step == len(LADDER) - 1:
            IngestBatch(p, tables)(lines, batch_id)
            return
        parsed = rules.with_rules(transforms.parse(lines, p), p.row_rules)
        if step == 1:
            append(lines, "bronze")
            append(transforms.valid(parsed), "events")
            return
        parsed = parsed.persist()
        BatchSummary.of(parsed, p, p.row_rules)
        silver = (transforms.silver(parsed, read_dimension(spark, tables), p) if step >= 4
                  else transforms.valid(parsed))
        writes = {"bronze": lambda: append(transforms.bronze_rows(parsed, p), "bronze"),
                  "silver": lambda: append(silver, "events")}
        if step >= 3:
            writes["quarantine"] = lambda: append(transforms.rejects(parsed), "quarantine")
        run_concurrently(writes, what=f"ladder step {step}", spark=spark)
        parsed.unpersist()

    source = p.source
    assert isinstance(source, FileSource)
    return (spark.readStream.format("text").option("maxBytesPerTrigger", str(source.max_bytes_per_trigger))
            .load(str(landing)).select("value", F.col("_metadata.file_path").alias("source"))
            .writeStream.foreachBatch(write).option("checkpointLocation", str(root / "checkpoint"))
            .queryName(f"ladder_{step}").trigger(availableNow=True).start())


def ladder_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    """One step of `LADDER` over the dataset as a backlog. Bronze is checked at every step (every
    line once); silver only where it is meant to be exact (the bare parse keeps every line, the
    last step every valid event once)."""
    step = int(spec.params.get("step", 0))
    home = fresh_home(spec, name)
    landing = home.landing(PIPELINE)
    link_into(data, landing)
    t = PipelineTables.of(home, playback())
    bronze, silver = (t.bronze, t.silver) if step == len(LADDER) - 1 else \
        (home.root / "ladder" / "bronze", home.root / "ladder" / "events")
    result = bare_backlog(lambda: ladder_query(spark, landing, home, step), silver, data,
                          every_line=step == 0)
    checked = {"silver": exactly_once(silver, "event_id", data.valid_events)} \
        if step == len(LADDER) - 1 else {}
    return {**result, "step": step, "what": LADDER[step],
            "bronze": exactly_once(bronze, None, data.lines), **checked}


def bare_steady_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    """The bare job on the platform's trigger interval while the files arrive every `interval_s`."""
    home = fresh_home(spec, name)
    landing, root = home.landing(PIPELINE), home.root / "bare"
    landing.mkdir(parents=True)
    query = bare_query(spark, landing, root, trigger=playback().trigger_interval)
    feeder = FileFeeder.of(data, landing, float(spec.params["interval_s"]))
    try:
        feeder.start()
        wait_until("every line in the bare table", lambda: rows_committed(root / "events") >= data.lines,
                   spec.timeout_s, lambda: query.isActive)
        feeder.join()
    finally:
        feeder.stop_event.set()
        query.stop()
    return {**steady_result(feeder, root / "events", data.lines, batches_of(query.recentProgress)),
            "rows": exactly_once(root / "events", None, data.lines)}


def bare_kafka_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    """The hand-written Kafka job over the dataset's lines already on the broker:
    `readStream.format("kafka") → from_json → Delta append`, `availableNow`, as many offsets per
    micro-batch as the platform's catalog entry takes."""
    from pyspark.sql import functions as F

    root = fresh_home(spec, name).root / "bare"
    parsed = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", str(spec.params["bootstrap"]))
              .option("subscribe", str(spec.params["topic"]))
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(spec.params["max_offsets"])).load()
              .select(F.from_json(F.col("value").cast("string"), bare_schema(playback())).alias("e"))
              .select("e.*"))
    writer = (parsed.writeStream.format("delta").outputMode("append").trigger(availableNow=True)
              .option("checkpointLocation", str(root / "checkpoint")).queryName("bare_kafka"))
    return {**bare_backlog(lambda: writer.start(str(root / "events")), root / "events", data),
            "max_offsets_per_trigger": spec.params["max_offsets"]}


def backfill_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    """A back-fill of the dataset's day after the stream ingested it, silver and gold deleted as if
    they had to be re-derived; then again (nothing to change). With `history_days`, bronze, silver
    and quarantine then grow to each of those numbers of days by copies of the day under earlier dates
    (`DayCopies`), and each size gets a home of its own: every table shallow-cloned as of that
    size (the files stay where they are; a clone's writes go to its own folder). The homes are
    left for `backfill_at_size_once`, which the harness runs in a fresh process per size and turn
    (`bench.run`); `sizes` names them."""
    from spark_jobs.layers import ensure_tables
    from spark_jobs.stream import start_query

    p = playback()
    home = fresh_home(spec, name)
    tables = ensure_tables(spark, home, p)
    link_into(data, home.landing(PIPELINE))
    run_stream(start_query(spark, p, home, tables, "ingest", once=True))
    day_versions = {layer: delta_version(getattr(tables, layer))
                    for layer in ("bronze", "silver", "quarantine")}
    assert day_versions["silver"] is not None, "the stream wrote no silver"
    day = dt.date.fromisoformat(data.day)
    delete_day(spark, tables, day, whole=True)
    result = timed_backfills(spark, home, day)
    copies = DayCopies(spark, p, day, tables.silver, day_versions["silver"],
                       bronze=(tables.bronze, day_versions["bronze"]),
                       quarantine=(tables.quarantine, day_versions["quarantine"]))
    sizes = []
    for days in spec.params.get("history_days", []):
        copies.to_days(days)
        at = cloned(spark, home, fresh_home(spec, f"{name}-{copies.days}d"))
        sizes.append({"days": copies.days, "bronze_rows": copies.bronze_rows, "silver_rows": copies.rows,
                      "home": str(at.root)})
    return {**result, "sizes": sizes}


def backfill_at_size_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    """One turn of a size of history (`backfill_once`'s home `home`) in a fresh process: the day
    back-filled once to warm the JVM (nothing to change: `cold_seconds`, what a `weir backfill` of
    it costs in a process of its own), then its silver and gold rows deleted, the day back-filled,
    and back-filled again (nothing to change). A process per turn: one worker running every size's
    back-fills over three homes' tables ran out of its 1 GB heap late in the run, and its silver
    step slowed with its age; the warm-up, because a fresh JVM's first back-fill took 133 s where
    the same one warm took 78 s (2026-12-03), a constant that would flatten the sizes' ratio.
    `cold_changed` says whether the warm-up changed any layer: a history whose copies derive to
    what they hold changes none."""
    from spark_jobs.backfill import backfill

    at = WeirHome(Path(spec.params["home"]))
    day = dt.date.fromisoformat(data.day)
    started = time.monotonic()
    warm = backfill(spark, playback(), day, day, at)
    cold_seconds = round(time.monotonic() - started, 3)
    delete_day(spark, PipelineTables.of(at, playback()), day)
    return {**timed_backfills(spark, at, day), "cold_seconds": cold_seconds,
            "cold_changed": warm.silver_replaced or warm.quarantine_replaced or warm.gold_replaced}


def delete_day(spark: SparkSession, at: PipelineTables, day: dt.date, whole: bool = False) -> None:
    """Silver's and gold's rows of `day`, as if they had to be re-derived (every row: whole)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    for path in (at.silver, at.gold):
        table = DeltaTable.forPath(spark, str(path))
        table.delete() if whole else table.delete(F.col("event_date") == F.lit(day))


def timed_backfills(spark: SparkSession, at: WeirHome, day: dt.date) -> Result:
    """`day` back-filled in the home `at`, then again (nothing left to change): the first one's
    seconds, steps and lines read, the rerun's seconds and steps, and whether it changed silver or
    gold."""
    from spark_jobs.backfill import backfill

    started = time.monotonic()
    first = backfill(spark, playback(), day, day, at)
    seconds = time.monotonic() - started
    again = backfill(spark, playback(), day, day, at)
    return {"seconds": round(seconds, 3), "rerun_seconds": round(time.monotonic() - started - seconds, 3),
            "lines_read": first.lines_read, "steps": first.seconds, "rerun_steps": again.seconds,
            "rerun_changed": again.silver_replaced or again.gold_replaced}


def cloned(spark: SparkSession, home: WeirHome, into: WeirHome) -> WeirHome:
    """`into` holding a shallow clone of each of `home`'s tables at its latest version, and a copy
    of its checkpoints and control files."""
    for log in sorted(home.root.glob("tables/*/*/_delta_log")):
        table = log.parent
        spark.sql(f"CREATE TABLE delta.`{into.root / table.relative_to(home.root)}` SHALLOW CLONE "
                  f"delta.`{table}` VERSION AS OF {delta_version(table)}")
    for folder in ("checkpoints", "control"):
        if (home.root / folder).is_dir():
            shutil.copytree(home.root / folder, into.root / folder)
    return into


def history_point(point: dict[str, Any]) -> Result:
    """A size's back-fill timings over its turns: each run's, and their means (the step times
    too), whose first and rerun `seconds` the report and the goal read."""
    runs = point["runs"]

    def mean_steps(field: str) -> dict[str, float]:
        return {step: round(statistics.fmean(r[field].get(step, 0.0) for r in runs), 3)
                for step in runs[0][field]}

    def mean(field: str) -> float | None:
        values = [r[field] for r in runs if r.get(field) is not None]
        return round(statistics.fmean(values), 3) if values else None

    return {**point, "seconds": mean("seconds"), "rerun_seconds": mean("rerun_seconds"),
            "cold_seconds": mean("cold_seconds"),
            "lines_read": runs[0]["lines_read"], "steps": mean_steps("steps"),
            "rerun_steps": mean_steps("rerun_steps"),
            "rerun_changed": any(r["rerun_changed"] for r in runs),
            "cold_changed": any(r.get("cold_changed") for r in runs)}


class DayCopies:
    """Days of history in seconds: silver (and with `bronze`, bronze) grown by copies of one day
    under earlier dates, appended directly. Each copy is of the table as of the version where it
    held only that day; copy k has its event ids and session ids suffixed `~k` (so the session
    table grows with the copies too), its event times k days earlier, its lines' identity
    (source) suffixed `#copy-k`, and it is ingested on its own day, right after its last event
    (see `__init__`). A bronze copy's lines are rewritten to match:
    parsed, they derive exactly silver's copy. With `quarantine`, the copy's refused lines are
    parsed and their quarantine rows appended too, as the stream would have written them (without
    them, a back-fill that read a copy's lines wrote its quarantine rows: timed as its own work).
    The key hash is left to Delta, which generates it from the new key. `rows` is silver's size,
    `bronze_rows` bronze's, `days` how many days each holds."""

    def __init__(self, spark: SparkSession, pipeline: Pipeline, day: dt.date, silver: Path,
                 silver_version: int, *, bronze: tuple[Path, int | None] | None = None,
                 quarantine: tuple[Path, int | None] | None = None) -> None:
        from pyspark.sql import functions as F

        from spark_jobs.transforms import KEY_HASH

        def as_of(path: Path, version: int | None) -> DataFrame:
            return spark.read.format("delta").option("versionAsOf", version).load(str(path))

        self.pipeline, self.day, self.days, self.silver = pipeline, day, 1, silver
        self.silver_day = as_of(silver, silver_version).drop(KEY_HASH)
        self.day_rows = self.silver_day.count()
        self.rows = spark.read.format("delta").load(str(silver)).count()
        self.bronze = bronze[0] if bronze else None
        self.bronze_day = as_of(*bronze) if bronze else None
        self.bronze_day_rows = self.bronze_day.count() if self.bronze_day is not None else 0
        self.bronze_rows = (spark.read.format("delta").load(str(self.bronze)).count()
                            if self.bronze else 0)
        # quarantine's path, and the day's refused lines as bronze holds them (a copy parses only
        # these again)
        self.quarantine = ((quarantine[0], self.bronze_day.join(
            as_of(*quarantine).select("source", "position"), ["source", "position"], "left_semi")
            .localCheckpoint()) if quarantine and self.bronze_day is not None else None)
        # The day was ingested weeks after its events, at whatever hour the run began. A copy k
        # days earlier keeps its lines' ingest order, moved to begin a second after its own last
        # event: ingested hours before some of its events, those would stand further ahead of
        # their ingest time than the contract allows, and a back-fill of the copy's date would
        # move them to quarantine (`Pipeline.max_event_time_ahead`).
        first_ingest = (self.bronze_day.agg(F.min("ingest_time")) if self.bronze_day is not None
                        else self.silver_day.agg(F.min("_ingest_time"))).first()[0]
        last_event = self.silver_day.agg(F.max(pipeline.event_time)).first()[0]
        self.after_last_event_us = (last_event - first_ingest) // dt.timedelta(microseconds=1) + 1_000_000

    def to(self, target: int) -> int:
        """Append copies until silver holds at least `target` rows; its size then."""
        while self.rows < target:
            self._copy()
        return self.rows

    def to_days(self, days: int) -> None:
        """Append copies until each table holds `days` days."""
        while self.days < days:
            self._copy()

    def _copy(self) -> None:
        from pyspark.sql import functions as F

        p, k = self.pipeline, self.days
        copy_day = (self.day - dt.timedelta(days=k)).isoformat()
        shift_us = self.after_last_event_us - k * 86_400_000_000

        def ingested_on_copy_day(ingest_time: str) -> Column:
            return F.timestamp_micros(F.unix_micros(ingest_time) + F.lit(shift_us))

        lineage = F.lit(f"#copy-{k}")
        # the copy's events and its sessions are its own: the keys of both suffixed
        keys = tuple(dict.fromkeys((p.key, *([p.sessions.key] if p.sessions else []))))
        silver = {**{key: F.concat(F.col(key), F.lit(f"~{k}")) for key in keys},
                  p.event_time: F.col(p.event_time) - F.expr(f"INTERVAL {k} DAYS"),
                  "event_date": F.date_sub("event_date", k),
                  "_source": F.concat("_source", lineage),
                  "_ingest_time": ingested_on_copy_day("_ingest_time")}
        append(self.silver_day, silver, self.silver)
        self.rows += self.day_rows
        if self.bronze_day is not None and self.bronze is not None:
            line = F.col("value")
            for key in keys:
                line = F.regexp_replace(line, f'"{key}":"([^"]*)"', f'"{key}":"$1~{k}"')
            line = F.regexp_replace(line, f'"{p.event_time}":"{self.day.isoformat()}T',
                                    f'"{p.event_time}":"{copy_day}T')
            # Ingested on its own day, as a stream's history is: the dataset's day was ingested
            # today, weeks later, so its lines without a usable event time are filed under today
            # (`transforms.event_date_hint`), and each of its files' hints spans the weeks between.
            # Shifted k days, every copy's files would span the day too, and a back-fill of it read
            # them all (measured: 10 of 10 files at 10 days).
            on_its_day = F.to_date(ingested_on_copy_day("ingest_time"))
            by_ingest = F.col("event_date_hint") == F.col("ingest_date")
            bronze = {"value": line, "source": F.concat("source", lineage),
                      "ingest_time": ingested_on_copy_day("ingest_time"),
                      "ingest_date": on_its_day,
                      "event_date_hint": F.when(by_ingest, on_its_day)
                      .otherwise(F.date_sub("event_date_hint", k))}
            append(self.bronze_day, bronze, self.bronze)
            self.bronze_rows += self.bronze_day_rows
            if self.quarantine is not None:
                from spark_jobs import transforms

                path, refused_day = self.quarantine
                refused = refused_day.select(*[bronze.get(c, F.col(c)).alias(c) for c in refused_day.columns])
                (transforms.rejects(transforms.parse(refused, p))
                 .write.format("delta").mode("append").save(str(path)))
        self.days += 1


def append(rows: DataFrame, replaced: dict[str, Column], path: Path) -> None:
    """`rows` with some columns replaced, appended to the Delta table at `path`."""
    from pyspark.sql import functions as F

    (rows.select(*[replaced.get(c, F.col(c)).alias(c) for c in rows.columns])
     .write.format("delta").mode("append").save(str(path)))


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
    from spark_jobs.tables import insert_absent, key_ranges
    from spark_jobs.timing import StepTimes

    p = playback()
    steps = StepTimes()
    timed = steps.time

    files = one_batch_of_files(data, p)
    lines = spark.read.text([str(f) for f in files])
    batch = bronze_columns(lines, value=F.col("value"), source=F.col("_metadata.file_path"),
                           position=F.monotonically_increasing_id()).persist()
    rules = p.row_rules
    t = ensure_tables(spark, fresh_home(spec, f"{name}-steps"), p)
    parsed = timed("1 parse + row rules (cached)",
                   lambda: row_rules.with_rules(transforms.parse(batch, p), rules).persist())
    timed("1 parse + row rules (cached)", parsed.count)
    summary = timed("2 batch summary (one aggregate)", lambda: BatchSummary.of(parsed, p, rules))
    by_source = key_ranges("source", "position", summary.positions)   # as the stream prunes
    timed("3 bronze: key read + append", lambda: insert_absent(
        transforms.bronze_rows(parsed, p), t.bronze, transforms.BRONZE_KEY, prune=by_source))
    timed("4 quarantine: key read + append", lambda: insert_absent(
        transforms.rejects(parsed), t.quarantine, transforms.BRONZE_KEY, prune=by_source))
    timed("5 silver: dedupe, key read + append", lambda: insert_absent(
        transforms.silver(parsed, read_dimension(spark, t), p), t.silver, (p.key,),
        keys=transforms.valid(parsed).select(p.key)))
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
    return {"steps_s": steps.rounded(3), "lines": whole_rows["bronze"], "files": len(files),
            "alt_rows_after_replay": replayed_rows, "whole_rows_after_replay": whole_rows}


def silver_growth_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    """What one ingest micro-batch costs as silver grows (issue 11: it must not grow with silver).

    Silver starts as the stream leaves it after the dataset's day. It then grows to each of
    `silver_rows` by copies of that day under earlier dates, with other event ids, appended
    directly: what weeks of a stream leave, in seconds. Each size gets tables of its own: bronze
    and quarantine as the day left them, silver at the version of that size, each a shallow clone
    (the files stay where they are; the clone's writes go to its own folder). Then `IngestBatch`
    (the stream's own foreachBatch) is timed five times on a small batch (the first file: a
    running stream's batch) and twice on a large one (the files of one byte bound: a backlog's) at
    every size, **the sizes taking turns**: the JVM's age and the machine's drift fall on every
    size alike, where measuring the sizes one after the other charged them to the largest. Before
    them, one small batch per size, smallest first, reads the key hashes of the silver files the
    driver has not seen yet (a driver's first batch; recorded as `first`, not in the medians). Each
    batch is of lines new to every table (the files' lines under another source name, with other
    event ids). The batch's step times are those of its log line."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from spark_jobs.layers import ensure_tables
    from spark_jobs.sources import bronze_columns
    from spark_jobs.stream import IngestBatch, start_query

    p = playback()
    home = fresh_home(spec, name)
    t = ensure_tables(spark, home, p)
    link_into(data, home.landing(PIPELINE))
    run_stream(start_query(spark, p, home, t, "ingest", once=True))
    day_version = delta_version(t.silver)
    assert day_version is not None, "the stream wrote no silver"
    steps = BatchSteps()
    runs = itertools.count()
    large = one_batch_of_files(data, p)
    batches = {"small": large[:1], "large": large}    # the first file, then the files of one bound

    def new_lines(paths: list[Path]) -> DataFrame:
        run = next(runs)
        lines = spark.read.text([str(f) for f in paths])
        value = F.regexp_replace("value", f'"{p.key}":"', f'"{p.key}":"growth{run}-')
        return bronze_columns(lines, value=value,
                              source=F.concat(F.col("_metadata.file_path"), F.lit(f"#growth{run}")),
                              position=F.monotonically_increasing_id())

    def timed_batch(ingest: IngestBatch, kind: str) -> Result:
        batch = new_lines(batches[kind]).persist()
        lines = batch.count()
        with steps.recorded() as record:
            gc_before, started = gc_seconds(spark), time.monotonic()
            ingest(batch, next(runs))
            seconds, gc = time.monotonic() - started, gc_seconds(spark) - gc_before
        batch.unpersist()
        assert record, "IngestBatch logged no line for its batch: its step times are read from it"
        return {"lines": lines, "seconds": round(seconds, 3), "gc_s": round(gc, 3), **record}

    timed_batch(IngestBatch(p, t), "small")   # the JVM's first batches compile what every later one runs
    copies = DayCopies(spark, p, dt.date.fromisoformat(data.day), t.silver, day_version)
    day_versions = {layer: delta_version(getattr(t, layer)) for layer in ("bronze", "quarantine")}
    sized: list[tuple[int, IngestBatch]] = []
    for target in spec.params["silver_rows"]:
        rows = copies.to(target)
        own = fresh_home(spec, f"{name}-{rows}").root / "tables"
        # gold and the sessions too, for the rebuild at the end (empty: the stream ran the ingest only)
        versions = {**day_versions, "silver": delta_version(t.silver),
                    "gold": delta_version(t.gold), "sessions": delta_version(t.sessions)}
        for layer, version in versions.items():
            spark.sql(f"CREATE TABLE delta.`{own / layer}` SHALLOW CLONE "
                      f"delta.`{getattr(t, layer)}` VERSION AS OF {version}")
        clone = dataclasses.replace(t, **{layer: own / layer for layer in versions})
        sized.append((rows, IngestBatch(p, clone)))

    points = [{"silver_rows": rows, "silver_files":
               DeltaTable.forPath(spark, str(ingest.tables.silver)).detail().first()["numFiles"],
               "small": [], "large": []} for rows, ingest in sized]
    turns = list(zip(points, sized, strict=True))
    # The first batch at a size reads the key hashes of the silver files its driver has not seen
    # (`InsertAbsent`, `KeyHashes`): a driver's first batch, once per start, kept apart from the
    # steady batches the goal is about.
    for point, (_, ingest) in turns:
        point["first"] = timed_batch(ingest, "small")
    for kind, times in (("small", 5), ("large", 2)):    # the small batch, the noisier one, more often
        for round_ in range(times):
            # smallest first, then largest first: a drift within a round favours no size
            for point, (_, ingest) in turns if round_ % 2 == 0 else reversed(turns):
                point[kind].append(timed_batch(ingest, kind))
    for point, (rows, ingest) in turns:
        point["rebuild"] = timed_rebuild(spark, p, fresh_home(spec, f"{name}-{rows}-rebuild"), ingest.tables)
    for point in points:
        log.info("silver at %d rows: %s; gold and the sessions rebuilt from it: %s", point["silver_rows"],
                 {k: [r["seconds"] for r in point[k]] for k in ("small", "large")}, point["rebuild"])
    heap_mb = spark._jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**20  # type: ignore[union-attr]
    return {"day_rows": copies.day_rows, "order": "interleaved", "points": points,
            "driver_heap_mb": round(heap_mb)}


def gc_seconds(spark: SparkSession) -> float:
    """The driver JVM's time in garbage collection so far (local mode: the executors' too)."""
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()  # type: ignore[union-attr]
    return sum(max(0, bean.getCollectionTime()) for bean in beans) / 1000


def timed_rebuild(spark: SparkSession, pipeline: Pipeline, home: WeirHome, tables: PipelineTables) -> Result:
    """Gold and the session table rebuilt from the whole of silver, as a driver does before their
    queries start on fresh checkpoints (`backfill.rebuild_from_silver`: a reset, a rewind, a
    refresh), in this session with the driver's settings: its time, and the heap it took. The heap
    taken is the old generation's peak since the rebuild started: what outlived the young
    collections (the young pools fill to their size whatever a job holds). A rebuild whose memory
    is bounded shows about the same peak at every size of silver, under the JVM's fixed maximum."""
    from spark_jobs.backfill import rebuild_from_silver

    factory = spark._jvm.java.lang.management.ManagementFactory  # type: ignore[union-attr]
    old_generation = [pool for pool in factory.getMemoryPoolMXBeans()
                      if pool.getType().name() == "HEAP" and "Old" in pool.getName()]
    rows = spark.read.format("delta").load(str(tables.silver)).count()
    for pool in old_generation:
        pool.resetPeakUsage()
    gc_before, started = gc_seconds(spark), time.monotonic()
    rebuilt = rebuild_from_silver(spark, pipeline, home, tables)
    seconds, gc = time.monotonic() - started, gc_seconds(spark) - gc_before
    assert sorted(rebuilt) == ["gold", "sessions"], f"rebuilt {sorted(rebuilt)}, not gold and the sessions"
    return {"silver_rows": rows, "seconds": round(seconds, 3), "gc_s": round(gc, 3),
            "old_generation_peak_mb": round(sum(pool.getPeakUsage().getUsed()
                                                for pool in old_generation) / 2**20),
            "gold_rows": spark.read.format("delta").load(str(tables.gold)).count(),
            "session_rows": spark.read.format("delta").load(str(tables.sessions)).count()}


class BatchSteps(logging.Handler):
    """The step times and silver's files read of the `IngestBatch` runs inside `recorded()`, as
    their log line gives them (the stream's own account of a batch)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.last: Result = {}

    def emit(self, record: logging.LogRecord) -> None:
        from spark_jobs.timing import StepTimes

        args = record.args if isinstance(record.args, tuple) else ()
        timed = [a for a in args if isinstance(a, StepTimes)]
        if "ingest batch" in str(record.msg) and timed:
            match = re.search(r"silver's keys read from (\d+) file\(s\), key hashes from (\d+), "
                              r"(\d+) of them read", record.getMessage())
            self.last.update(steps_s=timed[0].rounded(3),
                             silver_files_read=int(match.group(1)) if match else None,
                             silver_files_hashed=int(match.group(2)) if match else None,
                             silver_hashes_read=int(match.group(3)) if match else None)

    @contextlib.contextmanager
    def recorded(self) -> Iterator[Result]:
        stream_log = logging.getLogger("spark_jobs.stream")
        self.last = {}
        stream_log.addHandler(self)
        level = stream_log.level
        stream_log.setLevel(logging.INFO)
        try:
            yield self.last
        finally:
            stream_log.removeHandler(self)
            stream_log.setLevel(level)


def one_batch_of_files(data: Dataset, pipeline: Pipeline) -> list[Path]:
    """The dataset's first whole files (in name order) within the byte bound of one micro-batch of
    the pipeline's files source, and at least one file. The profile times one such batch, as the
    stream runs it; the whole backlog in one batch is what the bound exists to prevent."""
    source = pipeline.source
    assert isinstance(source, catalog.FileSource), f"{pipeline.name} does not read files"
    bound = source.max_bytes_per_trigger
    chosen: list[Path] = []
    size = 0
    for path in sorted(Path(data.path).iterdir()):
        if path.name.startswith((".", "_")):
            continue
        if chosen and size + path.stat().st_size > bound:
            break
        chosen.append(path)
        size += path.stat().st_size
    return chosen


class LandingWriter:
    """Files of playback events at a fixed rate, one every `interval_s`, for a `FileFeeder` to
    bring into a landing folder; when each event became visible there is that of its file.

    The files are written beforehand (`prepare`), beside the landing folder: generating and
    serialising the events as they were due took about 0.4 of a core, in the Python process of
    the driver under measurement, whose foreachBatch then waited for the interpreter's lock
    (py-spy, 2026-12-02)."""

    def __init__(self, landing: Path, rate: float, interval_s: float = 0.25, seed: int = 7) -> None:
        self.landing, self.rate, self.interval_s = landing, rate, interval_s
        self.staging = landing.with_name(f".{landing.name}-staged")
        self.rng = random.Random(seed)
        self.files: list[Path] = []
        self.event_ids: list[list[str]] = []

    def events(self) -> Any:
        from spark_jobs.generator import session_events

        while True:
            now = dt.datetime.now(dt.UTC)
            yield from session_events(self.rng, now, 40, "lat")

    def prepare(self, seconds: float) -> FileFeeder:
        """Write the files of `seconds` of events (and a fifth more) into the staging folder; the
        feeder that brings them into landing."""
        from spark_jobs.generator import write_lines

        events, owed = self.events(), 0.0
        for index in range(math.ceil(1.2 * seconds / self.interval_s)):
            owed += self.rate * self.interval_s
            batch = [next(events) for _ in range(int(owed))]
            owed -= len(batch)
            if batch:
                self.files.append(write_lines(self.staging, f"lat-{index:06d}.jsonl",
                                              [json.dumps(e, separators=(",", ":")) for e in batch]))
                self.event_ids.append([str(e["event_id"]) for e in batch])
        return FileFeeder(self.files, self.landing, self.interval_s)

    def written_at(self, arrived: list[float]) -> dict[str, float]:
        """Event id → when it became visible in landing, given when each file `arrived` (a resent
        event, one of the generator's duplicates: its first landing)."""
        at: dict[str, float] = {}
        for event_ids, visible in zip(self.event_ids, arrived, strict=False):
            for event_id in event_ids:
                at.setdefault(event_id, visible)
        return at


class QueryUnderLoad:
    """A query of this process's session under the latency load (the bare job)."""

    def __init__(self, start: Callable[[], StreamingQuery]) -> None:
        self.start_query, self.query = start, None

    def start(self) -> None:
        self.query = self.start_query()

    def catch_up(self, event_ids: set[str]) -> None:
        assert self.query is not None
        self.query.processAllAvailable()

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()

    def batches(self) -> list[Batch]:
        return batches_of(self.query.recentProgress) if self.query is not None else []


class DeployedDriver:
    """`weir run playback` in its own process, as deployed: every query of the pipeline (ingest,
    gold, sessions), its monitor, heartbeat and progress, on the catalog's entry with the run's
    trigger: the catalog's entry with its `trigger_interval` set, as an operator deploys it (in a
    catalog folder of the run's own, `WEIR_CONF`), and any other field the spec's `entry`
    parameter replaces (Python source by field name: an A/B run of one setting)."""

    def __init__(self, spec: Spec, home: WeirHome, name: str, trigger: str) -> None:
        self.spec, self.home, self.log_path = spec, home, driver_log(spec, name)
        self.conf = catalog.derived_entry(Path(spec.workdir) / f"{name}-conf", PIPELINE, base=PIPELINE,
                                          trigger_interval=repr(trigger), **spec.params.get("entry", {}))
        self.silver = PipelineTables.of(home, playback(trigger)).silver
        self.driver: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        return self.driver is not None and self.driver.poll() is None

    def start(self) -> None:
        self.driver = weir_driver(self.home, self.log_path, once=False, env={"WEIR_CONF": str(self.conf)})
        wait_until("the driver created silver", lambda: delta_version(self.silver) is not None,
                   self.spec.timeout_s, self.alive)

    def catch_up(self, event_ids: set[str]) -> None:
        """Until silver holds as many rows as `event_ids` (silver keeps one row per event and only
        appends while the driver runs)."""
        wait_until(f"silver holds {len(event_ids)} events",
                   lambda: rows_committed(self.silver) >= len(event_ids), self.spec.timeout_s, self.alive)

    def stop(self) -> None:
        if self.driver is not None:
            stop_driver(self.driver, self.log_path)

    def batches(self) -> list[Batch]:
        return driver_progress(self.home, "ingest")


def latency_once(spec: Spec, data: Dataset, name: str) -> Result:
    """The platform as deployed (`DeployedDriver`), landing → silver, with the spec's trigger."""
    home = fresh_home(spec, name)
    driver = DeployedDriver(spec, home, name, spec.params.get("trigger", "1 second"))
    return measure_latency(spec, home.landing(PIPELINE), driver.silver, driver)


def bare_latency_once(spark: SparkSession, spec: Spec, data: Dataset, name: str) -> Result:
    """The hand-written job (`bare_query`) on the same trigger, landing → its Delta table: the
    latency a bare Spark + Delta append reaches on this machine at the same rate."""
    home = fresh_home(spec, name)
    landing, root = home.landing(PIPELINE), home.root / "bare"
    landing.mkdir(parents=True, exist_ok=True)
    trigger = spec.params.get("trigger", "1 second")
    return measure_latency(spec, landing, root / "events",
                           QueryUnderLoad(lambda: bare_query(spark, landing, root, trigger=trigger)))


def measure_latency(spec: Spec, landing: Path, table: Path,
                    driver: QueryUnderLoad | DeployedDriver) -> Result:
    """Events written into `landing` at the spec's rate while `driver` runs; each event's latency is
    from its file's arrival in `landing` to the commit that made its first row visible in `table`
    (a job that keeps a resent event twice is judged by its first row).

    The stream's latency is that of the events written `settle_s` after the writer started, for
    `duration_s`: a running stream's. The events of the first `settle_s` are measured apart
    (`after_start_*`): a fresh driver's first batches run while the JIT compiles their code, and
    took 1.5-3 times as long as the later ones (docs/performance.md)."""
    from spark_jobs.generator import write_lines

    rate = float(spec.params["rate"])
    duration_s, settle_s = float(spec.params["duration_s"]), float(spec.params["settle_s"])
    writer = LandingWriter(landing, rate)
    feeder = writer.prepare(settle_s + duration_s)
    driver.start()
    try:
        # Steady state only: the query's first batch (code generation, first MERGEs) is not latency.
        first = list(itertools.islice(writer.events(), 10))
        write_lines(landing, "lat-warmup.jsonl", [json.dumps(e) for e in first])
        warm_up = {str(e["event_id"]) for e in first}
        driver.catch_up(warm_up)
        feeder.start()
        measured_from = time.time() + settle_s
        time.sleep(settle_s + duration_s)
        if not feeder.is_alive():
            raise RuntimeError("the landing writer ran out of prepared files before the run ended")
        feeder.stop_event.set()
        feeder.join()
        written_at = writer.written_at(feeder.arrived)
        driver.catch_up(set(written_at) | warm_up)
    finally:
        driver.stop()
    visible = delta_log.first_visible(table, "event_id")
    latencies = sorted(visible[event_id] - at for event_id, at in written_at.items()
                       if at >= measured_from and event_id in visible)
    # the lines that landed while the driver's JIT was still compiling: what a restart costs
    after_start = sorted(visible[event_id] - at for event_id, at in written_at.items()
                         if at < measured_from and event_id in visible)
    written = sum(1 for t in written_at.values() if t >= measured_from)
    batches = driver.batches()
    return {"rate": rate, "events_measured": len(latencies), "events_written": written,
            "p50_s": quantile(latencies, 0.50), "p90_s": quantile(latencies, 0.90),
            "p99_s": quantile(latencies, 0.99), "max_s": latencies[-1] if latencies else None,
            "settle_s": settle_s, "entry": spec.params.get("entry") or {},
            "after_start_events": len(after_start),
            "after_start_p50_s": quantile(after_start, 0.50),
            "after_start_p99_s": quantile(after_start, 0.99),
            LATENCY_SAMPLE: [round(x, 3) for x in evenly_spaced(latencies, LATENCY_SAMPLE_SIZE)],
            "batches": len(batches), "batch_s": [round(x.ended - x.started, 3) for x in batches]}


def evenly_spaced(ordered: list[float], n: int) -> list[float]:
    """At most `n` values of sorted `ordered` at evenly spaced ranks, the first and last included:
    its distribution for a plot, without keeping one number per event in the record."""
    if len(ordered) <= n:
        return list(ordered)
    return [ordered[round(i * (len(ordered) - 1) / (n - 1))] for i in range(n)]


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile of sorted `values` (nearest rank), or None when there are none."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, round(q * len(values) + 0.5) - 1))]




# --- the platform as deployed: `weir run` in its own driver process -------------------------------

def weir_driver(home: WeirHome, log_path: Path, *, once: bool, pipeline: str = PIPELINE,
                env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`weir run <pipeline> [--once]` on `home` (and `env` on top of this process's environment),
    its output in `log_path`."""
    env = {**os.environ, "WEIR_HOME": str(home.root), "WEIR_SPARK_MASTER": MASTER,
           "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable), **(env or {})}
    command = [sys.executable, "-m", "spark_jobs.cli", "-v", "run", pipeline,  # -v: step times
               *(["--once"] if once else [])]
    with log_path.open("wb") as out:
        return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def driver_failed(driver: subprocess.Popen[bytes], log_path: Path) -> RuntimeError:
    """The driver's exit, with the last error its log names (Spark's dumps end with a state line)."""
    errors = [line for line in log_path.read_text(errors="replace").splitlines()
              if re.match(r"^[\w.]*(Error|Exception): ", line)] or ["no error line in its log"]
    return RuntimeError(f"weir run exited {driver.returncode} (log {log_path}): {errors[-1][:300]}")


def stop_driver(driver: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 120) -> None:
    """Stop a `weir_driver` as an operator does: SIGTERM, after which it stops at a batch boundary;
    SIGKILL if it has not exited within `timeout_s`. Anything but a clean exit is raised."""
    if driver.poll() is None:
        driver.send_signal(signal.SIGTERM)
        try:
            driver.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()
    if driver.returncode != 0:
        raise driver_failed(driver, log_path)


def driver_log(spec: Spec, name: str) -> Path:
    """Where a `weir run` driver's output goes: beside the worker logs, which the harness keeps."""
    return Path(spec.workdir).parent / f"driver-{name}.log"


def driver_progress(home: WeirHome, query: str, pipeline: str = PIPELINE) -> list[Batch]:
    """The batches with input of `pipeline`'s `query`, from the driver's `stream_progress` table
    (delta-rs)."""
    from spark_jobs.control import platform_tables
    from spark_jobs.control.progress import table_path

    rows = platform_tables.read(table_path(home), equals={"pipeline": pipeline})
    name = query_name(catalog.load(pipeline), query)
    return sorted((Batch(r["progress_at"].timestamp(),
                         r["progress_at"].timestamp() + (r["batch_duration_ms"] or 0) / 1000.0,
                         int(r["num_input_rows"]), json.loads(r["durations_ms"] or "{}"))
                   for r in rows if r["query"] == name and (r["num_input_rows"] or 0) > 0),
                  key=lambda b: b.started)


def platform_once(spec: Spec, data: Dataset, name: str) -> Result:
    """`weir run playback --once` over the dataset as a backlog in the landing folder."""
    home = fresh_home(spec, name)
    link_into(data, home.landing(PIPELINE))
    return platform_backlog(spec, data, name, home, PIPELINE)


def platform_kafka_once(spec: Spec, data: Dataset, name: str) -> Result:
    """`weir run playback_kafka --once` over the dataset's lines already on the broker (the
    catalog entry as deployed: only the bootstrap servers come from the environment)."""
    return platform_backlog(spec, data, name, fresh_home(spec, name), KAFKA_PIPELINE,
                            env={"WEIR_KAFKA_BOOTSTRAP_SERVERS": str(spec.params["bootstrap"])})


def platform_backlog(spec: Spec, data: Dataset, name: str, home: WeirHome, pipeline: str,
                     env: dict[str, str] | None = None) -> Result:
    """`weir run <pipeline> --once` over a backlog of the dataset's lines: source → silver (the
    ingest query's batches) and source → gold (from the ingest's first batch to gold's last)."""
    log_path = driver_log(spec, name)
    recordings = Path(spec.params["jvm_profile"]) / name if spec.params.get("jvm_profile") else None
    if recordings is not None:    # the driver's JVM options come after SPARK_SUBMIT_OPTS: none clash
        recordings.mkdir(parents=True, exist_ok=True)
        env = {**(env or {}), "SPARK_SUBMIT_OPTS": " ".join(
            (os.environ.get("SPARK_SUBMIT_OPTS", ""), jvm_profile.recording_options(recordings))).strip()}
    started = time.monotonic()
    driver = weir_driver(home, log_path, once=True, pipeline=pipeline, env=env)
    try:
        code = driver.wait(timeout=spec.timeout_s)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    wall_s = time.monotonic() - started
    if code != 0:
        raise driver_failed(driver, log_path)
    ingest, gold = driver_progress(home, "ingest", pipeline), driver_progress(home, "gold", pipeline)
    silver = span_of(ingest, data.lines)
    first = min(b.started for b in ingest)
    t = PipelineTables.of(home, catalog.load(pipeline))
    # The progress event of gold's last batch can be lost as the driver exits: its commit is not.
    gold_commits = [c.visible_at for c in delta_log.commits(t.gold)]
    gold_s = max([b.ended for b in gold + ingest] + gold_commits) - first
    # `--once` runs the queries one after another: each one's span ends at its table's last
    # commit (or batch), and the next starts there (its start-up included)
    spans = {"ingest": [first, silver["span_to_epoch"]],
             "gold": [silver["span_to_epoch"], first + gold_s]}
    if t.sessions is not None and delta_version(t.sessions) is not None:
        sessions = driver_progress(home, "sessions", pipeline)
        ended = max([b.ended for b in sessions] + [c.visible_at for c in delta_log.commits(t.sessions)])
        spans["sessions"] = [first + gold_s, max(ended, first + gold_s)]
    profiled = {} if recordings is None else {
        "jvm_profile": jvm_profile.summary(jvm_profile.only_recording(recordings))}
    return {"seconds": wall_s, "wall_events_per_s": data.lines / wall_s, **silver,
            "query_spans": {q: [round(a, 3), round(b, 3)] for q, (a, b) in spans.items()},
            "gold_span_s": round(gold_s, 3), "gold_events_per_s": data.lines / gold_s,
            "gold_batches": len(gold), "time_split_ms": {"ingest": time_split(ingest),
                                                         "gold": time_split(gold)},
            "silver": exactly_once(t.silver, "event_id", data.valid_events),
            "bronze": exactly_once(t.bronze, None, data.lines),
            "cut_lines": cut_lines(t.bronze),
            **({"day_read": day_read(t.bronze, dt.date.fromisoformat(data.day))} if data.days > 1 else {}),
            "timeline": timeline(t.silver, first),
            **profiled}


def day_read(bronze: Path, day: dt.date) -> dict[str, int]:
    """What a back-fill of `day` reads of `bronze`: the files Delta's statistics on
    `event_date_hint` leave it (`backfill.bronze_lines`: those whose range holds the day, or that
    hold lines without one) and their lines, against bronze's and the day's own lines. From the
    table's log and one count with delta-rs, no JVM."""
    import pyarrow as pa

    from spark_jobs.control.platform_tables import query
    from spark_jobs.tables import delta_log as table_log

    hint = "event_date_hint"
    files = pa.table(table_log(bronze, files=True).get_add_actions(flatten=True)).to_pylist()
    read = [f for f in files if f.get(f"null_count.{hint}") or f.get(f"min.{hint}") is None
            or f[f"min.{hint}"] <= day <= f[f"max.{hint}"]]
    counted = query(bronze, f"SELECT count(*) AS \"n\" FROM t WHERE {hint} = DATE '{day.isoformat()}'")
    return {"files": len(read), "lines": sum(f["num_records"] for f in read), "bronze_files": len(files),
            "bronze_lines": sum(f["num_records"] for f in files), "day_lines": counted[0]["n"]}


def cut_lines(bronze: Path) -> list[dict[str, Any]]:
    """The lines bronze holds the first bytes of only (`line_bytes`: the landing reader's cut),
    read with delta-rs: where each is, how many bytes were kept, and the whole line's length. The
    lines' text is read only when there is such a line: every platform run checks, and a day's
    bronze without one is its `line_bytes` column alone."""
    from spark_jobs.control.platform_tables import query

    cut = "FROM t WHERE line_bytes IS NOT NULL"
    counted = query(bronze, f'SELECT count(*) AS "n" {cut}')
    if not counted or not counted[0]["n"]:
        return []
    return query(bronze, f'SELECT source, position, octet_length(value) AS "kept", line_bytes {cut} '
                         "ORDER BY source, position")


def platform_steady_once(spec: Spec, data: Dataset, name: str) -> Result:
    """`weir run playback` (the catalog's trigger) while the files arrive every `interval_s`;
    stopped at a batch boundary (SIGTERM) once silver holds every valid event."""
    home = fresh_home(spec, name)
    landing, silver = home.landing(PIPELINE), home.root / "tables" / "silver" / "playback_events"
    landing.mkdir(parents=True)
    log_path = driver_log(spec, name)
    driver = weir_driver(home, log_path, once=False)
    feeder = FileFeeder.of(data, landing, float(spec.params["interval_s"]))
    try:
        # The feed starts once the driver has its tables: arrival is timed, not JVM start-up.
        wait_until("the driver created silver", lambda: delta_version(silver) is not None,
                   spec.timeout_s, lambda: driver.poll() is None)
        feeder.start()
        wait_until("silver holds every valid event", lambda: rows_committed(silver) >= data.valid_events,
                   spec.timeout_s, lambda: driver.poll() is None)
        feeder.join()
        # A progress event still in flight when the driver stops is lost: wait for the last one.
        last_commit = delta_log.commits(silver)[-1].visible_at
        wait_until("the driver's progress shows the batch of silver's last commit",
                   lambda: any(b.ended >= last_commit - 0.5 for b in driver_progress(home, "ingest")),
                   120, lambda: driver.poll() is None)
        stop_driver(driver, log_path)
    finally:
        feeder.stop_event.set()
        if driver.poll() is None:   # the run failed before the stop
            driver.kill()
            driver.wait()
    return {**steady_result(feeder, silver, data.lines, driver_progress(home, "ingest")),
            "silver": exactly_once(silver, "event_id", data.valid_events)}


SPARK_WORKLOADS: dict[str, Callable[[SparkSession, Spec, Dataset, str], Result]] = {
    "ceiling": ceiling_once,
    "ceiling_transforms": ceiling_transforms_once,
    "bare": bare_once,
    "floor": ladder_once,
    "ladder": ladder_once,
    "bare_steady": bare_steady_once,
    "bare_kafka": bare_kafka_once,
    "bare_latency": bare_latency_once,
    "backfill": backfill_once,
    "backfill_at_size": backfill_at_size_once,
    "ingest_profile": ingest_profile_once,
    "silver_growth": silver_growth_once,
}
PROCESS_WORKLOADS: dict[str, Callable[[Spec, Dataset, str], Result]] = {
    "platform": platform_once,
    "platform_steady": platform_steady_once,
    "platform_kafka": platform_kafka_once,
    "latency": latency_once,
}
# The workloads whose driver `python -m bench.run --jvm-profile` records (`platform_backlog`'s).
PROFILED = ("platform", "platform_kafka")


def measure(spec: Spec, spark: SparkSession | None) -> Result:
    """Run the workload `repeats` times on the spec's dataset; the headline is the median run."""
    runs = []
    for attempt in range(spec.repeats):
        started = time.monotonic()
        name = f"{spec.label}-{attempt}"
        if spec.workload in PROCESS_WORKLOADS:
            runs.append(PROCESS_WORKLOADS[spec.workload](spec, spec.dataset, name))
        else:
            assert spark is not None
            runs.append(SPARK_WORKLOADS[spec.workload](spark, spec, spec.dataset, name))
        log.info("%s: run %d/%d in %.1fs", spec.label, attempt + 1, spec.repeats,
                 time.monotonic() - started)
    out: Result = {"label": spec.label, "workload": spec.workload, "dataset": spec.dataset.name,
                   "lines": spec.dataset.lines, "runs": runs}
    out.update({k: v for k, v in runs[0].items() if k != LATENCY_SAMPLE})
    if "seconds" in runs[0] and (spec.repeats > 1 or "events_per_s" not in runs[0]):
        out["seconds"] = statistics.median(r["seconds"] for r in runs)
        out["events_per_s"] = spec.dataset.lines / out["seconds"]
    return out
