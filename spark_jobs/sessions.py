"""Keyed state with event-time timeouts: one row per session (`Sessions` in the catalog).

One state function, `weir.Sessions` in the JVM (infra/jvm/weir/Sessions.java), turns a session's
events into its state; every measure is commutative (min, max, sums, counts), so the state depends
on the set of events, not on the batches or the order they came in. Two doors use it:

- the stream (`stream_rows`): silver → `transformWithState` keyed by the session, the state in a
  `ValueState` (`state_schema`), one event-time timer per session at its last event + gap. A
  session closes on its end event (`ended`) or when the watermark passes the timer (`timed_out`);
  a late event within the watermark still updates it, and its state is kept one gap after closing
  so that it can, then dropped. The timer is a function of the state (last event + gap, or two
  gaps once timed out), so the processor never lists its timers to replace one;
- the back-fill and the rebuilds (`batch_rows`): silver of a date range, sorted by session within
  partitions, the same fold over all of a session's events; `timed_out` when its timer would have
  fired by the stream's watermark as of silver's newest event.

Until 2026-11 the function ran in Python (`transformWithStateInPySpark`). Spark refuses to restart
a checkpoint of that operator under this one, so the driver starts such a sessions query afresh,
its table rebuilt from silver (`holds_python_state`, `stream.retire_python_sessions_state`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark_jobs.catalog import interval_ms
from spark_jobs.checkpoints.layout import operator_name, state_operators

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame

    from spark_jobs.catalog import Pipeline, Sessions

STATE_NAME = "session"
# The physical operator of the Python state function a checkpoint from before 2026-11 holds.
PYTHON_OPERATOR = "transformWithStateInPySparkExec"
ACTIVE, ENDED, TIMED_OUT = "active", "ended", "timed_out"
# The fixed part of the state and of the operator's output, in the order weir.Sessions reads it;
# the catalog's `carry` columns follow.
_COUNTS = ("first_ms", "last_ms", "start_ms", "first_frame_ms", "end_ms", "events", "errors",
           "rebuffer_ms", "bitrate_sum", "bitrate_count")
_STATE_FIELDS = [StructField(name, LongType()) for name in _COUNTS] + [
    StructField("max_position_s", DoubleType()), StructField("timed_out", BooleanType())]


def holds_python_state(checkpoint: Path) -> bool:
    """Whether a sessions query's checkpoint holds state of the Python state function that ran
    until 2026-11, which the JVM's operator cannot restart on."""
    return any(operator_name(operator) == PYTHON_OPERATOR for operator in state_operators(checkpoint))


def state_schema(spec: Sessions) -> StructType:
    """The schema of a session's `ValueState`: what the checkpoint stores per session."""
    return StructType([*_STATE_FIELDS, *(StructField(c, StringType()) for c in spec.carry)])


def input_columns(spec: Sessions) -> list[str]:
    """The silver columns the state function reads (besides the event time as `event_ms`)."""
    return list(dict.fromkeys(["event_type", spec.rebuffer_ms, spec.bitrate_kbps, spec.position_s,
                               *spec.carry]))


def _events(silver: DataFrame, pipeline: Pipeline) -> DataFrame:
    spec = _spec(pipeline)
    # The event-time column stays although the state function reads only `event_ms`: the stream's
    # watermark is defined on it, and without it the stateful operator no longer drops events
    # behind the watermark (a late event then reopened and closed a session in the same batch).
    return silver.select(spec.key, pipeline.event_time, *input_columns(spec),
                         F.unix_millis(pipeline.event_time).alias("event_ms"))


def _spec(pipeline: Pipeline) -> Sessions:
    if pipeline.sessions is None:
        raise ValueError(f"pipeline {pipeline.name} declares no sessions")
    return pipeline.sessions


def session_rows(raw: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The state function's output as the session table's rows (times as timestamps, ratios)."""
    spec = _spec(pipeline)

    def ts(name: str) -> Column:
        return F.timestamp_millis(F.col(name))

    watched_ms = F.col("max_position_s") * 1000
    stalled = F.col("rebuffer_ms").cast("double")
    closed = F.col("state") != F.lit(ACTIVE)
    return raw.select(
        spec.key, *spec.carry, "state",
        ts("first_ms").alias("first_event_time"), ts("last_ms").alias("last_event_time"),
        ts("end_ms").alias("end_time"),
        "events",
        F.col("max_position_s").alias("watch_time_s"),
        F.when(F.col("first_frame_ms") >= F.col("start_ms"),
               F.col("first_frame_ms") - F.col("start_ms")).alias("time_to_first_frame_ms"),
        "rebuffer_ms",
        F.when(stalled + F.coalesce(watched_ms, F.lit(0.0)) > 0,
               stalled / (stalled + F.coalesce(watched_ms, F.lit(0.0)))).alias("rebuffer_ratio"),
        F.when(F.col("bitrate_count") > 0,
               F.col("bitrate_sum") / F.col("bitrate_count")).alias("avg_bitrate_kbps"),
        "errors",
        (closed & F.col("first_frame_ms").isNull()).alias("exit_before_video_start"),
        F.to_date(ts("first_ms")).alias("event_date"),
    )


def stream_rows(silver: DataFrame, pipeline: Pipeline) -> DataFrame:
    """A silver stream → the session rows it updates in each micro-batch (update mode)."""
    spec = _spec(pipeline)
    events = _events(silver.withWatermark(pipeline.event_time, spec.watermark), pipeline)
    raw = _jvm(events).weir.Sessions.streamRows(events._jdf, _spec_json(spec))
    return session_rows(_frame(events, raw), pipeline)


def batch_rows(silver: DataFrame, pipeline: Pipeline, horizon_ms: int | None) -> DataFrame:
    """Silver in batch → one row per session, by the same fold as the stream; a session without
    an end event has `timed_out` when its last event + gap is no later than `horizon_ms` (the
    stream's watermark as of the newest event in silver; None: nothing has timed out).

    The events are hashed to partitions by session and sorted by it there; one pass folds a
    partition session after session, holding one session's state at a time."""
    spec = _spec(pipeline)
    events = _events(silver, pipeline)
    horizon = None if horizon_ms is None else _jvm(events).java.lang.Long(horizon_ms)
    raw = _jvm(events).weir.Sessions.batchRows(events._jdf, _spec_json(spec), horizon)
    return session_rows(_frame(events, raw), pipeline)


def _spec_json(spec: Sessions) -> str:
    """The catalog's entry as `weir.Sessions.Spec` reads it, the state's schema included."""
    return json.dumps({
        "key": spec.key, "gap_ms": interval_ms(spec.gap), "start_event": spec.start_event,
        "first_frame_event": spec.first_frame_event, "end_event": spec.end_event,
        "error_event": spec.error_event, "rebuffer_event": spec.rebuffer_event,
        "rebuffer_ms": spec.rebuffer_ms, "bitrate_kbps": spec.bitrate_kbps,
        "position_s": spec.position_s, "carry": list(spec.carry),
        "state_schema": state_schema(spec).json()})


def _jvm(frame: DataFrame) -> Any:
    """The JVM of `frame`'s session (py4j's view of its classes)."""
    return frame.sparkSession.sparkContext._jvm


def _frame(frame: DataFrame, jdf: Any) -> DataFrame:
    """A JVM Dataset as a DataFrame of `frame`'s session."""
    from pyspark.sql import DataFrame as Frame

    return Frame(jdf, frame.sparkSession)


def watermark_horizon(silver: DataFrame, pipeline: Pipeline) -> int | None:
    """The stream's watermark (epoch ms) once it has read all of `silver`: its newest event time
    less the sessions' watermark delay (None for an empty silver).

    The newest event time stands under the newest `event_date` (the event time's date, silver's
    partition), which Delta reads from its log: only that date's event times are read, not the
    whole history's (0.8 s against 2.0 s on a silver of 30 days, 29 M rows: docs/performance.md).
    Should every row of that date be deleted (files whose deletion vectors leave none), all of
    `silver` is read."""
    newest_date = silver.agg(F.max("event_date")).first()[0]
    if newest_date is None:
        return None
    newest = F.max(F.unix_millis(pipeline.event_time))
    latest = silver.where(F.col("event_date") == F.lit(newest_date)).agg(newest).first()[0]
    if latest is None:
        latest = silver.agg(newest).first()[0]
    return horizon_after(latest, pipeline)


def horizon_after(newest_ms: int | None, pipeline: Pipeline) -> int | None:
    """The sessions' watermark (epoch ms) once the stream has seen an event at `newest_ms` (None:
    none yet)."""
    return None if newest_ms is None else int(newest_ms) - interval_ms(_spec(pipeline).watermark)


def table_key(pipeline: Pipeline) -> tuple[str, ...]:
    return (_spec(pipeline).key,)
