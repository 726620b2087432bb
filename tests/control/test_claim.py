"""A new lease holder's claim (`Fencing.claim`: an empty commit carrying its token to each table,
written with delta-rs) is fenced like any of its writes: it never lands over a newer holder's
token, and a commit racing it on the same application id makes it look again. No JVM here: the
interleaving with an old holder's Spark commit in flight is `test_fencing.py`'s."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.control import platform_tables
from spark_jobs.tables import FencedWriteError, Fencing, commit_nothing

APP = Fencing("p", 0).app_id


def a_table(tmp_path: Path) -> Path:
    path = tmp_path / "silver"
    write_deltalake(str(path), pa.table({"k": ["a"], "event_date": ["2026-11-19"]}),
                    partition_by=["event_date"])
    return path


def actions(path: Path, version: int) -> set[str]:
    """The kinds of action the commit of `version` holds."""
    log = path / "_delta_log" / f"{version:020d}.json"
    return {next(iter(json.loads(line))) for line in log.read_text().splitlines() if line.strip()}


def held(path: Path) -> tuple[int, int | None]:
    table = DeltaTable(str(path))
    return table.version(), table.transaction_version(APP)


def test_a_claim_commits_no_row_and_carries_the_token(tmp_path: Path) -> None:
    path = a_table(tmp_path)
    Fencing("p", 2).claim([path, tmp_path / "no-such-table"])
    assert held(path) == (1, (2 << 32) | 1)
    assert actions(path, 1) == {"commitInfo", "txn"}    # no file, and no metadata a writer would race
    newest = DeltaTable(str(path)).history(1)[0]
    assert newest["operationMetrics"]["numOutputRows"] == "0", newest   # the asset watcher's "no data"
    assert platform_tables.query(path, "SELECT count(*) AS n FROM t") == [{"n": 1}]
    assert not (tmp_path / "no-such-table").exists()


def test_an_older_holder_claims_nothing_once_a_newer_one_has_committed(tmp_path: Path) -> None:
    path = a_table(tmp_path)
    Fencing("p", 2).claim([path])
    with pytest.raises(FencedWriteError, match="newer lease holder"):
        Fencing("p", 1).claim([path])
    assert held(path) == (1, (2 << 32) | 1), "the refused claim committed"


def race(monkeypatch: pytest.MonkeyPatch, path: Path, racer: Fencing) -> None:
    """`racer` commits its claim right after the claim under test has read the table (the first
    time it asks the table for the token), as a driver starting at the same moment would."""
    original = DeltaTable.transaction_version
    done = []

    def read_then_race(self: DeltaTable, app_id: str) -> int | None:
        seen = original(self, app_id)
        if not done:
            done.append(True)
            commit_nothing(path, racer)
        return seen

    monkeypatch.setattr(DeltaTable, "transaction_version", read_then_race)


def test_a_claim_raced_by_a_newer_holder_is_refused(tmp_path: Path, monkeypatch) -> None:
    path = a_table(tmp_path)
    race(monkeypatch, path, Fencing("p", 3))
    with pytest.raises(FencedWriteError, match="newer lease holder"):
        Fencing("p", 2).claim([path])
    monkeypatch.undo()
    assert held(path) == (1, (3 << 32) | 1)


def test_a_claim_raced_by_an_older_holder_is_tried_again_and_lands(tmp_path: Path, monkeypatch) -> None:
    path = a_table(tmp_path)
    race(monkeypatch, path, Fencing("p", 1))
    Fencing("p", 2).claim([path])
    monkeypatch.undo()
    # the older holder's commit landed first; the claim conflicted with it, looked again, landed
    assert held(path) == (2, (2 << 32) | 2)
