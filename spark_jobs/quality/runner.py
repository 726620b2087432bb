"""`run_dq`: validate a pipeline's silver and gold partitions for a range of event dates with its
Great Expectations suites, store one row per expectation in `tables/platform/dq_results`, rebuild
the Data Docs under `WEIR_HOME/dq/docs`, and record the run in the event log.

Great Expectations is slow on Spark when it is let loose, so a run stays lean: each table is read
once, pruned to its date partitions and to the columns the suite names, and cached; GE validates
that DataFrame directly (no re-reads) with the `SUMMARY` result format and no unexpected-value
lists. Values that depend on the clock or on other tables are computed here with Spark and handed
to the suites as `$PARAMETER`s (see `conf/pipelines/<name>.expectations.yaml`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from spark_jobs import catalog
from spark_jobs.control import eventlog, lease
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.quality import gx_context, results, suites
from spark_jobs.quality.report import DqReport, ExpectationOutcome
from spark_jobs.session import build_session
from spark_jobs.tables import delta_log, delta_version

if TYPE_CHECKING:
    from great_expectations.core import ExpectationSuiteValidationResult
    from great_expectations.data_context import AbstractDataContext
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger(__name__)
RESULT_FORMAT: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 0,
                                 "include_unexpected_rows": False}
# Bronze rows of an event date are looked for from this many days before it (clock skew).
INGEST_LOOKBACK = dt.timedelta(days=1)


class NoDataError(LookupError):
    """The pipeline has no output to validate yet (no tables, or no partitions)."""


def run_dq(pipeline: str, date_from: dt.date | None = None, date_to: dt.date | None = None, *,
           home: WeirHome | None = None, spark: SparkSession | None = None,
           freshness: bool | None = None, now: dt.datetime | None = None,
           record_event: bool = True) -> DqReport:
    """Validate `pipeline`'s silver and gold for event dates `date_from..date_to` (default: the
    newest partition). `freshness` forces the `when: stream_running` expectations on or off
    (default: on while the stream's heartbeat is live); `now` pins the clock (tests, replays).
    The report's `success` is False when any `fail`-severity expectation failed."""
    started = time.monotonic()
    home = home or WeirHome.from_env()
    entry = catalog.load(pipeline)
    suite = suites.load(pipeline)
    now = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    tables = PipelineTables.of(home, entry)
    # from the tables' logs (no JVM): a home without output fails before a driver starts
    _require_tables(tables)
    date_from, date_to = _date_range(tables, date_from, date_to)
    gx_context.preload()     # beside the JVM's start, which leaves a core waiting
    if spark is None:
        spark = build_session(f"weir-dq-{pipeline}",
                              conf={"spark.sql.shuffle.partitions": str(entry.shuffle_partitions)})
    stream_running = stream_is_live(home, pipeline) if freshness is None else freshness
    if suite.has_conditional("stream_running") and not stream_running:
        log.info("%s dq: stream not running, freshness expectations skipped", pipeline)
    run_time = dt.datetime.now(dt.UTC)
    run_id = f"{run_time:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    log.info("%s dq run %s over %s..%s", pipeline, run_id, date_from, date_to)

    frames = {layer: _frame(spark, tables, entry, layer,
                            suite.for_layer(layer, stream_running=stream_running), date_from, date_to)
              for layer in suites.LAYERS if suites.table_path(tables, layer) is not None}

    # Great Expectations' stores under WEIR_HOME/dq are not safe for concurrent writers: DQ runs
    # (the runs of one Airflow back-fill, P_dq, `weir dq`) take turns.
    with gx_context.exclusive(home):
        try:
            phase = time.monotonic()
            parameters = _parameters(spark, entry, suite, tables, date_from, date_to, now, stream_running)
            log.info("%s dq run %s: parameters in %.1fs", pipeline, run_id, time.monotonic() - phase)
            outcomes: list[ExpectationOutcome] = []
            row_counts: dict[str, int] = {}
            context = gx_context.context_for(home)
            identifiers: list[Any] = []
            for layer in suites.LAYERS:
                specs = suite.for_layer(layer, stream_running=stream_running)
                if not specs:
                    continue
                table = _table_label(entry, layer)
                frame = frames[layer]
                phase = time.monotonic()
                row_counts[table] = frame.count()   # also materialises the cache before GE starts
                loaded = time.monotonic()
                result, identifier = _validate(context, pipeline, table, specs, frame, parameters, run_id,
                                               run_time)
                log.info("%s dq run %s: %s read and cached in %.1fs (%d rows), validated in %.1fs",
                         pipeline, run_id, table, loaded - phase, row_counts[table],
                         time.monotonic() - loaded)
                identifiers.append(identifier)
                outcomes += _outcomes(table, specs, result)
        finally:
            for frame in frames.values():
                frame.unpersist()
        phase = time.monotonic()
        docs = gx_context.build_docs(home, identifiers)
        log.info("%s dq run %s: Data Docs in %.1fs", pipeline, run_id, time.monotonic() - phase)
    report = DqReport(run_id=run_id, pipeline=pipeline, run_time=run_time, date_from=date_from,
                      date_to=date_to, outcomes=tuple(outcomes), docs_path=docs,
                      stream_running=stream_running, duration_s=time.monotonic() - started,
                      row_counts=row_counts)

    results.append(report, home)
    if record_event:
        _record(report, home)
    log.info("%s dq run %s: %s in %.1fs (%d expectation(s), failed: %s)", pipeline, run_id,
             "success" if report.success else "FAILED", report.duration_s, len(outcomes),
             ", ".join(report.failed) or "none")
    return report


def _table_label(entry: Pipeline, layer: str) -> str:
    return suites.table_name(entry, layer)  # type: ignore[arg-type]


def _require_tables(tables: PipelineTables) -> None:
    for layer, path in (("silver", tables.silver), ("gold", tables.gold)):
        if delta_version(path) is None:
            raise NoDataError(f"no {layer} table at {path}: run the pipeline first")


def _date_range(tables: PipelineTables, date_from: dt.date | None,
                date_to: dt.date | None) -> tuple[dt.date, dt.date]:
    """The given range (one end given: that one day), or the newest event_date of silver (the
    partitions of its files, from the log)."""
    if date_from is None and date_to is None:
        dates = [p["event_date"] for p in delta_log(tables.silver, files=True).partitions()
                 if p.get("event_date")]
        if not dates:
            raise NoDataError(f"silver {tables.silver} has no partitions yet: nothing to validate")
        newest = dt.date.fromisoformat(max(dates))
        return newest, newest
    first = date_from or date_to
    last = date_to or date_from
    assert first is not None and last is not None
    if last < first:
        raise ValueError(f"date_to {last} is before date_from {first}")
    return first, last


def _frame(spark: SparkSession, tables: PipelineTables, entry: Pipeline, layer: str,
           specs: list[suites.ExpectationSpec], date_from: dt.date, date_to: dt.date) -> DataFrame:
    """The table's partitions for the dates, only the columns the suite names, cached."""
    from pyspark.sql import functions as F

    path = suites.table_path(tables, layer)  # type: ignore[arg-type]
    df = spark.read.format("delta").load(str(path)).where(
        F.col("event_date").between(F.lit(date_from), F.lit(date_to)))
    columns = list(dict.fromkeys(c for s in specs for c in suites.columns_of(s.kwargs)))
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise suites.SuiteError(f"{layer} expectations name unknown column(s) {', '.join(missing)} "
                                f"(table {path} has {', '.join(df.columns)})")
    return df.select(*(columns or ["event_date"])).persist()


def _parameters(spark: SparkSession, entry: Pipeline, suite: suites.SuiteSpec, tables: PipelineTables,
                date_from: dt.date, date_to: dt.date, now: dt.datetime,
                stream_running: bool) -> dict[str, Any]:
    """Values for the suites' `$PARAMETER`s; the expensive ones only when an expectation needs them."""
    needed = {name for layer in suites.LAYERS
              for spec in suite.for_layer(layer, stream_running=stream_running)
              for name in spec.parameters()}
    values: dict[str, Any] = {}
    for f in entry.fields:
        if f.allowed is not None:
            values[f"allowed_{f.name}"] = list(f.allowed)
        if f.minimum is not None:
            values[f"min_{f.name}"] = f.minimum
        if f.maximum is not None:
            values[f"max_{f.name}"] = f.maximum
    # Spark compares timestamp columns with aware datetimes exactly (latest_event_time is a row
    # condition); a collected column max is naive, in this process's local time (freshness).
    values["latest_event_time"] = now + suite.event_time_tolerance
    values["oldest_newest_window"] = (now - suite.freshness_lag).astimezone().replace(tzinfo=None)
    if "expected_silver_rows" in needed:
        values["expected_silver_rows"] = expected_silver_rows(spark, entry, tables, date_from, date_to)
    unknown = needed - set(values)
    if unknown:
        raise suites.SuiteError(f"{suite.path}: unknown $PARAMETER(s) {', '.join(sorted(unknown))}; "
                                f"known: {', '.join(sorted(values))}")
    return values


def expected_silver_rows(spark: SparkSession, entry: Pipeline, tables: PipelineTables,
                         date_from: dt.date, date_to: dt.date) -> int:
    """How many rows silver must hold for the dates, from the other tables: bronze records minus
    the quarantined ones minus repeated event ids. An independent count (it reads only the key
    and the event time out of the raw JSON), so a lost or doubled silver row shows."""
    from pyspark.sql import functions as F

    since = date_from - INGEST_LOOKBACK
    bronze = (spark.read.format("delta").load(str(tables.bronze))
              .where(F.col("ingest_date") >= F.lit(since)).select("source", "position", "value"))
    rejected = (spark.read.format("delta").load(str(tables.quarantine))
                .where(F.col("ingest_date") >= F.lit(since)).select("source", "position"))
    fields = F.from_json("value", f"`{entry.key}` string, `{entry.event_time}` string")
    events = (bronze.join(rejected, on=["source", "position"], how="left_anti")
              .select(fields.alias("e"))
              .select(F.col(f"e.`{entry.key}`").alias("key"),
                      F.to_date(F.try_to_timestamp(F.col(f"e.`{entry.event_time}`"))).alias("event_date"))
              .where(F.col("event_date").between(F.lit(date_from), F.lit(date_to))))
    row = events.agg(F.count_distinct("key")).first()
    return int(row[0]) if row is not None else 0


def _validate(context: AbstractDataContext, pipeline: str, table: str,
              specs: list[suites.ExpectationSpec], frame: DataFrame, parameters: dict[str, Any],
              run_id: str, run_time: dt.datetime) -> tuple[ExpectationSuiteValidationResult, Any]:
    """Validate `frame` with the suite built from `specs`; returns the result and its store key."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )


    name = f"{pipeline}.{table}"
    suite = context.suites.add_or_update(gx.ExpectationSuite(
        name=name, expectations=[_expectation(i, spec) for i, spec in enumerate(specs)],
        meta={"pipeline": pipeline, "table": table}))
    definition = context.validation_definitions.add_or_update(gx.ValidationDefinition(
        name=name, data=gx_context.batch_definition(context, f"{pipeline}.{table}"), suite=suite))
    run = RunIdentifier(run_name=f"{pipeline}-{run_id}", run_time=run_time)
    result = definition.run(batch_parameters={"dataframe": frame}, expectation_parameters=parameters,
                            result_format=RESULT_FORMAT, run_id=run)
    batch_id = next((r.expectation_config.kwargs.get("batch_id") for r in result.results
                     if r.expectation_config is not None), None)
    identifier = ValidationResultIdentifier(
        expectation_suite_identifier=ExpectationSuiteIdentifier(name=name), run_id=run,
        batch_identifier=batch_id)
    return result, identifier


def _expectation(index: int, spec: suites.ExpectationSpec) -> Any:
    from great_expectations.expectations.metadata_types import FailureSeverity
    from great_expectations.expectations.registry import get_expectation_impl

    try:
        cls = get_expectation_impl(spec.type)
    except Exception as err:
        raise suites.SuiteError(f"unknown expectation type {spec.type!r}: {err}") from None
    severity = FailureSeverity.CRITICAL if spec.severity == "fail" else FailureSeverity.WARNING
    return cls(**spec.kwargs, severity=severity, notes=spec.notes,
               meta={"weir_index": index, "weir_severity": spec.severity, "weir_label": spec.label})


def _outcomes(table: str, specs: list[suites.ExpectationSpec],
              result: ExpectationSuiteValidationResult) -> list[ExpectationOutcome]:
    by_index: dict[int, Any] = {}
    for r in result.results:
        config = r.expectation_config
        if config is not None and config.meta and "weir_index" in config.meta:
            by_index[int(config.meta["weir_index"])] = r
    outcomes = []
    for index, spec in enumerate(specs):
        r = by_index.get(index)
        if r is None:   # GE dropped it: count it as failed rather than passing silently
            outcomes.append(ExpectationOutcome(table=table, expectation=spec.label, type=spec.type,
                                               severity=spec.severity, success=False,
                                               error="no result from Great Expectations"))
            continue
        details = r.result or {}
        error = None
        if r.exception_info and r.exception_info.get("raised_exception"):
            error = str(r.exception_info.get("exception_message"))
        kwargs = {k: v for k, v in r.expectation_config.kwargs.items() if k != "batch_id"}
        observed = details.get("observed_value")
        outcomes.append(ExpectationOutcome(
            table=table, expectation=spec.label, type=spec.type, severity=spec.severity,
            success=bool(r.success),
            kwargs=json.loads(json.dumps(kwargs, default=str)),
            observed_value=None if observed is None else json.dumps(observed, default=str),
            unexpected_count=_int(details.get("unexpected_count")),
            element_count=_int(details.get("element_count")),
            error=error))
    return outcomes


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def stream_is_live(home: WeirHome, pipeline: str) -> bool:
    """Whether the pipeline's streaming driver is running (the control plane's one judgement)."""
    return lease.holder(home, pipeline) is not None


def _record(report: DqReport, home: WeirHome) -> None:
    """One event-log entry per run."""
    eventlog.record(report.pipeline, "dq", "success" if report.success else "failed",
                    reason="; ".join(report.failed) or None, home=home,
                    details={"run_id": report.run_id, "from": str(report.date_from),
                             "to": str(report.date_to), "failed": report.failed,
                             "warnings": report.warnings, "docs": str(report.docs_path)})
