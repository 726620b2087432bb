"""`DriverWatchTrigger`: watches a detached driver from the triggerer, holding no worker slot.

Small, async and serialisable: its state is only the pipeline, WEIR_HOME and thresholds; all it
knows comes from the driver's lease, heartbeat and launch files (`spark_jobs.control.health`).
It fires once the driver is dead, stalled or intentionally stopped — so after a triggerer restart
the same trigger simply resumes watching the live driver. While the driver lives, it also keeps
the pipeline's freshness deadline (`spark_jobs.control.freshness`): gold standing still past the
catalog's `gold_freshness_alert_s` sends one alert, without ending the watch.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from spark_jobs.control.freshness import FreshnessWatch
from spark_jobs.control.health import assess
from spark_jobs.home import WeirHome

FIRING_VERDICTS = ("dead", "stalled", "stopped", "absent")
FRESHNESS_EVERY_S = 15.0   # the deadline is minutes long: no need to read gold's log every second


class DriverWatchTrigger(BaseTrigger):
    def __init__(self, pipeline: str, weir_home: str, stall_after_s: float,
                 poll_interval_s: float = 1.0) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.weir_home = weir_home
        self.stall_after_s = stall_after_s
        self.poll_interval_s = poll_interval_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("weir_airflow.triggers.DriverWatchTrigger", {
            "pipeline": self.pipeline, "weir_home": self.weir_home,
            "stall_after_s": self.stall_after_s, "poll_interval_s": self.poll_interval_s})

    def check(self) -> dict[str, Any]:
        """One look at the driver (blocking file reads: run in a thread)."""

        health = assess(WeirHome(Path(self.weir_home)), self.pipeline, stall_after_s=self.stall_after_s)
        return {"pipeline": self.pipeline, "verdict": health.verdict, "detail": health.detail,
                "driver_pid": health.driver_pid, "launch_pid": health.launch_pid,
                "detected_at": dt.datetime.now(dt.UTC).isoformat()}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last = None
        freshness = FreshnessWatch(WeirHome(Path(self.weir_home)), self.pipeline)
        fresh_checked = 0.0
        while True:
            seen = await asyncio.to_thread(self.check)
            if seen["verdict"] == "running" and time.monotonic() - fresh_checked >= FRESHNESS_EVERY_S:
                fresh_checked = time.monotonic()
                try:
                    await asyncio.to_thread(freshness.check)
                except Exception:   # a failed freshness look must not end the driver's watch
                    self.log.exception("%s: freshness check failed", self.pipeline)
            if seen["verdict"] != last:
                self.log.info("%s driver: %s (%s)", self.pipeline, seen["verdict"], seen["detail"])
                last = seen["verdict"]
            if seen["verdict"] in FIRING_VERDICTS:
                yield TriggerEvent(seen)
                return
            await asyncio.sleep(self.poll_interval_s)
