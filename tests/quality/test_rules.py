"""Row-level rules in the stream: quarantine rules route a row to quarantine with its reason, fail
rules stop the batch before anything is written, and each rule's count is reported."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_jobs import catalog, transforms
from spark_jobs.quality import rules, suites

NOW = dt.datetime(2026, 11, 19, 20, 0, tzinfo=dt.UTC)


def bronze(spark: SparkSession, events: list[dict[str, object]]) -> DataFrame:
    rows = [(json.dumps(e), "f.jsonl", i, None, None, None, None, NOW, NOW.date(), None)
            for i, e in enumerate(events)]
    return spark.createDataFrame(rows, transforms.BRONZE_SCHEMA)


def event(event_id: str, event_type: str, **extra: object) -> dict[str, object]:
    return {"event_id": event_id, "session_id": "s", "user_id": "u", "content_id": "c001",
            "event_type": event_type, "event_time": "2026-11-19T19:59:00Z", **extra}


def test_quarantine_rules_route_rows_and_are_counted(spark: SparkSession) -> None:
    pipeline = catalog.load("playback")
    declared = suites.row_rules("playback")
    assert {r.name for r in declared} >= {"buffer_end_has_duration", "error_has_code"}
    batch = bronze(spark, [
        event("ok-1", "start"),
        event("ok-2", "buffer_end", buffer_ms=1200),
        event("bad-1", "buffer_end"),                       # no buffer_ms
        event("bad-2", "error"),                            # no error_code
        event("ok-3", "error", error_code="E1"),
        {"event_id": "contract", "event_type": "rewind"},   # rejected by the contract already
    ])
    parsed = rules.with_rules(transforms.parse(batch, pipeline), declared).persist()
    try:
        counts = rules.count_and_check(parsed, declared, pipeline="playback", batch_id=0)
        rejected = {r["value"] and json.loads(r["value"])["event_id"]: r["reason"]
                    for r in transforms.rejects(parsed).collect()}
        kept = {r["event_id"] for r in transforms.valid(parsed).collect()}
    finally:
        parsed.unpersist()

    assert counts == {"dq_buffer_end_has_duration": 1, "dq_error_has_code": 1}
    assert kept == {"ok-1", "ok-2", "ok-3"}
    assert rejected["bad-1"] == "rule buffer_end_has_duration"
    assert rejected["bad-2"] == "rule error_has_code"
    assert "rule" not in rejected["contract"]            # contract reasons stay as they were


def test_a_fail_rule_stops_the_batch(spark: SparkSession) -> None:
    pipeline = catalog.load("playback")
    declared = (suites.RowRule("known_content", "content_id LIKE 'c%'", "fail"),)
    batch = bronze(spark, [event("a", "start"), {**event("b", "start"), "content_id": "zzz"}])
    parsed = rules.with_rules(transforms.parse(batch, pipeline), declared)

    with pytest.raises(rules.RowRuleViolation, match=r"known_content \(1 row"):
        rules.count_and_check(parsed, declared, pipeline="playback", batch_id=7)
    assert transforms.rejects(parsed).count() == 0      # fail rules never quarantine
