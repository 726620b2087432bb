"""The Delta-commit watcher behind the tables' assets, run as the triggerer runs it (its async
`run()`) against real Delta tables written with `deltalake`: one event when data is committed, with
the new version and commit time; nothing more until the table advances again; one event for the
commits of one interval; nothing for a compaction; a table created after the watcher started
fires once it exists; a log that cannot be read is neither news nor a missing table."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from weir_airflow.delta_watch import DeltaCommitTrigger

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(120)]
# Long enough that two commits written right after an event land inside one interval, even on a
# busy machine; short enough to keep the test to a few seconds.
INTERVAL_S = 1.5
WAIT_S = 30.0


def rows(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "v": pa.array(["x"] * n, pa.string())})


def append(path: Path, n: int = 3) -> int:
    write_deltalake(str(path), rows(n), mode="append")
    return DeltaTable(str(path)).version()


class Watching:
    """The trigger's `run()` consumed in the background, as the triggerer does; its payloads."""

    def __init__(self, trigger: DeltaCommitTrigger) -> None:
        self.trigger = trigger
        self.payloads: list[dict[str, Any]] = []
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> Watching:
        async def consume() -> None:
            async for event in self.trigger.run():
                self.payloads.append(event.payload)

        self.task = asyncio.create_task(consume())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass

    async def until(self, count: int) -> None:
        """Wait until `count` events fired (fail after WAIT_S); fail if the watcher died."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while len(self.payloads) < count:
            assert self.task is not None and not self.task.done(), self.task and self.task.exception()
            assert loop.time() < deadline, f"{len(self.payloads)} events after {WAIT_S} s: {self.payloads}"
            await asyncio.sleep(0.05)

    async def quiet_for(self, looks: int) -> None:
        """Let the watcher look `looks` more times."""
        await asyncio.sleep(looks * INTERVAL_S + 0.2)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_fires_once_per_advance_with_version_and_commit_time(tmp_path: Path) -> None:
    path = tmp_path / "gold" / "t"
    assert append(path) == 0
    trigger = DeltaCommitTrigger(table_uri=str(path), asset_name="gold.t", interval_s=INTERVAL_S)

    async def scenario() -> None:
        async with Watching(trigger) as watching:
            await watching.quiet_for(2)
            assert watching.payloads == [], "what existed before the watcher started is not news"

            before = dt.datetime.now(dt.UTC).replace(microsecond=0)
            version = await asyncio.to_thread(append, path)
            await watching.until(1)
            [first] = watching.payloads
            assert (first["table"], first["version"], first["previous_version"]) == ("gold.t", version, 0)
            assert first["uri"] == str(path) and first["operation"] == "WRITE"
            committed = dt.datetime.fromisoformat(first["commit_time"])
            assert before <= committed <= dt.datetime.now(dt.UTC), first

            await watching.quiet_for(3)
            assert len(watching.payloads) == 1, f"fired again without a commit: {watching.payloads}"

            # Two commits inside one interval: one event, for the newer one.
            await asyncio.to_thread(append, path)
            newest = await asyncio.to_thread(append, path)
            await watching.until(2)
            await watching.quiet_for(2)
            assert [(p["version"], p["previous_version"]) for p in watching.payloads[1:]] == [
                (newest, version)], watching.payloads

    run(scenario)


def test_a_compaction_or_an_append_of_no_rows_is_not_new_data(tmp_path: Path) -> None:
    path = tmp_path / "silver" / "t"
    for _ in range(3):
        append(path)
    trigger = DeltaCommitTrigger(table_uri=str(path), asset_name="silver.t", interval_s=INTERVAL_S)

    async def scenario() -> None:
        async with Watching(trigger) as watching:
            await watching.quiet_for(1)
            metrics = await asyncio.to_thread(lambda: DeltaTable(str(path)).optimize.compact())
            assert metrics["numFilesRemoved"] >= 2
            # a driver's lease claim at start: an append of no rows
            await asyncio.to_thread(lambda: write_deltalake(str(path), rows(0), mode="append"))
            compacted = DeltaTable(str(path)).version()
            await watching.quiet_for(3)
            assert watching.payloads == [], f"a compaction or an empty append fired: {watching.payloads}"

            version = await asyncio.to_thread(append, path)
            await watching.until(1)
            fired = [(p["version"], p["previous_version"]) for p in watching.payloads]
            assert fired == [(version, compacted)], watching.payloads

    run(scenario)


def test_a_table_created_after_the_watcher_started_fires_once_it_exists(tmp_path: Path) -> None:
    path = tmp_path / "quarantine" / "t"
    trigger = DeltaCommitTrigger(table_uri=str(path), asset_name="quarantine.t", interval_s=INTERVAL_S)

    async def scenario() -> None:
        async with Watching(trigger) as watching:
            await watching.quiet_for(2)
            assert watching.payloads == []
            assert await asyncio.to_thread(append, path) == 0
            await watching.until(1)
            await watching.quiet_for(2)
            assert [(p["version"], p["previous_version"]) for p in watching.payloads] == [(0, -1)]

    run(scenario)


def test_the_trigger_serialises_to_its_own_arguments() -> None:
    trigger = DeltaCommitTrigger(table_uri="/x/tables/gold/t", asset_name="gold.t", interval_s=60.0)
    classpath, kwargs = trigger.serialize()
    assert classpath == "weir_airflow.delta_watch.DeltaCommitTrigger"
    assert DeltaCommitTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_an_unreadable_log_is_neither_news_nor_a_missing_table(tmp_path: Path) -> None:
    path = tmp_path / "gold" / "t"
    assert append(path) == 0
    damaged = path / "_delta_log" / f"{1:020d}.json"
    damaged.write_text("{not json\n")   # a torn commit file, as a crashed non-atomic writer leaves
    trigger = DeltaCommitTrigger(table_uri=str(path), asset_name="gold.t", interval_s=INTERVAL_S)

    async def scenario() -> None:
        async with Watching(trigger) as watching:
            await watching.quiet_for(2)
            damaged.unlink()    # repaired: the table is at version 0, as before
            await watching.quiet_for(2)
            assert watching.payloads == [], f"a repaired log fired an event: {watching.payloads}"
            version = await asyncio.to_thread(append, path)
            await watching.until(1)
            assert [(p["version"], p["previous_version"]) for p in watching.payloads] == [(version, 0)]

    run(scenario)
