"""The verdict of a DQ run and how `weir dq` shows it: only `fail`-severity failures fail the run,
and each is named with its table (no Spark needed)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from spark_jobs.commands.dq import show
from spark_jobs.quality import DqReport, ExpectationOutcome


def outcome(table: str, expectation: str, severity: str, success: bool,
            **extra: object) -> ExpectationOutcome:
    return ExpectationOutcome(table=table, expectation=expectation, type=expectation.split("(")[0],
                              severity=severity, success=success, **extra)  # type: ignore[arg-type]


def report(*outcomes: ExpectationOutcome) -> DqReport:
    return DqReport(run_id="r1", pipeline="playback", run_time=dt.datetime(2026, 11, 19, tzinfo=dt.UTC),
                    date_from=dt.date(2026, 11, 19), date_to=dt.date(2026, 11, 19), outcomes=outcomes,
                    docs_path=Path("/w/dq/docs/index.html"), stream_running=False, duration_s=1.0)


def test_only_fail_severity_failures_fail_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    warned = report(outcome("silver.e", "expect_column_values_to_be_between(event_time)", "warn", False,
                            unexpected_count=3, element_count=10),
                    outcome("gold.g", "expect_column_values_to_be_between(events)", "fail", True))
    assert warned.success and warned.failed == []
    assert warned.warnings == ["silver.e: expect_column_values_to_be_between(event_time)"]

    failed = report(outcome("gold.g", "expect_compound_columns_to_be_unique(window_start, content_id, cdn)",
                            "fail", False, error="[DELTA_X] boom"),
                    outcome("silver.e", "expect_table_row_count_to_equal()", "fail", False,
                            observed_value="5"))
    assert not failed.success
    assert failed.failed == ["gold.g: expect_compound_columns_to_be_unique(window_start, content_id, cdn)",
                             "silver.e: expect_table_row_count_to_equal()"]
    assert json.loads(json.dumps(failed.to_dict()))["failed"] == failed.failed

    show(failed)
    captured = capsys.readouterr()
    assert "gold.g: expect_compound_columns_to_be_unique(window_start, content_id, cdn)" in captured.err
    assert "silver.e: expect_table_row_count_to_equal()" in captured.err
    assert "[DELTA_X] boom" in captured.out.replace("\n", "")
