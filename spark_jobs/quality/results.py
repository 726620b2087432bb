"""The Delta table `tables/platform/dq_results`: one row per expectation per DQ run.

Appended with the platform-table writer (delta-rs, no JVM), like the event log, and read with
Spark or `weir sql` like any table: "which expectations failed on gold this week" is one query.
"""

from __future__ import annotations

import json
import logging
from functools import cache
from typing import TYPE_CHECKING, Any

from spark_jobs.control import platform_tables
from spark_jobs.home import WeirHome

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

    from spark_jobs.quality.report import DqReport

log = logging.getLogger(__name__)
TABLE = "dq_results"


@cache
def schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("run_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("pipeline", pa.string(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("expectation", pa.string(), nullable=False),
        pa.field("expectation_type", pa.string(), nullable=False),
        pa.field("severity", pa.string(), nullable=False),
        pa.field("success", pa.bool_(), nullable=False),
        pa.field("observed_value", pa.string()),
        pa.field("unexpected_count", pa.int64()),
        pa.field("element_count", pa.int64()),
        pa.field("kwargs", pa.string()),
        pa.field("error", pa.string()),
        pa.field("date_from", pa.date32(), nullable=False),
        pa.field("date_to", pa.date32(), nullable=False),
        pa.field("run_success", pa.bool_(), nullable=False),
    ])


def table_path(home: WeirHome | None = None) -> Path:
    return (home or WeirHome.from_env()).table("platform", TABLE)


def rows_of(report: DqReport) -> list[dict[str, Any]]:
    return [{
        "run_id": report.run_id,
        "run_time": report.run_time,
        "pipeline": report.pipeline,
        "table": o.table,
        "expectation": o.expectation,
        "expectation_type": o.type,
        "severity": o.severity,
        "success": o.success,
        "observed_value": o.observed_value,
        "unexpected_count": o.unexpected_count,
        "element_count": o.element_count,
        "kwargs": json.dumps(o.kwargs, sort_keys=True, default=str),
        "error": o.error,
        "date_from": report.date_from,
        "date_to": report.date_to,
        "run_success": report.success,
    } for o in report.outcomes]


def append(report: DqReport, home: WeirHome | None = None) -> Path:
    """Append the report's rows; returns the table's path."""

    path = table_path(home)
    rows = rows_of(report)
    platform_tables.append(path, rows, schema())
    log.info("%s dq run %s: %d result(s) appended to %s", report.pipeline, report.run_id, len(rows), path)
    return path


def read(home: WeirHome | None = None, pipeline: str | None = None) -> list[dict[str, Any]]:
    """Every stored result (of one pipeline, or all), oldest run first."""

    rows = platform_tables.read(table_path(home), equals={"pipeline": pipeline} if pipeline else None)
    return sorted(rows, key=lambda r: (r["run_time"], r["table"], r["expectation"]))
