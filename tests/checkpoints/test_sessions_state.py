"""The checkpoint tools know the sessions query's keyed state: a checkpoint from before it
existed still passes the deploy gate and starts it (its table rebuilt from silver, its state
holding what arrives afterwards), `inspect` shows its state rows and schema,
and `compat` refuses a changed state schema with the reason."""

from __future__ import annotations

import dataclasses

import pytest

from spark_jobs.checkpoints.compat import compat
from spark_jobs.checkpoints.inspection import inspect
from spark_jobs.topology import checkpoint_location
from tests.helpers import table

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
