"""Append-only Delta tables of the platform itself (`tables/platform/...`), written with delta-rs
(`deltalake`), so Airflow tasks, triggers and listener threads write them without a JVM; Spark
reads them like any other Delta table.

Appends never conflict logically, but two writers may race on the same table version (or on
creating the table); delta-rs retries commit conflicts itself and `append` adds a bounded retry
around the whole write for the creation race.
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
    moment (`since=(column, moment)`): files whose statistics end before it are never opened, so
    reading the last hour of a week of history costs the last hour."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(path))
    except TableNotFoundError:
        return []
    import pyarrow as pa
    import pyarrow.dataset as ds

    condition = None
    for column, value in (equals or {}).items():
        term = ds.field(column) == value
        condition = term if condition is None else condition & term
    pruning = None
    if since is not None:
        column, moment = since
        term = ds.field(column) >= pa.scalar(moment, pa.timestamp("us", tz="UTC"))
        condition = term if condition is None else condition & term
        # Appends come in time order, so per-file min/max statistics of the time column let
        # delta-rs drop every older file before Arrow sees it.
        pruning = [(column, ">=", moment)]
    dataset = table.to_pyarrow_dataset(file_pruning_predicate=pruning)
    # Single-threaded: a CLI (`weir status`) exits right after reading, and Arrow's scan threads
    # still alive at interpreter exit abort the process ("terminate called without an active
    # exception", about one exit in three with `to_pyarrow_table`). The tables are small.
    return dataset.to_table(filter=condition, columns=columns, use_threads=False).to_pylist()


def exists(path: Path) -> bool:
    return (path / "_delta_log").is_dir() and any((path / "_delta_log").glob("*.json"))
