"""The freshness deadline: gold standing still past the catalog's deadline while a driver runs
fires one alert per gold version (event log and alert sink), none while no driver runs, and
again only once gold has advanced — also across a restarted watcher (a new triggerer)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from spark_jobs import catalog
from spark_jobs.control import alerts, eventlog
from spark_jobs.control import lease as leases
from spark_jobs.control.freshness import FreshnessWatch, last_gold_commit
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from tests.integration.pipelines import write_catalog

DEADLINE_S = 600.0


def commit_gold(home: WeirHome) -> int:
    gold = PipelineTables.of(home, catalog.load("playback")).gold
    write_deltalake(str(gold), pa.table({"events": [1]}), mode="append")
    commit = last_gold_commit(gold)
    assert commit is not None
    return commit.version


def sent(home: WeirHome) -> list[dict]:
    path = alerts.sink(home)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_gold_standing_still_past_its_deadline_alerts_once_per_gold_version(
        home: WeirHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEIR_CONF", str(write_catalog(tmp_path / "conf", gold_freshness_alert_s=DEADLINE_S)))
    first = commit_gold(home)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=DEADLINE_S + 60)
    watch = FreshnessWatch(home, "playback")
    assert watch.check(later) is None, "no driver runs: a stopped stream is not late"

    with leases.acquire(home, "playback"):
        assert watch.check(dt.datetime.now(dt.UTC)) is None, "within the deadline"
        overdue = watch.check(later)
        assert overdue is not None and overdue.gold_version == first
        assert watch.check(later + dt.timedelta(minutes=5)) is None, "one alert per gold version"
        # a restarted triggerer has a new watch: the event log tells it the alert was sent
        assert FreshnessWatch(home, "playback").check(later) is None

        second = commit_gold(home)           # gold advanced: the deadline is armed again
        assert watch.check(dt.datetime.now(dt.UTC)) is None, "the new commit is not old yet"
        again = watch.check(later + dt.timedelta(seconds=60))
        assert again is not None and again.gold_version == second

    events = [e for e in eventlog.read(home, "playback") if e["action"] == "freshness"]
    assert [(e["outcome"], e["details"]["gold_version"]) for e in events] == [
        ("overdue", first), ("overdue", second)]
    assert [(a["kind"], a["gold_version"]) for a in sent(home)] == [
        ("freshness", first), ("freshness", second)]
    assert "has not advanced" in sent(home)[0]["error"]
