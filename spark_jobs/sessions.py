"""Keyed state with event-time timeouts: one row per session (`Sessions` in the catalog).

One pure state function, `SessionState.fold`, turns a session's events into its row; every
measure is commutative (min, max, sums, counts), so the row depends on the set of events, not on
the batches or the order they came in. Two doors use it:

- the stream (`stream_rows`): silver → `transformWithState` (Spark 4, Row-based) keyed by the
  session, the accumulator in a `ValueState`, one event-time timer per session at its last event
  + gap. A session closes on its end event (`ended`) or when the watermark passes the timer
  (`timed_out`); a late event within the watermark still updates it, and its state is kept one
  gap after closing so that it can, then dropped;
- the back-fill (`batch_rows`): silver of a date range, sorted by session within partitions
  (`mapInArrow`), the same fold over all of a session's events; `timed_out` when its timer would
  have fired by the stream's watermark as of silver's newest event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import Column, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

    from spark_jobs.catalog import Pipeline, Sessions

STATE_NAME = "session"
_NO_SESSION = object()          # the key before a partition's first session (a key may be null)
_ROWS_PER_OUTPUT_BATCH = 10_000
ACTIVE, ENDED, TIMED_OUT = "active", "ended", "timed_out"
# The fixed part of the state and of the operator's output; the catalog's `carry` columns follow.
_COUNTS = ("first_ms", "last_ms", "start_ms", "first_frame_ms", "end_ms", "events", "errors",
           "rebuffer_ms", "bitrate_sum", "bitrate_count")
_STATE_FIELDS = [StructField(name, LongType()) for name in _COUNTS] + [
    StructField("max_position_s", DoubleType()), StructField("timed_out", BooleanType())]


def interval_ms(text: str) -> int:
    """A catalog interval ("30 minutes") in milliseconds."""
    amount, unit = text.split()
    seconds = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}[unit.rstrip("s")]
    return int(float(amount) * seconds * 1000)


def state_schema(spec: Sessions) -> StructType:
    """The schema of a session's `ValueState`: what the checkpoint stores per session."""
    return StructType([*_STATE_FIELDS, *(StructField(c, StringType()) for c in spec.carry)])


def raw_schema(spec: Sessions) -> StructType:
    """What the state function emits per session: the key, the state label and the state."""
    return StructType([StructField(spec.key, StringType()), StructField("state", StringType()),
                       *state_schema(spec).fields])


def _min(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


@dataclasses.dataclass
class SessionState:
    """The accumulator of one session; every field merges commutatively."""

    first_ms: int | None = None
    last_ms: int | None = None
    start_ms: int | None = None
    first_frame_ms: int | None = None
    end_ms: int | None = None
    events: int = 0
    errors: int = 0
    rebuffer_ms: int = 0
    bitrate_sum: int = 0
    bitrate_count: int = 0
    max_position_s: float | None = None
    timed_out: bool = False
    carry: tuple[str | None, ...] = ()

    @classmethod
    def from_tuple(cls, values: tuple[Any, ...] | None, spec: Sessions) -> SessionState:
        if values is None:
            return cls(carry=(None,) * len(spec.carry))
        fixed = len(_STATE_FIELDS)
        return cls(*values[:fixed], carry=tuple(values[fixed:]))

    def as_tuple(self) -> tuple[Any, ...]:
        return (*(getattr(self, n) for n in _COUNTS), self.max_position_s, self.timed_out, *self.carry)

    def fold(self, events: Iterable[dict[str, Any]], spec: Sessions) -> SessionState:
        """The state after `events` (dicts of `input_columns`): the one state function."""
        for e in events:
            kind, at = e["event_type"], e["event_ms"]
            self.first_ms, self.last_ms = _min(self.first_ms, at), _max(self.last_ms, at)
            self.events += 1
            if kind == spec.start_event:
                self.start_ms = _min(self.start_ms, at)
            elif kind == spec.first_frame_event:
                self.first_frame_ms = _min(self.first_frame_ms, at)
            elif kind == spec.end_event:
                self.end_ms = _min(self.end_ms, at)
            elif kind == spec.error_event:
                self.errors += 1
            if kind == spec.rebuffer_event and e[spec.rebuffer_ms] is not None:
                self.rebuffer_ms += int(e[spec.rebuffer_ms])
            if e[spec.bitrate_kbps] is not None:
                self.bitrate_sum += int(e[spec.bitrate_kbps])
                self.bitrate_count += 1
            self.max_position_s = _max(self.max_position_s, e[spec.position_s])
            self.carry = tuple(_min(old, e[c]) for old, c in zip(self.carry, spec.carry, strict=True))
        return self

    def label(self) -> str:
        return ENDED if self.end_ms is not None else TIMED_OUT if self.timed_out else ACTIVE

    def timer_ms(self, gap_ms: int) -> int:
        """When the stream's timer of this state fires: a gap after its last event, and once it
        has timed out, a gap after that (`SessionProcessor`). The timer is a function of the
        state, so the processor never has to list its timers to replace one."""
        assert self.last_ms is not None
        return self.last_ms + (2 if self.timed_out else 1) * gap_ms

    def output(self, key: str, spec: Sessions) -> dict[str, Any]:
        """The state function's row (`raw_schema`) for session `key`."""
        return dict(zip(raw_schema(spec).names, (key, self.label(), *self.as_tuple()), strict=True))


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


class SessionProcessor(StatefulProcessor):
    """The stream's door to `SessionState.fold`: the state in a `ValueState`, one event-time timer
    per session (`SessionState.timer_ms`: last event + gap) that times it out, and, once it is
    closed, drops it a gap later.

    Each state or timer call is a round trip to the JVM's state server, so a session costs as few
    as the state allows: its state read and written once per batch, and its timer replaced only
    when it moves (known from the state, never listed)."""

    def __init__(self, spec: Sessions) -> None:
        self.spec = spec
        self.gap_ms = interval_ms(spec.gap)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState(STATE_NAME, state_schema(self.spec))

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        held = self.state.get()
        session = SessionState.from_tuple(held, self.spec)
        held_timer = None if held is None else session.timer_ms(self.gap_ms)
        session.fold((row.asDict() for row in rows), self.spec)
        session.timed_out = False          # an event reopens a session that had timed out
        self.state.update(session.as_tuple())
        timer = session.timer_ms(self.gap_ms)
        if timer != held_timer:
            if held_timer is not None:
                self.handle.deleteTimer(held_timer)
            self.handle.registerTimer(timer)
        yield Row(**session.output(key[0], self.spec))

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        held = self.state.get()
        if held is None:
            return
        session = SessionState.from_tuple(held, self.spec)
        if expiredTimerInfo.getExpiryTimeInMs() != session.timer_ms(self.gap_ms):
            return                          # not the state's timer: only its own one acts
        if session.label() != ACTIVE:       # closed a gap ago: no late event can reach it now
            self.state.clear()
            return
        session.timed_out = True
        self.state.update(session.as_tuple())
        self.handle.registerTimer(session.timer_ms(self.gap_ms))
        yield Row(**session.output(key[0], self.spec))

    def close(self) -> None:
        pass


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
    raw = events.groupBy(spec.key).transformWithState(
        statefulProcessor=SessionProcessor(spec), outputStructType=raw_schema(spec),
        outputMode="Update", timeMode="EventTime")
    return session_rows(raw, pipeline)


def batch_rows(silver: DataFrame, pipeline: Pipeline, horizon_ms: int | None) -> DataFrame:
    """Silver in batch → one row per session, by the same fold as the stream; a session without
    an end event has `timed_out` when its last event + gap is no later than `horizon_ms` (the
    stream's watermark as of the newest event in silver; None: nothing has timed out).

    The events are hashed to partitions by session and sorted by it there, so one Python call
    folds a whole partition, session after session, as its Arrow batches stream by (a call per
    session, `groupBy().applyInArrow`, cost four times as much at 1 M events). Only one session's
    state is held at a time; the fold is commutative, so the order within a session is free."""
    spec = _spec(pipeline)
    gap_ms = interval_ms(spec.gap)
    schema = raw_schema(spec)
    arrow_schema = _arrow_schema(schema)

    def fold_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out: list[dict[str, Any]] = []
        key: Any = _NO_SESSION
        session = SessionState()

        def close() -> None:
            assert session.last_ms is not None
            session.timed_out = horizon_ms is not None and session.last_ms + gap_ms <= horizon_ms
            out.append(session.output(key, spec))

        for batch in batches:
            for event in batch.to_pylist():
                if event[spec.key] != key:
                    if key is not _NO_SESSION:
                        close()
                    key, session = event[spec.key], SessionState.from_tuple(None, spec)
                session.fold((event,), spec)
            if len(out) >= _ROWS_PER_OUTPUT_BATCH:
                yield pa.RecordBatch.from_pylist(out, schema=arrow_schema)
                out = []
        if key is not _NO_SESSION:
            close()
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=arrow_schema)

    events = _events(silver, pipeline).repartition(spec.key).sortWithinPartitions(spec.key)
    return session_rows(events.mapInArrow(fold_partition, schema), pipeline)


def _arrow_schema(schema: StructType) -> pa.Schema:
    kinds = {"string": pa.string(), "bigint": pa.int64(), "double": pa.float64(), "boolean": pa.bool_()}
    return pa.schema([pa.field(f.name, kinds[f.dataType.simpleString()]) for f in schema.fields])


def watermark_horizon(silver: DataFrame, pipeline: Pipeline) -> int | None:
    """The stream's watermark (epoch ms) once it has read all of `silver`: its newest event time
    less the sessions' watermark delay (None for an empty silver)."""
    newest = silver.agg(F.max(F.unix_millis(pipeline.event_time))).first()[0]
    return None if newest is None else int(newest) - interval_ms(_spec(pipeline).watermark)


def table_key(pipeline: Pipeline) -> tuple[str, ...]:
    return (_spec(pipeline).key,)
