"""Back-fill: re-derive silver and gold for a range of event dates from bronze, with the very
transforms the stream uses, replacing exactly those partitions. Running it again changes nothing;
it may run beside the stream (conflicting commits are retried, see `tables`)."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs import transforms
from spark_jobs.home import WeirHome
from spark_jobs.layers import ensure_tables, read_dimension
from spark_jobs.quality import rules as row_rules
from spark_jobs.tables import replace_partitions, sql_literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackfillResult:
    pipeline: str
    date_from: dt.date
    date_to: dt.date
    silver_replaced: bool
    gold_replaced: bool


def date_range(column: str, first: dt.date, last: dt.date) -> str:
    return f"{column} >= {sql_literal(first)} AND {column} <= {sql_literal(last)}"


def backfill(spark: SparkSession, pipeline: Pipeline, date_from: dt.date, date_to: dt.date,
             home: WeirHome | None = None) -> BackfillResult:
    if date_to < date_from:
        raise ValueError(f"--to {date_to} is before --from {date_from}")
    home = home or WeirHome.from_env()
    tables = ensure_tables(spark, home, pipeline)
    in_range = date_range("event_date", date_from, date_to)

    rules = row_rules.of(pipeline.name)

    def silver_rows() -> DataFrame:
        bronze = spark.read.format("delta").load(str(tables.bronze))
        # the stream's own parse and row rules, so both keep and refuse the same rows
        parsed = row_rules.with_rules(transforms.parse(bronze, pipeline), rules)
        return transforms.silver(parsed, read_dimension(spark, tables), pipeline).where(in_range)

    silver_replaced = replace_partitions(silver_rows, tables.silver, in_range)
    # A window starting on the last day may reach into the next one (sliding windows).
    spill = date_range("event_date", date_from, date_to + dt.timedelta(days=1))

    def gold_rows() -> DataFrame:
        silver = spark.read.format("delta").load(str(tables.silver)).where(spill)
        return transforms.aggregate(silver, pipeline).where(in_range)

    gold_replaced = replace_partitions(gold_rows, tables.gold, in_range)
    log.info("%s back-fill %s..%s: silver %s, gold %s", pipeline.name, date_from, date_to,
             "replaced" if silver_replaced else "unchanged", "replaced" if gold_replaced else "unchanged")
    return BackfillResult(pipeline.name, date_from, date_to, silver_replaced, gold_replaced)
