"""`DeltaCommitTrigger`: turns commits of a Delta table into Airflow asset events, from the triggerer.

The stream runs outside Airflow (a detached spark-submit driver), so no task can emit its asset
events as outlets. An `AssetWatcher` with this trigger polls the table's transaction log without a
JVM (`deltalake`, reading only the commits newer than the last one seen) and fires at most one
event per interval when data was committed, with the new version and its commit time. Why not the
driver or the supervisor: the driver would need Airflow credentials and would couple every
micro-batch to the API server's health, and a deferred supervisor only resumes when its driver
ends; the triggerer is already the component that watches external systems, and a watcher keeps
watching through driver restarts, back-fills and maintenance, whoever commits.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)
# Commits that rewrite files without changing the data: compaction and vacuum advance the version,
# but a downstream DAG has nothing new to read.
NO_DATA_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES"})
# At most this many commits are read to decide whether data changed; a longer gap counts as data.
MAX_COMMITS_INSPECTED = 100
STATE_KEY = "delta_version"  # the last version an event was fired for, in Airflow's asset state


@dataclass(frozen=True)
class Commit:
    """The newest commit of a table, and whether any commit since the previous look changed data."""

    version: int
    time: str | None
    operation: str | None
    data_changed: bool


class DeltaLog:
    """JVM-free reads of one Delta table's log; keeps the loaded snapshot between looks so a look
    costs the commits made since the previous one, not the table's size or history."""

    def __init__(self, table_uri: str) -> None:
        self.table_uri = table_uri
        self._table: DeltaTable | None = None

    def latest(self, since: int | None) -> Commit | None:
        """The newest commit (None while the table does not exist), and whether any commit after
        version `since` changed data (blocking I/O: call it in a thread)."""
        from deltalake.exceptions import TableNotFoundError

        try:
            return self._read(since)
        except TableNotFoundError:
            self._table = None
            return None
        except Exception:
            self._table = None   # reload from scratch next time rather than trust a half-read log
            raise

    def _read(self, since: int | None) -> Commit:
        from deltalake import DeltaTable

        if self._table is None:
            self._table = DeltaTable(self.table_uri, without_files=True)
        else:
            self._table.update_incremental()
        version = self._table.version()
        recreated = since is not None and version < since
        if recreated:   # a reset or full refresh deleted it: read its new log afresh
            self._table = DeltaTable(self.table_uri, without_files=True)
            version = self._table.version()
        new_commits = version + 1 if since is None or recreated else version - since
        history = self._table.history(max(1, min(new_commits, MAX_COMMITS_INSPECTED)))
        newest = history[0] if history else {}
        data_changed = (since is None or recreated or new_commits > MAX_COMMITS_INSPECTED
                        or not all(_changes_no_data(h) for h in history))
        return Commit(version=version, time=_commit_time(newest.get("timestamp")),
                      operation=newest.get("operation"), data_changed=data_changed)


def _changes_no_data(commit: dict[str, Any]) -> bool:
    """Compaction, vacuum, properties, and an append of no rows (a driver's claim of its lease
    leaves one in each table when it starts, `spark_jobs.tables.Fencing.claim`)."""
    if commit.get("operation") in NO_DATA_OPERATIONS:
        return True
    mode = (commit.get("operationParameters") or {}).get("mode")
    if commit.get("operation") != "WRITE" or mode != "Append":
        return False
    metrics = commit.get("operationMetrics") or {}
    added = metrics.get("numOutputRows", metrics.get("num_added_rows"))   # Spark's name, delta-rs's
    return added is not None and str(added) == "0"


def _commit_time(millis: Any) -> str | None:
    if not isinstance(millis, int | float):
        return None
    return dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC).isoformat()


class DeltaCommitTrigger(BaseEventTrigger):
    """Fires an event each time the Delta table at `table_uri` has new data committed, at most one
    per `interval_s`; its payload (the asset event's `extra["payload"]`) holds the table, the new
    version, the version of the previous event and the newest commit's time and operation."""

    def __init__(self, table_uri: str, asset_name: str, interval_s: float) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.asset_name = asset_name
        self.interval_s = interval_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("weir_airflow.delta_watch.DeltaCommitTrigger", {
            "table_uri": self.table_uri, "asset_name": self.asset_name, "interval_s": self.interval_s})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        delta_log = DeltaLog(self.table_uri)
        last = await self._stored_version()
        first_look = last is None
        while True:
            try:
                commit = await asyncio.to_thread(delta_log.latest, last)
            except Exception as err:  # a watcher outlives a bad read (log being rewritten, storage hiccup)
                log.warning("table %s: cannot read its Delta log (%s); next look in %.0f s",
                            self.asset_name, err, self.interval_s)
                await asyncio.sleep(self.interval_s)
                continue
            if commit is None and first_look:
                last, first_look = -1, False   # absent at first look: its creation is new data
            elif commit is not None and first_look:
                # What exists when the watcher starts is not news; only what is committed after.
                last, first_look = commit.version, False
                await self._store_version(last)
                log.info("table %s: watching from version %d", self.asset_name, last)
            elif commit is not None and commit.version != last:
                if commit.data_changed:
                    log.info("table %s: version %d -> %d (%s at %s)", self.asset_name, last,
                             commit.version, commit.operation, commit.time)
                    yield TriggerEvent({
                        "table": self.asset_name, "uri": self.table_uri, "version": commit.version,
                        "previous_version": last, "commit_time": commit.time,
                        "operation": commit.operation})
                last = commit.version
                await self._store_version(last)
            await asyncio.sleep(self.interval_s)

    async def _stored_version(self) -> int | None:
        """The version of the last event fired before a triggerer restart (Airflow's asset state,
        injected by the triggerer), so commits made meanwhile still fire; None outside a triggerer."""
        if self.asset_state_store is None:
            return None
        try:
            stored = await self.asset_state_store.aget(STATE_KEY)
        except Exception as err:
            log.warning("table %s: asset state unreadable (%s); watching from now", self.asset_name, err)
            return None
        return stored if isinstance(stored, int) else None

    async def _store_version(self, version: int) -> None:
        if self.asset_state_store is None:
            return
        try:
            await self.asset_state_store.aset(STATE_KEY, version)
        except Exception as err:
            log.warning("table %s: cannot keep version %d in asset state (%s)", self.asset_name,
                        version, err)
