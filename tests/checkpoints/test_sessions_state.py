"""The checkpoint tools know the sessions query's keyed state: a checkpoint from before it
existed still passes the deploy gate and starts it (its table rebuilt from silver, its state
holding what arrives afterwards), `inspect` shows its state rows and schema,
and `compat` refuses a changed state schema with the reason; a checkpoint of the Python state
function sessions ran in until 2026-11 restarts from silver."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

from spark_jobs import sessions
from spark_jobs.checkpoints import backups
from spark_jobs.checkpoints.compat import compat
from spark_jobs.checkpoints.inspection import inspect
from spark_jobs.topology import checkpoint_location
from tests.helpers import table
from tests.integration.batches import differs

pytestmark = pytest.mark.slow


def test_sessions_state_is_inspected_and_a_changed_state_schema_is_refused(playback) -> None:
    spark, home, pipeline = playback.spark, playback.home, playback.pipeline
    assert pipeline.sessions is not None
    playback.land("a", hour=0, files=1)
    # a checkpoint written by the code before the sessions query existed
    playback.run(dataclasses.replace(pipeline, sessions=None))
    assert not checkpoint_location(home, pipeline, "sessions").exists()
    before = compat(spark, home, pipeline)
    assert before["verdict"] == "compatible", before["reasons"]

    # the new query's table is rebuilt from silver in batch, and the query starts after it
    playback.run()
    silver = table(spark, playback.tables.silver)
    sessions = table(spark, playback.tables.sessions)
    rebuilt = {r[0] for r in silver.select("session_id").distinct().collect()}
    assert sessions.count() == sessions.select("session_id").distinct().count() == len(rebuilt)

    # sessions that arrive afterwards are kept in the query's keyed state
    playback.land("b", hour=1, files=1)
    playback.run()
    streamed = {r[0] for r in table(spark, playback.tables.silver).select("session_id").distinct()
                .collect()} - rebuilt
    assert streamed
    [operator] = inspect(home, pipeline, spark)["queries"]["sessions"]["state_operators"]
    state = operator["state_variables"]["session"]
    assert state["rows"] == len(streamed), operator      # none of them is a gap past the watermark yet
    assert state["key_schema"] == "struct<session_id:string>"
    assert "first_ms:bigint" in state["value_schema"] and "timed_out:boolean" in state["value_schema"]
    assert compat(spark, home, pipeline)["verdict"] == "compatible"

    narrower = dataclasses.replace(pipeline.sessions, carry=("user_id",))
    changed = dataclasses.replace(pipeline, sessions=narrower)
    verdict = compat(spark, home, changed)
    # the table's schema changes too (a full refresh); the state's own reason is what is tested
    state_reasons = [r for r in verdict["reasons"]
                     if r["query"] == "sessions" and r["verdict"] == "needs state reset"]
    assert verdict["verdict"] != "compatible"
    assert len(state_reasons) == 1, verdict["reasons"]
    assert "state schema of session" in state_reasons[0]["reason"]
    assert "content_id string" in state_reasons[0]["reason"]


def python_session_state(spec) -> StatefulProcessor:
    """The shape of the Python state function sessions ran in until 2026-11: a `session`
    ValueState of `sessions.state_schema`, keyed by the session (its fold is beside the point).
    Made in a function, so that the worker unpickles the class by value (it cannot import a test
    module)."""

    class PythonSessionState(StatefulProcessor):
        def init(self, handle) -> None:
            self.state = handle.getValueState(sessions.STATE_NAME, sessions.state_schema(spec))

        def handleInputRows(self, key, rows, timerValues):
            at = [row.event_ms for row in rows]
            self.state.update((min(at), max(at), None, None, None, len(at), 0, 0, 0, 0, None, False,
                               *(None for _ in spec.carry)))
            yield Row(session_id=key[0])

        def close(self) -> None:
            pass

    return PythonSessionState()


def test_a_sessions_checkpoint_of_the_python_state_function_restarts_from_silver(playback) -> None:
    spark, home, pipeline = playback.spark, playback.home, playback.pipeline
    spec = pipeline.sessions
    assert spec is not None
    playback.land("a", hour=0, files=1)
    playback.run()
    # the sessions checkpoint as the Python operator wrote it, over the same silver
    folder = checkpoint_location(home, pipeline, "sessions")
    shutil.rmtree(folder)
    silver = (spark.readStream.format("delta").load(str(playback.tables.silver))
              .withWatermark(pipeline.event_time, spec.watermark)
              .select(spec.key, pipeline.event_time, F.unix_millis(pipeline.event_time).alias("event_ms")))
    old = (silver.groupBy(spec.key)
           .transformWithState(python_session_state(spec), "session_id string", "Update", "EventTime")
           .writeStream.format("noop").outputMode("update").trigger(availableNow=True)
           .option("checkpointLocation", str(folder)).start())
    old.awaitTermination()
    assert sessions.holds_python_state(folder)
    verdict = compat(spark, home, pipeline)
    assert verdict["verdict"] == "compatible", verdict["reasons"]
    assert "Python state function" in verdict["on_start"]["sessions"]

    playback.land("b", hour=1, files=1)
    playback.run()       # Spark refuses the Python operator's state under the JVM's: a fresh start
    assert not sessions.holds_python_state(folder)
    [backup] = [b for b in backups.list_backups(home, pipeline.name) if "JVM" in b.kind]
    assert sessions.holds_python_state(home.backups(pipeline.name) / backup.id / "checkpoints" / "sessions")
    got, silver_now = table(spark, playback.tables.sessions), table(spark, playback.tables.silver)
    want = silver_now.select(spec.key).distinct().count()
    assert got.count() == got.select(spec.key).distinct().count() == want
    exact = sessions.batch_rows(silver_now, pipeline, sessions.watermark_horizon(silver_now, pipeline))
    assert differs(got, exact.select(*got.columns)) == ""
