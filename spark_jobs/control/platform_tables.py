"""Append-only Delta tables of the platform itself (`tables/platform/...`), written with delta-rs
(`deltalake`), so Airflow tasks, triggers and listener threads write them without a JVM; Spark
reads them like any other Delta table.

Appends never conflict logically, but two writers may race on the same table version (or on
creating the table); delta-rs retries commit conflicts itself and `append` adds a bounded retry
around the whole write for the creation race.

`read` and `query` read them, and any other Delta table a process must read without a JVM (a
benchmark's or a test's exactly-once count), through delta-rs's own query engine.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 6
COMMIT_RETRIES = 20


def append(path: Path, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    """Append `rows` (dicts following `schema`) to the Delta table at `path`, creating it first
    if needed; retries a bounded number of times on commit conflicts."""
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from deltalake.exceptions import CommitFailedError, DeltaError

    if not rows:
        return
    data = pa.Table.from_pylist(rows, schema=schema)
    path.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            write_deltalake(str(path), data, mode="append", schema_mode="merge",
                            commit_properties=CommitProperties(max_commit_retries=COMMIT_RETRIES))
            return
        except (CommitFailedError, DeltaError, OSError) as err:
            if attempt == MAX_ATTEMPTS:
                raise
            pause = min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random())
            log.info("append to %s conflicted (attempt %d/%d, retry in %.2fs): %s",
                     path, attempt, MAX_ATTEMPTS, pause, err)
            time.sleep(pause)


def read(path: Path, *, equals: dict[str, str] | None = None, since: tuple[str, dt.datetime] | None = None,
         columns: list[str] | None = None) -> list[dict[str, Any]]:
    """All rows of the table at `path` (none if it does not exist yet), optionally only those
    whose columns equal the given values, and only those whose time column is at or after a
    moment (`since=(column, moment)`): reading the last hour of one pipeline out of a week of
    history opens only the files that can hold it. The Delta log's min/max statistics prune the
    files before any is opened: each writer appends one pipeline's rows (a driver's progress, an
    action's event), so a file of another pipeline is never read; and appends come in time
    order, so neither is an older file."""
    conditions = [f"{identifier(column)} = {_text(value)}" for column, value in (equals or {}).items()]
    if since is not None:
        column, moment = since
        conditions.append(f"{identifier(column)} >= {_moment(moment)}")
    selected = ", ".join(map(identifier, columns)) if columns else "*"
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return query(path, f"SELECT {selected} FROM t{where}")


def query(path: Path, sql: str, *, version: int | None = None) -> list[dict[str, Any]]:
    """The rows of SQL query `sql` over the Delta table at `path`, named `t` in it, as of
    `version` (the latest when None; none if the table does not exist yet). delta-rs runs it
    (DataFusion, in Rust), so a count or an aggregate of a large table reads only its columns and
    returns one row.

    No Arrow C++ thread is involved. Arrow's dataset scan over delta-rs's Python filesystem left
    I/O threads that call into Python; one still doing so when a CLI's interpreter exits aborts
    the process ("terminate called without an active exception", exit 134) after it has printed
    its answer: one `weir status` in 20 under load."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(path), version=version)
    except TableNotFoundError:
        return []
    return select(table, sql)


def select(table: DeltaTable, sql: str) -> list[dict[str, Any]]:
    """`query` over a table already opened (one read of its log for several queries)."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register("t", table).execute(sql)).to_pylist()


def identifier(column: str) -> str:
    """`column` quoted as an SQL identifier for `query`."""
    return '"' + column.replace('"', '""') + '"'


def _text(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _moment(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError(f"a moment without a time zone is ambiguous: {moment}")
    return f"TIMESTAMP {_text(moment.astimezone(dt.UTC).isoformat())}"


def newest(path: Path, column: str, *, equals: dict[str, str] | None = None) -> dt.datetime | None:
    """The largest value of time column `column` among the files that may hold rows equal to
    `equals`, from the Delta log's file statistics alone (no data file is opened); None when
    the table does not exist, is empty, or a file lacks the statistic."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(path))
    except TableNotFoundError:
        return None
    stats = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    found: dt.datetime | None = None
    for entry in stats:
        # A file may hold rows equal to `equals` unless its min/max statistics exclude them.
        if any(entry.get(f"min.{c}") is not None and not entry[f"min.{c}"] <= v <= entry[f"max.{c}"]
               for c, v in (equals or {}).items()):
            continue
        value = entry.get(f"max.{column}")
        if value is None:
            return None
        found = value if found is None else max(found, value)
    return found
