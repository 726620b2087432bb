"""The freshness deadline of a running pipeline: when its gold table has not advanced (no new
commit) for the catalog's `gold_freshness_alert_s` while a driver holds the lease, one alert fires
— to the event log (`freshness`) and the alert sink — and fires again only after gold advanced.

JVM-free (the Delta log is read as files), so the triggerer that watches the driver checks it on
every look. "Once" survives a triggerer restart: the alert names the gold version it is about, and
the event log is asked before a second alert for the same version is sent."""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from spark_jobs import catalog
from spark_jobs.control import alerts, eventlog
from spark_jobs.control import lease as leases
from spark_jobs.control.lease import parse_iso
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables

log = logging.getLogger(__name__)
ACTION = "freshness"


@dataclass(frozen=True)
class GoldCommit:
    version: int
    at: dt.datetime


def last_gold_commit(table: Path) -> GoldCommit | None:
    """The newest commit of the Delta table at `table` (its version and commit time), or None."""
    logs = sorted((table / "_delta_log").glob("[0-9]*.json"))
    if not logs:
        return None
    newest = logs[-1]
    for line in newest.read_text(encoding="utf-8").splitlines():
        info = json.loads(line).get("commitInfo")
        if info and info.get("timestamp"):
            return GoldCommit(int(newest.stem), dt.datetime.fromtimestamp(info["timestamp"] / 1000, dt.UTC))
    return GoldCommit(int(newest.stem), dt.datetime.fromtimestamp(newest.stat().st_mtime, dt.UTC))


@dataclass(frozen=True)
class Freshness:
    """How long gold has stood still (since its last commit, or since the driver started if later)."""

    pipeline: str
    gold_version: int | None
    still_for_s: float
    deadline_s: float

    @property
    def overdue(self) -> bool:
        return self.still_for_s > self.deadline_s


def assess(home: WeirHome, pipeline: str, now: dt.datetime | None = None) -> Freshness | None:
    """The pipeline's gold freshness, or None when no driver runs (a stopped stream is not late)."""
    holder = leases.holder(home, pipeline)
    if holder is None or not holder.is_driver:
        return None
    now = now or dt.datetime.now(dt.UTC)
    entry = catalog.load(pipeline)
    commit = last_gold_commit(PipelineTables.of(home, entry).gold)
    since = parse_iso(holder.acquired_at)
    if commit is not None and commit.at > since:
        since = commit.at
    return Freshness(pipeline, commit.version if commit else None, (now - since).total_seconds(),
                     entry.gold_freshness_alert_s)


class FreshnessWatch:
    """Fires one alert per gold version that stood still past the deadline. Holds what it sent in
    memory; a new watch (a restarted triggerer) asks the event log once."""

    def __init__(self, home: WeirHome, pipeline: str) -> None:
        self.home, self.pipeline = home, pipeline
        self._alerted: set[int | None] | None = None

    def _already_alerted(self) -> set[int | None]:
        if self._alerted is None:
            self._alerted = {(e.get("details") or {}).get("gold_version")
                             for e in eventlog.read(self.home, self.pipeline) if e["action"] == ACTION}
        return self._alerted

    def check(self, now: dt.datetime | None = None) -> Freshness | None:
        """Look once; returns the freshness it alerted about, or None."""
        seen = assess(self.home, self.pipeline, now)
        if seen is None or not seen.overdue or seen.gold_version in self._already_alerted():
            return None
        message = (f"gold of {self.pipeline} has not advanced for {seen.still_for_s / 60:.1f} min "
                   f"(deadline {seen.deadline_s / 60:.0f} min, gold version {seen.gold_version})")
        details = {"gold_version": seen.gold_version, "still_for_s": round(seen.still_for_s, 1),
                   "deadline_s": seen.deadline_s}
        eventlog.record(self.pipeline, ACTION, "overdue", actor="weir", reason=message,
                        details=details, home=self.home)
        alerts.send(self.home, {"pipeline": self.pipeline, "kind": ACTION, "error": message, **details})
        self._already_alerted().add(seen.gold_version)
        log.warning("FRESHNESS %s", message)
        return seen
