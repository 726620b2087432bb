"""Row-level rules in the stream: declared in the catalog entry, quarantine rules route a row to
quarantine with its reason, fail rules stop the batch before anything is written, and each rule's
count is reported. A bad rule is refused when its entry loads."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_jobs import catalog, transforms
from spark_jobs.catalog import CatalogError, RowRule, derived_entry
from spark_jobs.quality import rules, suites

NOW = dt.datetime(2026, 11, 19, 20, 0, tzinfo=dt.UTC)


def bronze(spark: SparkSession, events: list[dict[str, object]]) -> DataFrame:
    rows = [(json.dumps(e), "f.jsonl", i, None, None, None, None, NOW, NOW.date(), None, None)
            for i, e in enumerate(events)]
    return spark.createDataFrame(rows, transforms.BRONZE_SCHEMA)


def event(event_id: str, event_type: str, **extra: object) -> dict[str, object]:
    return {"event_id": event_id, "session_id": "s", "user_id": "u", "content_id": "c001",
            "event_type": event_type, "event_time": "2026-11-19T19:59:00Z", **extra}


def counted(parsed: DataFrame, declared: tuple[RowRule, ...], batch_id: int) -> dict[str, int]:
    """What the stream does per batch: one aggregate of the rule counts, then the check that
    raises on a broken `fail` rule."""
    row = parsed.agg(*rules.metrics(declared)).first()
    counts = {name: int(value) for name, value in (row.asDict() if row else {}).items()}
    rules.check(counts, declared, pipeline="playback", batch_id=batch_id)
    return counts


def test_quarantine_rules_route_rows_and_are_counted(spark: SparkSession) -> None:
    pipeline = catalog.load("playback")
    declared = pipeline.row_rules
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
        counts = counted(parsed, declared, batch_id=0)
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
    declared = (RowRule("known_content", "content_id LIKE 'c%'", "fail"),)
    batch = bronze(spark, [event("a", "start"), {**event("b", "start"), "content_id": "zzz"}])
    parsed = rules.with_rules(transforms.parse(batch, pipeline), declared)

    with pytest.raises(rules.RowRuleViolation, match=r"known_content \(1 row"):
        counted(parsed, declared, batch_id=7)
    assert transforms.rejects(parsed).count() == 0      # fail rules never quarantine


def write_entry(conf: Path, name: str, row_rules: str) -> None:
    """A catalog entry `name`: the real playback entry in tables of its own, with `row_rules`."""
    derived_entry(conf, name, events_table=repr(f"{name}_events"), row_rules=row_rules)


def test_a_rule_declared_in_a_catalog_entry_is_applied(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_entry(tmp_path, "ruled", "(RowRule('not_on_tv', \"device <> 'tv'\"),)")
    monkeypatch.setenv("WEIR_CONF", str(tmp_path))
    pipeline = catalog.load("ruled")
    declared = pipeline.row_rules                        # what the stream and the back-fill apply
    assert declared == (RowRule("not_on_tv", "device <> 'tv'", "quarantine"),)
    batch = bronze(spark, [event("phone", "start", device="phone"), event("tv", "start", device="tv"),
                           event("unknown", "start")])
    parsed = rules.with_rules(transforms.parse(batch, pipeline), declared).persist()
    try:
        counts = counted(parsed, declared, batch_id=0)
        rejected = {json.loads(r["value"])["event_id"]: r["reason"]
                    for r in transforms.rejects(parsed).collect()}
        kept = {r["event_id"] for r in transforms.valid(parsed).collect()}
    finally:
        parsed.unpersist()

    assert counts == {"dq_not_on_tv": 1}
    assert rejected == {"tv": "rule not_on_tv"}
    assert kept == {"phone", "unknown"}                  # a null condition is acceptable


@pytest.mark.parametrize(("row_rules", "message"), [
    ('(RowRule("Not-Snake", "true"),)', "name must be lower_snake_case, not 'Not-Snake'"),
    ('(RowRule("r", "true", "drop"),)', "row rule r: action must be one of quarantine, fail, not 'drop'"),
    ('(RowRule("r", " "),)', "row rule r: condition must be a Spark SQL condition"),
    ('(RowRule("r", "true"), RowRule("r", "false"))', "pipeline bad: row rule(s) declared twice: r"),
    ('[RowRule("r", "true")]', "pipeline bad: row_rules must be a tuple of RowRule"),
])
def test_a_bad_row_rule_is_refused_when_its_entry_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row_rules: str, message: str) -> None:
    write_entry(tmp_path, "bad", row_rules)
    monkeypatch.setenv("WEIR_CONF", str(tmp_path))
    with pytest.raises(CatalogError) as caught:
        catalog.load("bad")
    assert str(caught.value).startswith(f"{tmp_path / 'pipelines' / 'bad.py'}: ")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_suite_file_with_rules_is_refused_with_where_they_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_entry(tmp_path, "old", "()")
    (tmp_path / "pipelines" / "old.expectations.yaml").write_text(
        "rules:\n  - {name: r, condition: 'true', action: quarantine}\nsilver: []\ngold: []\n")
    monkeypatch.setenv("WEIR_CONF", str(tmp_path))
    with pytest.raises(suites.SuiteError, match=r"row rules belong to the catalog entry now.*old\.py"):
        suites.load("old")
