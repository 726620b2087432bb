"""Pure transforms shared by the stream and the back-fill: `DataFrame -> DataFrame`, no I/O.

bronze ──parse──► parsed ──rejects──► quarantine rows
                     └──valid──derive──dedupe──enrich──► silver rows ──aggregate──► gold rows

Every rule comes from the pipeline's catalog entry. Validation collects every reason a record
fails (not only the first), so a quarantined line tells the whole story at once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.tables import java_strings

if TYPE_CHECKING:
    from spark_jobs.catalog import Field, Pipeline

MAX_RECORD_CHARS = 1_000_000
# What the landing reader keeps of one line, in bytes (`spark_jobs.landing`): more than the longest
# line the contract accepts (MAX_RECORD_CHARS characters of up to 4 bytes each), so a line it cuts
# is one the parse refuses anyway, and no input holds a driver's memory beyond it.
MAX_LINE_BYTES = 4 * MAX_RECORD_CHARS + 4
REASON = "_reject_reason"
LINEAGE = ("_source", "_position", "_ingest_time")
# Silver's last column: the key's 64-bit hash, a column Delta generates (and checks on every
# write), so that the stream's dedupe scans one long per row instead of the key's strings
# (`tables.insert_absent`).
KEY_HASH = "_key_hash"
GENERATION_EXPRESSION = "delta.generationExpression"
# The bronze columns a parse carries unchanged so that bronze is written from the parsed batch
# (one pass over the source): where a Kafka record came from, the ingest date, and a cut line's
# length.
CARRIED = "_carried"
CARRIED_COLUMNS = ("topic", "partition", "offset", "kafka_timestamp", "ingest_date", "line_bytes")

BRONZE_SCHEMA = StructType([
    StructField("value", StringType()),
    StructField("source", StringType(), False),
    StructField("position", LongType(), False),
    StructField("topic", StringType()),
    StructField("partition", LongType()),
    StructField("offset", LongType()),
    StructField("kafka_timestamp", TimestampType()),
    StructField("ingest_time", TimestampType(), False),
    StructField("ingest_date", DateType(), False),
    # The line's bytes, only when they are not valid UTF-8 (`value` then holds them decoded with
    # U+FFFD replacements): the line is quarantined, and what arrived stays inspectable.
    StructField("raw_bytes", BinaryType()),
    # The whole line's length in bytes when the landing reader kept only its first MAX_LINE_BYTES
    # (`value` holds those, cut at a character's start): the line is quarantined as too large.
    # Null for every line kept whole.
    StructField("line_bytes", LongType()),
])
BRONZE_KEY = ("source", "position")
# A parsed line's own text and bytes: bronze and quarantine keep them, silver does not.
RAW_LINE = ("value", "_raw_bytes")
EVENT_DATE_HINT = "event_date_hint"
# Bronze as stored: the source's columns plus the date a back-fill files each line under (see
# `event_date_hint`), whose per-file min/max statistics let a back-fill read only its dates' files.
BRONZE_TABLE_SCHEMA = StructType([*BRONZE_SCHEMA.fields, StructField(EVENT_DATE_HINT, DateType())])


def parse(bronze: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Bronze rows → lineage, raw text, typed contract fields and `_reject_reason` (null = valid).

    Each line is read, typed and judged in one pass of the JVM (`infra/jvm/weir/ContractParse.java`:
    Jackson's streaming parser and Spark's own casts, every reason as Spark's expressions gave it);
    the line's own checks that need its bytes or length, and the event time's tolerance, which is
    Spark's interval arithmetic, stay expressions here. The parse in one pass costs a fraction of
    `from_json` and a dozen expressions per field (docs/performance.md).

    The expressions depend on the contract and the session's time zone only, and are built once
    for each (`_parse_stages`): built for each micro-batch, their calls into the JVM took a
    noticeable part of a small batch (docs/performance.md)."""
    zone = bronze.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    for stage in _parse_stages(pipeline.fields, pipeline.event_time, pipeline.max_event_time_ahead, zone):
        bronze = bronze.select(*stage)
    return bronze


def contract_json(fields: tuple[Field, ...], event_time: str, zone: str) -> str:
    """A contract as `ContractParse` takes it: its fields and their rules, the event-time field and
    the time zone of timestamps without an offset."""
    def bounds(f: Field) -> str:
        low = "" if f.minimum is None else _num(f.minimum)
        high = "" if f.maximum is None else _num(f.maximum)
        return f"[{low}..{high}]"

    return json.dumps({"zone": zone, "event_time": event_time, "fields": [
        {"name": f.name, "type": f.type, "required": f.required,
         "allowed": None if f.allowed is None else list(f.allowed),
         "minimum": f.minimum, "maximum": f.maximum, "range": bounds(f)} for f in fields]})


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@functools.lru_cache(maxsize=64)
def _parse_stages(fields: tuple[Field, ...], event_time: str, max_ahead: str,
                  zone: str) -> tuple[tuple[Column, ...], ...]:
    """The projections of `parse`, in order, for a contract: its `fields`, the `event_time` field,
    how far ahead of its ingest time an event may stand (`max_ahead`), and the session's time
    `zone`. The first reads each line once (`ContractParse`); the second takes its struct apart,
    which Spark keeps a projection of its own since it names the struct more than once. A column
    expression is resolved against each plan it is used in, so one list serves every batch."""
    value = F.col("value")
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    contract = Column(jvm.weir.ContractParse.column(contract_json(fields, event_time, zone),
                                                    value._jc))  # type: ignore[attr-defined]
    read = (
        F.col("source").alias("_source"),
        F.col("position").alias("_position"),
        F.col("ingest_time").alias("_ingest_time"),
        F.col("raw_bytes").alias("_raw_bytes"),
        value,
        F.struct(*CARRIED_COLUMNS).alias(CARRIED),
        contract.alias("_contract"),
    )

    def part(name: str) -> Column:
        return F.col("_contract").getField(name)

    cut = F.col(CARRIED).getField("line_bytes")
    line = (
        F.when(cut.isNotNull(),
               F.concat(F.lit(f"record larger than {MAX_RECORD_CHARS} characters: a line of "),
                        cut.cast("string"), F.lit(" bytes, kept as its first "),
                        F.octet_length(value).cast("string"), F.lit(" in bronze and quarantine")))
        .when(value.isNull() | (F.trim(value) == ""), F.lit("empty line"))
        # A line has at most as many characters as bytes, and counting characters reads every
        # byte: they are counted only of a line with more bytes than the bound.
        .when((F.octet_length(value) > MAX_RECORD_CHARS) & (F.length(value) > MAX_RECORD_CHARS),
              F.lit(f"record larger than {MAX_RECORD_CHARS} characters"))
        .when(F.col("_raw_bytes").isNotNull(), F.lit("invalid UTF-8"))
        .otherwise(part("_line_reason"))
    )
    ahead = (_ahead_of_ingest(part(event_time), event_time, max_ahead, part("_event_time_text"))
             if any(f.name == event_time for f in fields) else None)
    field_reasons = F.concat_ws("; ", *(c for c in (part("_reasons_head"), ahead, part("_reasons_tail"))
                                        if c is not None))
    reason = F.coalesce(line, F.nullif(field_reasons, F.lit("")))
    judged = (*map(F.col, LINEAGE), value, F.col("_raw_bytes"), F.col(CARRIED),
              *(part(f.name).alias(f.name) for f in fields), reason.alias(REASON))
    return read, judged


def _ahead_of_ingest(event_time: Column, name: str, max_ahead: str, text: Column) -> Column:
    """The reason for an event stamped more than the catalog's tolerance (`max_ahead`) ahead of its
    ingest time (the micro-batch's, replayed unchanged, so the stream and a back-fill judge alike):
    the event time `name`, typed and as its `text`."""
    limit = F.col("_ingest_time") + F.expr(f"INTERVAL {max_ahead}")
    return F.when(event_time > limit, F.concat(
        F.lit(f"{name} more than {max_ahead} ahead of ingest time: "), text))


def bronze_rows(parsed: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The bronze rows of a parsed batch (`parse`), as stored (`BRONZE_TABLE_SCHEMA`)."""
    carried = {c: F.col(f"{CARRIED}.{c}") for c in CARRIED_COLUMNS}
    columns = {"value": F.col("value"), "source": F.col("_source"), "position": F.col("_position"),
               "ingest_time": F.col("_ingest_time"), "raw_bytes": F.col("_raw_bytes"), **carried,
               EVENT_DATE_HINT: event_date_hint(pipeline, carried["ingest_date"])}
    return parsed.select(*[columns[f.name].alias(f.name) for f in BRONZE_TABLE_SCHEMA.fields])


def event_date_hint(pipeline: Pipeline, ingest_date: Column) -> Column:
    """The date a back-fill files a bronze row's line under, over a parsed batch: the UTC date of
    its event time as the contract parses it, else its ingest date (a line without a usable event
    time can only be a reject). Null when the event time is not a contract timestamp: a back-fill
    then reads such lines whatever its dates."""
    field = next((f for f in pipeline.fields if f.name == pipeline.event_time), None)
    if field is None or field.type != "timestamp":
        return F.lit(None).cast(DateType())
    return F.coalesce(F.to_date(pipeline.event_time), ingest_date)


def by_hint(rows: DataFrame, lines: Mapping[tuple[int, object], int], partitions: int) -> DataFrame:
    """Bronze `rows` repartitioned so that each partition, and so each file written from it, holds
    one `event_date_hint`'s lines (`infra/jvm/weir/ByValue.java`): a back-fill reads only its
    dates' files by their statistics on the hint, however many days one batch of a backlog brings.
    `lines` counts the rows by (partition, date), as `rows` are partitioned. Each partition keeps
    its most frequent date's lines where they are; the others' are shuffled, each date over a share
    of `partitions` in proportion to its lines that move (at least one). A batch of one day with a
    few late events, or refused lines filed by their ingest date, moves those few; a backlog of
    landing files in time order, whose tasks each read consecutive files, moves the lines of the
    tasks that straddle two days; one date, or one date per partition, moves nothing."""
    dates = sorted({date for _, date in lines}, key=lambda d: (d is not None, d))
    if len(dates) <= 1:
        return rows
    index = {date: i for i, date in enumerate(dates)}
    moved = dict.fromkeys(dates, 0)
    keep = [-1] * (max(part for part, _ in lines) + 1)
    for part in {part for part, _ in lines}:
        here = {date: n for (p, date), n in lines.items() if p == part}
        kept = max(here, key=lambda d: (here[d], -index[d]))   # the most lines, then the earliest
        keep[part] = index[kept]
        for date, n in here.items():
            moved[date] += 0 if date == kept else n
    gateway = rows.sparkSession.sparkContext._gateway  # type: ignore[attr-defined]
    weights = gateway.new_array(gateway.jvm.long, len(dates))
    for i, date in enumerate(dates):
        weights[i] = moved[date]
    kept_in = gateway.new_array(gateway.jvm.int, len(keep))
    for part, i in enumerate(keep):
        kept_in[part] = i
    repartitioned = gateway.jvm.weir.ByValue.repartition(
        rows._jdf, EVENT_DATE_HINT,  # type: ignore[attr-defined]
        java_strings(gateway, [None if d is None else str(d) for d in dates]), weights, partitions,
        java_strings(gateway, BRONZE_KEY), kept_in)
    return DataFrame(repartitioned, rows.sparkSession)


def rejects(parsed: DataFrame) -> DataFrame:
    """Quarantine rows: the raw line, where it came from, and why it was refused."""
    return parsed.where(F.col(REASON).isNotNull()).select(
        F.col("_source").alias("source"),
        F.col("_position").alias("position"),
        "value",
        F.col(REASON).alias("reason"),
        F.col("_ingest_time").alias("ingest_time"),
        F.to_date("_ingest_time").alias("ingest_date"),
        F.col("_raw_bytes").alias("raw_bytes"),
    )


def without_kept_lines(parsed: DataFrame) -> DataFrame:
    """Parsed lines as a job that writes no bronze needs them: the raw text and bytes of a valid
    line dropped (silver does not carry them, `rejects` reads a refused line's), and the fields
    only bronze carries gone. A back-fill's day cached so takes 112 MB instead of 377 MB
    (995 k lines, compressed), with nothing spilled (docs/performance.md)."""
    refused = F.col(REASON).isNotNull()
    return parsed.select(*(F.when(refused, F.col(c)).alias(c) if c in RAW_LINE else c
                           for c in parsed.columns if c != CARRIED))


def valid(parsed: DataFrame) -> DataFrame:
    return parsed.where(F.col(REASON).isNull()).drop(REASON, *RAW_LINE, CARRIED)


def derive(events: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Catalog-declared derived columns and the UTC `event_date` partition column."""
    out = events
    for name, expression in pipeline.derived.items():
        out = out.withColumn(name, F.expr(expression))
    return out.withColumn("event_date", event_date(pipeline))


def event_date(pipeline: Pipeline) -> Column:
    """The UTC date of an event: silver's and gold's partition column."""
    return F.to_date(pipeline.event_time)


# What a job that dedupes (`dedupe`) runs with. Spark's optimizer puts a partial "first row per
# key" before the dedupe's shuffle (`WindowGroupLimit`, from `spark.sql.optimizer.
# windowGroupLimitThreshold`), which sorts every row of each input partition to drop the rows
# that are not their key's first there: worth it where a partition holds many rows per key, pure
# cost where nearly every key is unique, as an event's is (a few percent of lines are resends).
# Without it the rows are sorted once, after the shuffle.
DEDUPE_CONF = {"spark.sql.optimizer.windowGroupLimitThreshold": "-1"}


def dedupe(events: DataFrame, key: str, partitions: int | None = None) -> DataFrame:
    """One row per `key`: the first ingested (by ingest time, source, position: unique, so the
    choice is deterministic whatever the batching, and the stream and a back-fill keep the same
    row). A window's first row, not the minimum of a struct of the whole row: Spark aggregates a
    struct of strings by sorting before and after the shuffle, 1.34 s against 0.97 s for the
    silver rows of a 507 k-line batch (docs/performance.md). The window's shuffle makes
    `partitions` partitions (default: the session's shuffle partitions, sized for a micro-batch;
    a back-fill's day or a refresh's whole bronze passes as many as its lines need)."""
    if partitions is not None:
        events = events.repartition(partitions, key)
    first = Window.partitionBy(key).orderBy("_ingest_time", "_source", "_position")
    return events.withColumn("_rank", F.row_number().over(first)).where("_rank = 1").drop("_rank")


def enrich(events: DataFrame, dimension: DataFrame | None, pipeline: Pipeline) -> DataFrame:
    """Left-join the dimension's columns (unknown keys give nulls)."""
    d = pipeline.dimension
    if d is None:
        return events
    if dimension is None:
        return events.select("*", *[F.lit(None).cast("string").alias(c) for c in d.columns])
    return events.join(F.broadcast(dimension.select(d.key, *d.columns)), on=d.key, how="left")


def silver(parsed: DataFrame, dimension: DataFrame | None, pipeline: Pipeline, *,
           partitions: int | None = None) -> DataFrame:
    """Valid, typed, unique, enriched events in the silver column order, in `partitions`
    partitions (see `dedupe`)."""
    out = enrich(dedupe(derive(valid(parsed), pipeline), pipeline.key, partitions), dimension, pipeline)
    contract = [f.name for f in pipeline.fields]
    extra = list(pipeline.derived) + (list(pipeline.dimension.columns) if pipeline.dimension else [])
    return out.select(*contract, *extra, "event_date", *LINEAGE, key_hash((pipeline.key,)))


def key_hash_expression(key: Sequence[str]) -> str:
    """The SQL of a key's hash: what Delta generates silver's `_key_hash` as."""
    return f"xxhash64({', '.join(f'`{k}`' for k in key)})"


def key_hash(key: Sequence[str]) -> Column:
    """The key's hash column, marked as Delta's generated column: a table created from a schema
    holding it generates and checks it, and an overwrite of such a table keeps it generated."""
    expression = key_hash_expression(key)
    return F.expr(expression).alias(KEY_HASH, metadata={GENERATION_EXPRESSION: expression})


def aggregate(events: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Gold rows: event-time windows × group keys with the catalog's measures. Works on a batch
    DataFrame and on a watermarked stream alike."""
    agg = pipeline.aggregation
    source = events
    for name, expression in agg.explode.items():
        source = source.withColumn(name, F.explode(F.expr(expression)))
    window = (F.window(pipeline.event_time, agg.window, agg.slide) if agg.slide
              else F.window(pipeline.event_time, agg.window))
    grouped = source.groupBy(window.alias("window"), *agg.group_by).agg(
        *[F.expr(expression).alias(name) for name, expression in agg.measures.items()])
    return grouped.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *agg.group_by,
        *agg.measures,
        F.to_date("window.start").alias("event_date"),
    )


def gold_key(pipeline: Pipeline) -> tuple[str, ...]:
    return ("window_start", *pipeline.aggregation.group_by)
