"""The event log: one row per lifecycle action (deploy, adopt, stop, restart with its reason,
back-fill, DQ run, backup, restore, maintenance, ...): who, what, when, outcome.

It is the Delta table `WEIR_HOME/tables/platform/event_log`, appended with delta-rs so Airflow
tasks record events without a JVM, and readable by Spark (`weir sql`) like any table.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import logging
import os
from functools import cache
from typing import TYPE_CHECKING, Any

from spark_jobs.control import platform_tables
from spark_jobs.home import WeirHome
from spark_jobs.settings import settings

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

log = logging.getLogger(__name__)
TABLE = "event_log"


@cache
def schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("event_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("pipeline", pa.string(), nullable=False),
        pa.field("action", pa.string(), nullable=False),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("actor", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("details", pa.string()),
    ])


def table_path(home: WeirHome | None = None) -> Path:
    return (home or WeirHome.from_env()).table("platform", TABLE)


def default_actor() -> str:
    """`$WEIR_ACTOR` when set (Airflow sets it to the triggering user), else the OS user."""
    actor = settings().actor
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid:{os.getuid()}"


def record(pipeline: str, action: str, outcome: str, *, actor: str | None = None,
           reason: str | None = None, details: dict[str, Any] | None = None,
           home: WeirHome | None = None) -> None:
    """Append one event (time = now, UTC). `details` is stored as a JSON string."""
    row = {
        "event_time": dt.datetime.now(dt.UTC),
        "pipeline": pipeline,
        "action": action,
        "outcome": outcome,
        "actor": actor or default_actor(),
        "reason": reason,
        "details": json.dumps(details, default=str, sort_keys=True) if details is not None else None,
    }
    platform_tables.append(table_path(home), [row], schema())
    log.info("%s %s: %s (actor %s%s)", pipeline, action, outcome, row["actor"],
             f", reason: {reason}" if reason else "")


def read(home: WeirHome | None = None, pipeline: str | None = None) -> list[dict[str, Any]]:
    """The events (oldest first), of one pipeline or all; `details` decoded back into a dict."""
    rows = platform_tables.read(table_path(home), equals={"pipeline": pipeline} if pipeline else None)
    for row in rows:
        if row.get("details"):
            row["details"] = json.loads(row["details"])
    return sorted(rows, key=lambda r: r["event_time"])
