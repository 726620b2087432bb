"""What a DQ run found: one outcome per expectation, and whether the run as a whole passes.

A run passes when no `fail`-severity expectation failed; `warn` failures are reported and stored
but do not fail it. Plain dataclasses, no Spark or Great Expectations, so the Airflow task that
calls `run_dq` can read and serialise the report anywhere.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spark_jobs.quality.suites import Severity


@dataclass(frozen=True)
class ExpectationOutcome:
    """The result of one expectation on one table in one run."""

    table: str                 # "<layer>.<table>", e.g. "gold.playback_qoe_1m"
    expectation: str           # "type(columns)", e.g. "expect_column_values_to_be_unique(event_id)"
    type: str
    severity: Severity
    success: bool
    kwargs: dict[str, Any] = field(default_factory=dict)
    observed_value: str | None = None
    unexpected_count: int | None = None
    element_count: int | None = None
    error: str | None = None   # the exception text when the expectation could not be evaluated

    @property
    def name(self) -> str:
        """How a failure is named to people: `table: expectation`."""
        return f"{self.table}: {self.expectation}"


@dataclass(frozen=True)
class DqReport:
    """The outcome of `run_dq`: per-expectation results, where the Data Docs are, and the verdict."""

    run_id: str
    pipeline: str
    run_time: dt.datetime
    date_from: dt.date
    date_to: dt.date
    outcomes: tuple[ExpectationOutcome, ...]
    docs_path: Path
    stream_running: bool
    duration_s: float
    row_counts: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        """Every failed `fail`-severity expectation, as `table: expectation`."""
        return [o.name for o in self.outcomes if not o.success and o.severity == "fail"]

    @property
    def warnings(self) -> list[str]:
        """Every failed `warn`-severity expectation, as `table: expectation`."""
        return [o.name for o in self.outcomes if not o.success and o.severity == "warn"]

    @property
    def success(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: dates as ISO text, paths as strings."""
        return {
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "run_time": self.run_time.isoformat(),
            "date_from": self.date_from.isoformat(),
            "date_to": self.date_to.isoformat(),
            "success": self.success,
            "failed": self.failed,
            "warnings": self.warnings,
            "docs_path": str(self.docs_path),
            "stream_running": self.stream_running,
            "duration_s": round(self.duration_s, 3),
            "row_counts": dict(self.row_counts),
            "outcomes": [asdict(o) for o in self.outcomes],
        }
